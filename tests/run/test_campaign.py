"""A real headless Locust campaign against the simulated engine, checked record by record."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.run.conftest import only_run_dir, read_truth, run_locust, sim_scenario, write_scenario

pytestmark = pytest.mark.slow

TIMING_AGREEMENT_S = 0.005  # our TTFT and E2E against the simulator's truth, at light load

MULTI_TURN = {
    "name": "mt",
    "kind": "multi-turn",
    "system_tokens": 300,
    "user_turns": 3,
    "turn_tokens": 40,
}


def test_multi_turn_campaign_records_every_request_with_the_right_labels(tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    scenario = write_scenario(
        tmp_path / "s.yaml",
        sim_scenario(conversation=MULTI_TURN, tiers=[1, 4], iterations=2, sim_args={"truth_log": str(truth)}),
    )
    done = run_locust(["--scenario", str(scenario), "--results-dir", str(tmp_path / "results")], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "results")
    records = pd.read_parquet(run_dir / "records.parquet")

    # users x iterations x turns requests in each tier, all ok, labelled with their tier
    counts = records.groupby("tier_users").size().to_dict()
    assert counts == {1: 1 * 2 * 3, 4: 4 * 2 * 3}
    assert (records["status"] == "ok").all()
    assert records["record_id"].is_unique
    assert set(records["tier_index"]) == {0, 1}
    assert (records["target"] == "sim/grill-sim/mt").all()
    per_user = records[records.tier_users == 4].groupby(["user_id"]).size()
    assert list(per_user) == [6, 6, 6, 6]

    # history grows turn by turn and is served from the prefix cache on the vllm profile
    by_turn = records.groupby("turn")["prompt_tokens"].median()
    assert by_turn.is_monotonic_increasing and by_turn.iloc[-1] > by_turn.iloc[0]
    later_turns = records[records.turn >= 1]
    assert (later_turns["cached_tokens"] > 0).all()

    phases = pd.read_csv(run_dir / "phases.csv")
    assert list(phases["complete"]) == [True, True]
    assert list(phases["iterations_done"]) == [2, 8]
    assert (run_dir / "summary.csv").exists() and (run_dir / "config.yaml").exists()
    assert "requests recorded" in done.stdout

    # every request carried its record id as X-Request-Id: the simulator's truth joins on it
    truth_by_id = {t["request_id"]: t for t in read_truth(truth)}
    assert set(truth_by_id) == set(records["record_id"])
    # at light load our TTFT and E2E match the simulator's own emission times within 5 ms: at the median
    # and at p90 of all 30 requests. A timing defect moves every request it touches by a step of the
    # engine (12 ms) or more, so one that touches a tenth of them fails; a loaded host that delays the
    # simulator's write of three of them does not (a p99 of 6 requests was their maximum).
    first_token = np.array([truth_by_id[i]["first_token"] for i in records["record_id"]])
    end = np.array([truth_by_id[i]["end"] for i in records["record_id"]])
    ttft_error = np.abs(records["ttft_s"].to_numpy() - (first_token - records["wall_start"].to_numpy()))
    e2e_error = np.abs(records["e2e_s"].to_numpy() - (end - records["wall_start"].to_numpy()))
    for error in (ttft_error, e2e_error):
        assert (
            np.percentile(error, 50) < TIMING_AGREEMENT_S and np.percentile(error, 90) < TIMING_AGREEMENT_S
        ), error


def test_shared_prefix_and_unique_prompts_show_their_cache_behaviour(tmp_path: Path) -> None:
    data = sim_scenario(
        conversation={"name": "sp", "kind": "shared-prefix", "prefix_tokens": 800, "question_tokens": 30},
        tiers=[3],
    )
    data["conversations"].append({"name": "up", "kind": "unique-prompts", "prompt_tokens": 600})
    data["targets"].append({"backend": "sim", "model": "grill-sim", "conversation": "up"})
    scenario = write_scenario(tmp_path / "s.yaml", data)
    done = run_locust(
        ["--scenario", str(scenario), "--results-dir", str(tmp_path / "r"), "--iterations", "2"], tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    records = pd.read_parquet(only_run_dir(tmp_path / "r") / "records.parquet")
    shared = records[records.conversation == "sp"].sort_values("wall_start")
    unique = records[records.conversation == "up"]
    assert len(shared) == 6 and len(unique) == 6
    # each record names the workload kind that produced it, and each tier row too
    assert set(shared["kind"]) == {"shared-prefix"} and set(unique["kind"]) == {"unique-prompts"}
    phases = pd.read_csv(only_run_dir(tmp_path / "r") / "phases.csv")
    assert dict(zip(phases["conversation"], phases["kind"], strict=True)) == {
        "sp": "shared-prefix",
        "up": "unique-prompts",
    }
    # every shared-prefix request sent after the first one's prefill (its first token) finds the prefix
    # cached (block granularity); one sent while it was still in prefill may not, as on vLLM
    first = shared.iloc[0]
    after = shared[shared["wall_start"] > first["wall_start"] + first["ttft_s"]]
    assert len(after) >= 3  # at least every user's second iteration
    assert (after["cached_tokens"] >= 800 - 16).all()
    assert (unique["cached_tokens"] <= 16).all()


def test_bad_scenario_exits_2_with_one_line(tmp_path: Path) -> None:
    data = sim_scenario(conversation=MULTI_TURN, tiers=[1])
    data["targets"][0]["backend"] = "vlm"
    scenario = write_scenario(tmp_path / "bad.yaml", data)
    done = run_locust(["--scenario", str(scenario)], tmp_path, timeout_s=60)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("grill:")]
    assert len(errors) == 1 and "targets[0].backend" in errors[0] and "vlm" in errors[0]
    assert "Traceback" not in done.stderr


def test_a_bad_flag_of_a_plain_run_is_named_as_the_flag(tmp_path: Path) -> None:
    args = [
        "--host",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--engine",
        "vlm",
        "ShortBaselineUser",
        "-t",
        "1s",
    ]
    done = run_locust(args, tmp_path, timeout_s=60)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("grill:")]
    assert len(errors) == 1 and errors[0].startswith("grill: --engine: unknown engine 'vlm'"), done.stderr[
        -2000:
    ]


def test_plain_user_runs_without_a_scenario(tmp_path: Path) -> None:
    from grill_locust.sim import SimProcess

    with SimProcess.start(profile="vllm", served_model_name="m") as sim:
        done = run_locust(
            [
                "--host",
                sim.url,
                "--model",
                "m",
                "ShortBaselineUser",
                "-u",
                "2",
                "-r",
                "2",
                "-t",
                "10s",  # 5 s passed with no reply finished while a loaded machine was still starting up
                "--think-time",
                "0",
                "--results-dir",
                str(tmp_path / "r"),
            ],
            tmp_path,
            timeout_s=90,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    records = pd.read_parquet(only_run_dir(tmp_path / "r") / "records.parquet")
    # 256-token replies take ~3 s: each user finishes one and is stopped in the middle of the next,
    # which is still recorded, as cut by the stop
    ok = records[records.status == "ok"]
    cut = records[records.status != "ok"]
    assert len(ok) >= 2 and len(cut) >= 1
    assert set(cut["status"]) == {"stream_cut"} and set(cut["error"]) == {"cancelled"}
    assert set(records["conversation"]) == set(records["kind"]) == {"short-baseline"}


def test_users_rate_and_run_time_flags_are_ignored_with_one_warning_when_a_scenario_drives(
    tmp_path: Path,
) -> None:
    data = sim_scenario(
        conversation={"name": "short", "kind": "short-baseline", "prompt_tokens": 30}, tiers=[2]
    )
    scenario = write_scenario(tmp_path / "s.yaml", data)
    done = run_locust(
        [
            "--scenario",
            str(scenario),
            "--results-dir",
            str(tmp_path / "r"),
            "-u",
            "50",
            "-r",
            "5",
            "-t",
            "1s",
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    warnings = [line for line in done.stderr.splitlines() if "ignored" in line]
    assert len(warnings) == 1 and "-u/-r/-t" in warnings[0]
    records = pd.read_parquet(only_run_dir(tmp_path / "r") / "records.parquet")
    assert len(records) == 2  # the tier's 2 users, not 50; and the run was not cut at 1 s


def test_a_second_run_sends_none_of_the_first_runs_prompts(tmp_path: Path) -> None:
    # the engine's prefix cache outlives a run: a rerun that resent the same "unique" prompts would be
    # served from it
    from grill_locust.sim import SimProcess

    with SimProcess.start(profile="vllm", served_model_name="m") as sim:
        data = {
            "name": "rerun",
            "backends": [{"name": "engine", "engine": "vllm", "url": sim.url}],
            "models": [{"name": "m", "max_tokens": 4, "ignore_eos": True}],
            "conversations": [{"name": "u", "kind": "unique-prompts", "prompt_tokens": 600}],
            "targets": [{"backend": "engine", "model": "m", "conversation": "u"}],
            "load": {"tiers": [2], "iterations": 2, "pause_s": 0, "think_time_s": 0},
        }
        scenario = write_scenario(tmp_path / "s.yaml", data)
        cached = []
        for run in ("a", "b"):
            done = run_locust(["--scenario", str(scenario), "--results-dir", str(tmp_path / run)], tmp_path)
            assert done.returncode == 0, done.stderr[-3000:]
            records = pd.read_parquet(only_run_dir(tmp_path / run) / "records.parquet")
            assert len(records) == 4 and (records["status"] == "ok").all()
            cached.append(records["cached_tokens"].max())
    assert cached[0] < 32 and cached[1] < 32  # a block or two of chat template at most, not the prompt


def test_the_demo_runs_from_an_installed_package_beside_the_projects_folders(tmp_path: Path) -> None:
    # the Docker image installs the package into site-packages and keeps locustfiles/ and scenarios/ in
    # /app: the default scenario is the one in the folder locust runs from
    import shutil

    repo = Path(__file__).resolve().parents[2]
    site = tmp_path / "site"
    shutil.copytree(
        repo / "grill_locust", site / "grill_locust", ignore=shutil.ignore_patterns("__pycache__")
    )
    for folder in ("locustfiles", "scenarios"):
        shutil.copytree(repo / folder, tmp_path / "app" / folder)
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-m", "locust", "-f", "locustfiles/coding.py", "--headless", "--only-summary"]
        + ["--tiers", "1", "--iterations", "1", "--pause", "0", "--results-dir", str(tmp_path / "r")],
        cwd=tmp_path / "app",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run = only_run_dir(tmp_path / "r")
    assert (run / "records.parquet").is_file()
    assert "demo" in (run / "config.yaml").read_text()


def test_a_multi_turn_conversation_runs_over_the_completions_api(tmp_path: Path) -> None:
    conversation = {
        "name": "mt",
        "kind": "multi-turn",
        "system_tokens": 200,
        "user_turns": 2,
        "turn_tokens": 40,
    }
    data = sim_scenario(conversation=conversation, tiers=[1], max_tokens=8)
    data["backends"][0]["api"] = "completions"
    scenario = write_scenario(tmp_path / "s.yaml", data)
    done = run_locust(["--scenario", str(scenario), "--results-dir", str(tmp_path / "r")], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    records = pd.read_parquet(only_run_dir(tmp_path / "r") / "records.parquet").sort_values("turn")
    assert (records["status"] == "ok").all() and records["turn"].tolist() == [0, 1]
    # turn 1 carries the system prompt, turn 0, its reply and a role label per message
    first, second = records["prompt_tokens"].tolist()
    assert second > first + 8 + 40


def test_the_pause_is_held_between_tiers_and_not_after_the_last(tmp_path: Path) -> None:
    pause_s = 8.0
    data = sim_scenario(
        conversation={"name": "short", "kind": "short-baseline", "prompt_tokens": 40}, tiers=[1, 2]
    )
    data["load"]["pause_s"] = pause_s
    scenario = write_scenario(tmp_path / "s.yaml", data)
    done = run_locust(["--scenario", str(scenario), "--results-dir", str(tmp_path / "r")], tmp_path)
    exited_wall = time.time()
    assert done.returncode == 0, done.stderr[-3000:]
    phases = pd.read_csv(only_run_dir(tmp_path / "r") / "phases.csv")
    assert phases["complete"].all() and len(phases) == 2
    # the engine drains for the pause before the next tier; after the last one the run ends
    assert phases["start_wall"].iloc[1] - phases["end_wall"].iloc[0] >= pause_s - 0.1
    assert exited_wall - phases["end_wall"].iloc[1] < pause_s / 2


def test_a_tier_cut_by_its_time_cap_counts_its_late_iterations_and_exits_incomplete(tmp_path: Path) -> None:
    """Sends in flight when the cap ends a rate tier finish after its phases.csv row was written: the row
    counts them as records.jsonl holds them (one request per send), and the run exits TIER_INCOMPLETE."""
    from grill_locust.run import exit_codes

    data = sim_scenario(
        conversation={"name": "short", "kind": "short-baseline", "prompt_tokens": 20},
        tiers=[1],
        max_tokens=32,
        sim_args={"step_a_ms": 20},
    )
    data["load"] = {"rates": [200], "duration_s": 20, "pause_s": 0.2, "tier_timeout_s": 3}
    scenario = write_scenario(tmp_path / "s.yaml", data)
    done = run_locust(
        ["--scenario", str(scenario), "--results-dir", str(tmp_path / "r"), "--telemetry-interval", "0"],
        tmp_path,
    )
    assert done.returncode == exit_codes.TIER_INCOMPLETE, done.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "r")
    phases = pd.read_csv(run_dir / "phases.csv")
    records = pd.read_json(run_dir / "records.jsonl", lines=True)
    assert not phases["complete"].iloc[0] and "time cap 3 s reached" in phases["note"].iloc[0]
    assert phases["iterations_done"].iloc[0] == len(records), (phases.to_dict("records"), len(records))

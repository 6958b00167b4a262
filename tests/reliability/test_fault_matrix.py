"""The standing fault suite: every fault of the simulated engine, a refused connection, a 429 storm, the
engine stopping mid-tier and coming back, a worker killed mid-tier, in real campaigns. Each request is
one record with the right status, the run goes on, and the records balance against the engine's own
log (`ledger`): none lost, none written twice, none labelled with another phase. `bench/soak.py` is the
long version (all faults mixed, many tiers, minutes). Compressed and malformed replies:
test_engine_replies.py."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from reliability_servers import UnansweredPort, closed_port

from grill_locust.run import exit_codes
from grill_locust.sim import SimProcess
from tests.reliability.ledger import ledger
from tests.run.conftest import (
    only_run_dir,
    read_truth,
    run_locust,
    sim_scenario,
    truth_once_it_holds,
    write_scenario,
)
from tests.run.test_distributed import _wait_for_records, finish, locust, start_cluster

pytestmark = pytest.mark.slow

TIER_USERS = 2
ITERATIONS = 2
PER_TARGET = TIER_USERS * ITERATIONS
TRICKLE_MS = 100
MAX_TOKENS = 6  # a trickled answer takes ~MAX_TOKENS x TRICKLE_MS
RETRIES_429 = 2
SHORT = {"name": "sb", "kind": "short-baseline", "prompt_tokens": 20}

# backend name -> (fault header sent to the simulated engine, timeouts, status every request must get)
MATRIX: dict[str, tuple[str | None, dict[str, float], str]] = {
    "healthy": ("none", {}, "ok"),
    "f500": ("500", {}, "http_500"),
    "f503": ("503", {}, "http_503"),
    "f429": ("429", {}, "http_429"),
    "stall": ("stall", {"first_token_s": 1.0}, "timeout"),
    "stall_mid": ("stall_mid", {"idle_s": 0.5}, "timeout"),  # the first token, then nothing
    "cut": ("cut", {}, "stream_cut"),
    "bad_json": ("bad_json", {}, "bad_event"),
    "trickle": ("trickle", {"total_s": 5.0}, "ok"),
    "trickle_past_total": ("trickle", {"total_s": 0.35}, "timeout"),
    "refused": (None, {"connect_s": 1.0}, "connect"),
    "unanswered": (None, {"connect_s": 0.5}, "connect"),
    "f429_retried": ("429", {}, "http_429"),
    "healthy_after": ("none", {}, "ok"),
}


def matrix_scenario(sim_url: str, unanswered_url: str) -> dict[str, Any]:
    no_engine_urls = {"refused": f"http://127.0.0.1:{closed_port()}", "unanswered": unanswered_url}
    backends = []
    for name, (fault, timeouts, _) in MATRIX.items():
        backend: dict[str, Any] = {"name": name, "engine": "vllm", "url": sim_url}
        if fault is None:
            backend.update(engine="openai", url=no_engine_urls[name])
        else:
            backend["headers"] = {"x-grill-fault": fault}
        if timeouts:
            backend["timeouts"] = timeouts
        if name == "f429_retried":
            backend["retries"] = RETRIES_429
        backends.append(backend)
    return {
        "name": "faults",
        "backends": backends,
        "models": [{"name": "grill-sim", "max_tokens": MAX_TOKENS, "ignore_eos": True}],
        "conversations": [SHORT],
        "targets": [{"backend": name, "model": "grill-sim", "conversation": "sb"} for name in MATRIX],
        # faults on purpose: each faulty tier is marked, and the campaign goes on without holding for the engine
        "load": {
            "tiers": [TIER_USERS],
            "iterations": ITERATIONS,
            "pause_s": 0.1,
            "think_time_s": 0.0,
            "engine_wait_s": 0,
        },
    }


def test_every_fault_is_one_record_with_its_status_and_none_is_lost(tmp_path: Path) -> None:
    truth_path = tmp_path / "truth.jsonl"
    extra = ["--fault-trickle-ms", str(TRICKLE_MS)]
    with (
        SimProcess.start("vllm", truth_log=str(truth_path), extra_args=extra) as sim,
        UnansweredPort() as silent,
    ):
        data = matrix_scenario(sim.url, silent.url)
        scenario = write_scenario(tmp_path / "s.yaml", data)
        done = run_locust(
            ["--scenario", str(scenario), "--results-dir", str(tmp_path / "r"), "--telemetry-interval", "0"],
            tmp_path,
            timeout_s=180,
        )
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    # f500's one message on every request, the engine answering: a refusal, which the exit code says
    assert done.returncode == exit_codes.ENGINE_REFUSED, done.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "r")
    records = pd.read_parquet(run_dir / "records.parquet")
    truth = read_truth(truth_path)

    # the run went on through every fault: each tier done, those that failed marked as an outage (f500:
    # refused)
    phases = pd.read_csv(run_dir / "phases.csv", keep_default_na=False)
    assert len(phases) == len(MATRIX) and (phases["iterations_done"] == PER_TARGET).all()
    healthy = {name for name, (_, _, status) in MATRIX.items() if status == "ok"}
    complete = dict(zip(phases["backend"], phases["complete"], strict=True))
    assert complete == {name: name in healthy for name in MATRIX}, phases.to_dict("records")
    notes = dict(zip(phases["backend"], phases["note"], strict=True))
    assert notes["f500"].startswith("refused: Internal server error (simulated)"), notes["f500"]
    assert all("engine outage" in notes[name] for name in MATRIX if name not in healthy | {"f500"}), notes

    # each request one record with the status its fault calls for
    for name, (_, _, status) in MATRIX.items():
        rows = records[records.backend == name]
        assert set(rows["status"]) == {status}, (name, rows[["status", "error"]].to_dict("records"))
    counts = records.groupby("backend").size().to_dict()
    assert counts == {**dict.fromkeys(MATRIX, PER_TARGET), "f429_retried": PER_TARGET * (1 + RETRIES_429)}
    assert records["record_id"].is_unique

    # nothing lost, nothing counted twice: records = requests the engine saw + attempts never connected
    refused = records[records.backend == "refused"]
    unanswered = records[records.backend == "unanswered"]
    assert len(records) == len(truth) + len(refused) + len(unanswered)
    fault_of = {name: fault for name, (fault, _, _) in MATRIX.items() if fault is not None}
    seen_faults = Counter(t["fault"] or "none" for t in truth)
    recorded_faults = Counter(fault_of[b] for b in records["backend"] if b in fault_of)
    assert seen_faults == recorded_faults

    # timeouts name the limit that fired; errors are short and say what happened
    stall = records[records.backend == "stall"]
    assert all("first_token_s=1" in e for e in stall["error"])
    assert (stall["e2e_s"] >= 0.9).all() and (stall["e2e_s"] < 3.0).all()
    stall_mid = records[records.backend == "stall_mid"]  # not total_s's 600 s: idle_s after the first token
    assert all("idle_s=0.5" in e for e in stall_mid["error"]) and (stall_mid["output_tokens"] == 1).all()
    assert (stall_mid["e2e_s"] - stall_mid["ttft_s"] >= 0.45).all() and (stall_mid["e2e_s"] < 3.0).all()
    past_total = records[records.backend == "trickle_past_total"]
    assert (past_total["e2e_s"] < 1.5).all() and all("total_s=0.35" in e for e in past_total["error"])
    assert (past_total["output_tokens"] < MAX_TOKENS).all()  # timings so far are kept
    assert all("refused" in e for e in refused["error"])
    assert all("connect timed out after 0.5 s" in e for e in unanswered["error"])
    assert (unanswered["e2e_s"] >= 0.4).all() and (unanswered["e2e_s"] < 2.0).all()
    trickled = records[records.backend == "trickle"]
    assert (trickled["itl_p50_s"] >= TRICKLE_MS / 1000 * 0.8).all()
    assert (trickled["output_tokens"] == MAX_TOKENS).all()
    assert set(records.loc[records.backend == "f500", "http_status"]) == {500}

    # opt-in 429 retries: every attempt is a record; the retried ones say which retry they are
    retried = records[records.backend == "f429_retried"]
    assert Counter(retried["retries"]) == {n: PER_TARGET for n in range(RETRIES_429 + 1)}
    assert set(records.loc[records.backend != "f429_retried", "retries"]) == {0}  # no silent retries

    accounts = ledger("matrix", records, truth, phases)
    assert accounts.clean, accounts


MIX_KINDS = "500,503,429,stall,stall_mid,cut,bad_json,trickle"
STATUS_OF_FAULT = {
    None: "ok",
    "500": "http_500",
    "503": "http_503",
    "429": "http_429",
    "stall": "timeout",
    "stall_mid": "timeout",
    "cut": "stream_cut",
    "bad_json": "bad_event",
    "trickle": "ok",
}


def test_a_seeded_fault_mix_on_a_simulated_engine_the_run_starts(tmp_path: Path) -> None:
    truth_path = tmp_path / "truth.jsonl"
    sim_args = {
        "truth_log": str(truth_path),
        "fault_rate": 0.7,
        "fault_kinds": MIX_KINDS,
        "fault_seed": 3,
        "fault_trickle_ms": TRICKLE_MS,
    }
    data = {
        "name": "mix",
        "backends": [
            {
                "name": "sim",
                "engine": "sim",
                "sim_args": sim_args,
                "timeouts": {"first_token_s": 1.0, "idle_s": 1.0, "total_s": 5.0},
            }
        ],
        "models": [{"name": "grill-sim", "max_tokens": MAX_TOKENS, "ignore_eos": True}],
        "conversations": [
            {"name": "mt", "kind": "multi-turn", "system_tokens": 60, "user_turns": 2, "turn_tokens": 20}
        ],
        "targets": [{"backend": "sim", "model": "grill-sim", "conversation": "mt"}],
        "load": {"tiers": [3], "iterations": 4, "pause_s": 0.1, "think_time_s": 0.0, "engine_wait_s": 0},
    }
    scenario = write_scenario(tmp_path / "s.yaml", data)
    done = run_locust(
        ["--scenario", str(scenario), "--results-dir", str(tmp_path / "r"), "--telemetry-interval", "0"],
        tmp_path,
        timeout_s=180,
    )
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    # 1: Locust's exit code when requests failed; TIER_INCOMPLETE: the draw made an outage, not run again
    assert done.returncode in (0, 1, exit_codes.TIER_INCOMPLETE), done.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "r")
    records = pd.read_parquet(run_dir / "records.parquet")
    truth = read_truth(truth_path)

    assert len(records) == len(truth) and records["record_id"].is_unique
    expected = Counter(STATUS_OF_FAULT[t["fault"]] for t in truth)
    assert Counter(records["status"]) == expected
    assert len(expected) >= 4  # the draw really mixed faults
    # a conversation stops at its first failed turn (no reply to carry forward): never more turns than 2
    per_conversation = records.groupby("conversation_id")
    assert per_conversation.size().max() <= 2
    for _, rows in per_conversation:
        rows = rows.sort_values("turn")
        assert list(rows["turn"]) == list(range(len(rows)))
        assert (rows["status"].iloc[:-1] == "ok").all()
    phases = pd.read_csv(run_dir / "phases.csv")
    assert list(phases["iterations_done"]) == [3 * 4]
    # more than half the requests failed (a seeded 70 % of faults, trickles succeed): an outage, marked
    assert list(phases["complete"]) == [(records["status"] != "ok").mean() <= 0.5]
    accounts = ledger("seeded mix", records, truth, phases)
    assert accounts.clean, accounts


def test_a_429_storm_with_retries_records_every_attempt_once(tmp_path: Path) -> None:
    truth_path = tmp_path / "truth.jsonl"
    retries = 2
    sim_args = {"truth_log": str(truth_path), "fault_rate": 0.8, "fault_kinds": "429", "fault_seed": 5}
    data = sim_scenario(
        conversation=SHORT, tiers=[10], iterations=2, sim_args=sim_args, max_tokens=MAX_TOKENS
    )
    data["backends"][0]["retries"] = retries
    data["load"]["engine_wait_s"] = 0  # 429s on purpose: no outage hold or re-run
    scenario = write_scenario(tmp_path / "s.yaml", data)
    done = run_locust(
        ["--scenario", str(scenario), "--results-dir", str(tmp_path / "r"), "--telemetry-interval", "0"],
        tmp_path,
        timeout_s=180,
    )
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    # the storm is an outage (429: not now), not run again (engine_wait_s 0): the tier is incomplete
    assert done.returncode == exit_codes.TIER_INCOMPLETE, done.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "r")
    records = pd.read_parquet(run_dir / "records.parquet")
    truth = truth_once_it_holds(truth_path, set(records["record_id"]))
    phases = pd.read_csv(run_dir / "phases.csv")

    assert Counter(records["status"]).keys() == {"ok", "http_429"}
    # each 429 short of the last retry is followed by exactly one attempt more
    attempts = Counter(zip(records["retries"], records["status"], strict=True))
    for n in range(retries):
        assert attempts[(n + 1, "ok")] + attempts[(n + 1, "http_429")] == attempts[(n, "http_429")]
    assert sum(count for (n, _), count in attempts.items() if n == 0) == 10 * 2  # one first try per iteration
    accounts = ledger("429 storm", records, truth, phases)
    assert accounts.clean, accounts


def test_the_engine_stopping_mid_tier_and_coming_back_loses_no_record(tmp_path: Path) -> None:
    # a slow engine (a request ~0.3 s) stops during the first tier; requests then fail to connect, and
    # it is back, on the same port, before the second tier
    truth_paths = [tmp_path / "truth-before.jsonl", tmp_path / "truth-after.jsonl"]
    slow = ["--step-a-ms", "20"]
    engine = SimProcess.start("vllm", truth_log=str(truth_paths[0]), extra_args=slow)
    port = engine.port
    data = sim_scenario(conversation=SHORT, tiers=[3, 3], iterations=8, max_tokens=16)
    data["backends"] = [{"name": "sim", "engine": "vllm", "url": engine.url, "timeouts": {"connect_s": 1.0}}]
    data["load"]["pause_s"] = 6.0  # room for the engine to come back before the second tier
    scenario = write_scenario(tmp_path / "s.yaml", data)
    run = locust(
        [
            "--headless",
            "--scenario",
            str(scenario),
            "--results-dir",
            str(tmp_path / "r"),
            "--telemetry-interval",
            "0",
        ],
        tmp_path,
        tmp_path / "locust.log",
    )
    try:
        _wait_for_records(tmp_path / "r", 3)
        engine.stop()
        stopped_at = time.time()
        engine = SimProcess.start("vllm", port=port, truth_log=str(truth_paths[1]), extra_args=slow)
        back_at = time.time()
        code = run.wait(timeout=180)
    finally:
        if run.poll() is None:
            run.kill()
        engine.stop()
    log = (tmp_path / "locust.log").read_text()
    assert "Traceback" not in log and code in (0, 1), log[-3000:]
    run_dir = only_run_dir(tmp_path / "r")
    records = pd.read_parquet(run_dir / "records.parquet")
    phases = pd.read_csv(run_dir / "phases.csv")
    truth = [line for path in truth_paths for line in read_truth(path)]

    # the outage happened, and the engine served again after it
    assert (records["status"] == "connect").any(), Counter(records["status"])
    assert ((records["status"] == "ok") & (records["wall_start"] > back_at)).any()
    assert not ((records["status"] == "ok") & records["wall_start"].between(stopped_at, back_at - 1.0)).any()
    accounts = ledger("engine stopped and restarted", records, truth, phases)
    assert accounts.clean, accounts


def test_a_killed_worker_loses_only_what_the_run_counts_lost(tmp_path: Path) -> None:
    # SIGKILL: its unshipped records are gone; every request the engine saw from it without a record is
    # among the iterations the run reports lost on that worker, and nothing else is missing
    truth_path = tmp_path / "truth.jsonl"
    data = sim_scenario(
        conversation=SHORT, tiers=[4], iterations=4, max_tokens=48, sim_args={"truth_log": str(truth_path)}
    )
    scenario = write_scenario(tmp_path / "s.yaml", data)
    master, workers = start_cluster(tmp_path, scenario, workers=2)
    _wait_for_records(tmp_path / "results", 3)
    workers[1].kill()
    code = finish(master, workers)
    assert code in (0, 1), (tmp_path / "master.log").read_text()[-3000:]
    run_dir = only_run_dir(tmp_path / "results")
    records = pd.read_parquet(run_dir / "records.parquet")
    phases = pd.read_csv(run_dir / "phases.csv")
    truth = truth_once_it_holds(truth_path, set(records["record_id"]))
    assert "iterations lost on worker" in str(phases["note"].iloc[0])
    accounts = ledger("killed worker", records, truth, phases)
    assert accounts.lost == accounts.duplicated == accounts.misattributed == 0, accounts

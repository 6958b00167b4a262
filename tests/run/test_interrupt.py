"""Stopping a run mid-tier (SIGINT, SIGTERM, kill -9) and resuming it: every finished request is kept."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from grill_locust.verdicts import SATURATION_LAG_P99_MS
from tests.run.conftest import (
    LOCUSTFILE,
    only_run_dir,
    read_truth,
    run_locust,
    sim_scenario,
    truth_once_it_holds,
    write_scenario,
)
from tests.run.test_distributed import finish, start_cluster
from tests.synthetic import to_older_column_names

pytestmark = pytest.mark.slow

SHORT = {"name": "short", "kind": "short-baseline", "prompt_tokens": 40}


def start_local(tmp_path: Path, scenario: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(LOCUSTFILE),
            "--headless",
            "--scenario",
            str(scenario),
            "--results-dir",
            str(tmp_path / "results"),
            *extra,
        ],
        cwd=tmp_path,
        env=env,
        stdout=open(tmp_path / "out.log", "wb"),
        stderr=subprocess.STDOUT,
    )


def jsonl_lines(run_root: Path) -> int:
    files = list(run_root.glob("*/records.jsonl"))
    return len(files[0].read_text().splitlines()) if files else 0


def wait_for_lines(run_root: Path, n: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while jsonl_lines(run_root) < n:
        assert time.monotonic() < deadline, f"fewer than {n} records after {timeout_s} s"
        time.sleep(0.1)


def long_tier(tmp_path: Path, truth: Path) -> Path:
    # 3 users, 10 conversations each of ~0.6 s: a tier far longer than the test waits
    data = sim_scenario(
        conversation=SHORT, tiers=[3], iterations=10, max_tokens=48, sim_args={"truth_log": str(truth)}
    )
    return write_scenario(tmp_path / "s.yaml", data)


def assert_stopped_cleanly(tmp_path: Path, truth: Path) -> pd.DataFrame:
    run_dir = only_run_dir(tmp_path / "results")
    records = pd.read_parquet(run_dir / "records.parquet")
    assert len(records) == jsonl_lines(tmp_path / "results")
    assert records["record_id"].is_unique
    cut = records[records.status != "ok"]
    assert set(cut["status"]) <= {"stream_cut"} and set(cut["error"]) <= {"cancelled"}
    # the in-flight requests too, recorded as cut: the engine saw exactly the requests we recorded
    truth_ids = {t["request_id"] for t in truth_once_it_holds(truth, set(records["record_id"]))}
    assert set(records["record_id"]) == truth_ids
    phases = pd.read_csv(run_dir / "phases.csv")
    assert not bool(phases["complete"].iloc[0]) and "run stopped" in phases["note"].iloc[0]
    return records


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_a_headless_run_keeps_every_request_and_marks_the_tier_incomplete(
    tmp_path: Path, sig: int
) -> None:
    truth = tmp_path / "truth.jsonl"
    proc = start_local(tmp_path, long_tier(tmp_path, truth))
    wait_for_lines(tmp_path / "results", 4)
    proc.send_signal(sig)
    proc.wait(timeout=60)
    records = assert_stopped_cleanly(tmp_path, truth)
    assert (records.status == "ok").sum() >= 4
    assert "requests recorded" in (tmp_path / "out.log").read_text()


def test_a_stop_is_not_a_saturated_load_generator(tmp_path: Path) -> None:
    """Locust's `Runner.stop()` holds the hub (tens of ms here) before it cuts the users: that stall is
    the stop's, and must not flag the tier through the lag its cut records carry."""
    # four users whose streams all wait on a slow engine (a 0.5 s step) when the signal comes
    data = sim_scenario(conversation=SHORT, tiers=[4], max_tokens=64, sim_args={"step_a_ms": 500})
    proc = start_local(tmp_path, write_scenario(tmp_path / "s.yaml", data))
    # the tier's start, however long the start-up took on this machine (6 s fixed was not always enough),
    # then time for the four users to spawn and send: each request lasts 64 steps of 0.5 s
    deadline = time.monotonic() + 90
    while "tier 1/1 start" not in (tmp_path / "out.log").read_text(errors="replace"):
        assert proc.poll() is None and time.monotonic() < deadline, "the tier never started"
        time.sleep(0.1)
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    run_dir = only_run_dir(tmp_path / "results")
    records = pd.read_parquet(run_dir / "records.parquet")
    assert len(records) == 4 and (records["error"] == "cancelled").all()
    assert (records["worker_lag_p99_ms"] <= SATURATION_LAG_P99_MS).all(), records["worker_lag_p99_ms"]
    assert not pd.read_csv(run_dir / "summary.csv")["saturated"].any()


def test_sigint_to_the_master_of_a_distributed_run(tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    master, workers = start_cluster(tmp_path, long_tier(tmp_path, truth), workers=2)
    wait_for_lines(tmp_path / "results", 4)
    master.send_signal(signal.SIGINT)
    finish(master, workers, timeout_s=90)
    records = assert_stopped_cleanly(tmp_path, truth)
    assert records["worker_id"].nunique() == 2


def test_kill_9_keeps_every_request_finished_a_second_before(tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    proc = start_local(tmp_path, long_tier(tmp_path, truth))
    wait_for_lines(tmp_path / "results", 4)
    time.sleep(1.5)
    killed_at = time.time()
    proc.kill()
    proc.wait(timeout=30)
    run_dir = only_run_dir(tmp_path / "results")
    lines = [json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines()]
    time.sleep(1.0)
    finished_before = [t for t in read_truth(truth) if t.get("end") and t["end"] < killed_at - 1.0]
    assert finished_before
    # every request the engine finished more than ~1 s before the kill is in records.jsonl
    assert len(lines) >= len(finished_before)
    assert len({r["record_id"] for r in lines}) == len(lines)


def test_resume_runs_only_the_tiers_not_complete_into_the_same_folder(tmp_path: Path) -> None:
    data = sim_scenario(conversation=SHORT, tiers=[1, 3], iterations=6, max_tokens=48)
    scenario = write_scenario(tmp_path / "s.yaml", data)
    proc = start_local(tmp_path, scenario)
    deadline = time.monotonic() + 90
    run_root = tmp_path / "results"
    while True:  # interrupt once the second tier has begun
        phases = list(run_root.glob("*/phases.csv"))
        if phases and len(pd.read_csv(phases[0])) == 2 and jsonl_lines(run_root) >= 8:
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    run_dir = only_run_dir(run_root)
    first = pd.read_csv(run_dir / "phases.csv")
    assert list(first["complete"]) == [True, False]

    proc = start_local(tmp_path, scenario, "--resume", str(run_dir))
    assert proc.wait(timeout=120) == 0, (tmp_path / "out.log").read_text()[-3000:]
    assert only_run_dir(run_root) == run_dir  # the same folder, one run
    records = pd.read_parquet(run_dir / "records.parquet")
    assert records.groupby("tier_users").size().to_dict() == {1: 6, 3: 18}
    assert (records["status"] == "ok").all()
    phases = pd.read_csv(run_dir / "phases.csv")
    assert sorted(phases["complete"]) == [True, True]
    # what the interrupted attempt of tier 2 had sent is kept aside, not mixed into the statistics
    aside = run_dir / "records.interrupted.jsonl"
    moved = len(aside.read_text().splitlines())
    assert moved > 0
    # and the resumed run's log says how many, and where
    log = (tmp_path / "out.log").read_text()
    assert f"--resume: {moved} records of 1 tiers not complete (they run again) moved aside to {aside}" in log


def test_resume_of_a_folder_from_before_the_conversation_column(tmp_path: Path) -> None:
    """Its `scenario` column is read as `conversation`, and its missing `kind` as empty: the folder is
    written back under today's names, so the resumed tiers and the earlier ones are one table."""
    data = sim_scenario(conversation=SHORT, tiers=[1], iterations=2, max_tokens=8)
    results = ["--results-dir", str(tmp_path / "results")]
    first = run_locust(["--scenario", str(write_scenario(tmp_path / "s.yaml", data)), *results], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "results")
    to_older_column_names(run_dir)
    (run_dir / "records.parquet").unlink()  # a run that stopped before its close leaves only the jsonl

    data["load"]["tiers"] = [1, 2]
    scenario = write_scenario(tmp_path / "s.yaml", data)
    # another tier added to the folder's campaign: a resume it must be told to accept
    resumed = run_locust(
        ["--scenario", str(scenario), *results, "--resume", str(run_dir), "--force-resume"], tmp_path
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    records = pd.read_parquet(run_dir / "records.parquet")
    assert "scenario" not in records and set(records["conversation"]) == {"short"}
    kinds = records.groupby("tier_users")["kind"].agg(lambda k: set(k)).to_dict()
    assert kinds == {1: {""}, 2: {"short-baseline"}} and len(records) == 2 + 2 * 2
    phases = pd.read_csv(run_dir / "phases.csv", keep_default_na=False)
    assert "scenario" not in phases and list(phases["conversation"]) == ["short", "short"]
    assert list(phases["kind"]) == ["", "short-baseline"] and list(phases["complete"]) == [True, True]

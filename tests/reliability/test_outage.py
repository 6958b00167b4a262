"""An engine outage is not a measurement: a tier during which the backend went away is marked incomplete,
the campaign holds until the backend answers again and runs the tier once more, or stops naming it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from grill_locust.report import summarize_run
from grill_locust.run import exit_codes
from grill_locust.sim import SimProcess
from tests.ports import free_port
from tests.reliability.ledger import ledger
from tests.run.conftest import LOCUSTFILE, only_run_dir, read_truth, write_scenario

pytestmark = pytest.mark.slow

SHORT = {"name": "short", "kind": "short-baseline", "prompt_tokens": 40}
TIER_USERS = 2
ITERATIONS = 12


def outage_scenario(url: str, tiers: list[int], engine_wait_s: float) -> dict[str, Any]:
    return {
        "name": "outage",
        "backends": [{"name": "flaky", "engine": "vllm", "url": url}],
        "models": [{"name": "grill-sim", "max_tokens": 32, "ignore_eos": True}],
        "conversations": [SHORT],
        "targets": [{"backend": "flaky", "model": "grill-sim", "conversation": "short"}],
        "load": {
            "tiers": tiers,
            "iterations": ITERATIONS,
            "pause_s": 0.2,
            "think_time_s": 0.05,
            "engine_wait_s": engine_wait_s,
        },
    }


def start_run(tmp_path: Path, scenario: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(LOCUSTFILE),
            "--headless",
            "--only-summary",
            "--scenario",
            str(scenario),
            "--results-dir",
            str(tmp_path / "results"),
            "--telemetry-interval",
            "0",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=open(tmp_path / "out.log", "wb"),
        stderr=subprocess.STDOUT,
    )


def wait_for_records(tmp_path: Path, proc: subprocess.Popen[bytes], n: int, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        files = list((tmp_path / "results").glob("*/records.jsonl"))
        if files and len(files[0].read_text().splitlines()) >= n:
            return
        assert proc.poll() is None, (tmp_path / "out.log").read_text()[-3000:]
        assert time.monotonic() < deadline, f"fewer than {n} records after {timeout_s} s"
        time.sleep(0.1)


def test_a_tier_cut_by_an_outage_is_incomplete_and_runs_again_once_the_engine_is_back(
    tmp_path: Path,
) -> None:
    port = free_port()
    truths = [tmp_path / "truth-before.jsonl", tmp_path / "truth-after.jsonl"]
    sim = SimProcess.start("vllm", port=port, truth_log=str(truths[0]))
    data = outage_scenario(sim.url, tiers=[TIER_USERS], engine_wait_s=60)
    proc = start_run(tmp_path, write_scenario(tmp_path / "s.yaml", data))
    try:
        wait_for_records(tmp_path, proc, 3)
        sim.stop()  # the engine goes away mid-tier: the rest of the tier's requests are refused
        time.sleep(6)
        sim = SimProcess.start("vllm", port=port, truth_log=str(truths[1]))  # back on the same address
        assert proc.wait(timeout=120) in (0, 1), (tmp_path / "out.log").read_text()[-3000:]
    finally:
        proc.kill()
        sim.stop()
    log = (tmp_path / "out.log").read_text()
    run_dir = only_run_dir(tmp_path / "results")

    phases = pd.read_csv(run_dir / "phases.csv", keep_default_na=False)
    assert list(phases["attempt"]) == [0, 1] and list(phases["tier_index"]) == [0, 0]
    failed, rerun = phases.iloc[0], phases.iloc[1]
    assert not failed["complete"] and "could not connect to the backend" in failed["note"], failed["note"]
    assert rerun["complete"] and rerun["iterations_done"] == TIER_USERS * ITERATIONS, rerun.to_dict()
    assert "backend flaky answers again" in log and "tier 1/1, attempt 2 start" in log

    # every record of the failed attempt stays, labelled; the re-run is whole and healthy
    records = pd.read_parquet(run_dir / "records.parquet")
    first = records[records["attempt"] == 0]
    assert (first["status"] == "connect").any() and (first["status"] == "ok").any()
    second = records[records["attempt"] == 1]
    assert len(second) == TIER_USERS * ITERATIONS and (second["status"] == "ok").all()
    assert records["record_id"].is_unique and set(records["session"]) == {f"{run_dir.name}.0"}

    # the statistics are the re-run's; the failed attempt's requests are counted beside
    summary = summarize_run(run_dir)
    row = summary.iloc[0]
    assert (row["requests"], row["ok_requests"]) == (len(second), len(second))
    assert row["earlier_attempt_requests"] == len(first) and bool(row["complete"])
    # against the engine's own log: each request it received is one record, labelled with its attempt's tier
    accounts = ledger(
        "engine outage, tier run again", records, [t for p in truths for t in read_truth(p)], phases
    )
    assert accounts.clean, accounts


def test_an_engine_that_never_comes_back_stops_the_campaign_naming_it(tmp_path: Path) -> None:
    port = free_port()
    sim = SimProcess.start("vllm", port=port)
    data = outage_scenario(sim.url, tiers=[TIER_USERS, 3], engine_wait_s=4)
    proc = start_run(tmp_path, write_scenario(tmp_path / "s.yaml", data))
    try:
        wait_for_records(tmp_path, proc, 3)
        sim.stop()
        stopped_at = time.monotonic()
        code = proc.wait(timeout=90)
        took_s = time.monotonic() - stopped_at
    finally:
        proc.kill()
        sim.stop()
    log = (tmp_path / "out.log").read_text()
    assert code == exit_codes.ENGINE_GONE, log[-3000:]
    assert f"backend flaky (http://127.0.0.1:{port}) did not answer for 4 s" in log, log[-3000:]
    assert took_s < 45, took_s  # the wait, probes and the close; not Locust's own timeouts
    run_dir = only_run_dir(tmp_path / "results")
    phases = pd.read_csv(run_dir / "phases.csv", keep_default_na=False)
    # the failed tier is incomplete, with why; neither its re-run nor the next tier started
    assert len(phases) == 1 and not phases["complete"].iloc[0], phases.to_dict("records")
    assert "engine outage" in phases["note"].iloc[0]
    assert (run_dir / "records.parquet").exists()  # the run closed its folder

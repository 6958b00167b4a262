"""The load generator watches itself: a worker saturated on purpose has its tiers flagged."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import gevent
import pandas as pd
import pytest

from grill_locust.run.selfcheck import SelfCheck
from tests.run.conftest import LOCUSTFILE, only_run_dir, sim_scenario, write_scenario

pytestmark = pytest.mark.slow

# The product's locustfile plus a greenlet that holds the gevent hub 20 ms at a time, as an overloaded
# worker would: Locust's own CPU warning stays silent, our event-loop probe must not.
BURNING_LOCUSTFILE = f"""
import time, gevent
from locust import events
exec(open({str(LOCUSTFILE)!r}).read())

def burn():
    while True:
        end = time.perf_counter() + 0.02
        while time.perf_counter() < end:
            pass
        gevent.sleep(0.005)

@events.test_start.add_listener
def start_burning(**kw):
    gevent.spawn(burn)
"""


def run(tmp_path: Path, locustfile: Path) -> tuple[subprocess.CompletedProcess[str], pd.DataFrame]:
    data = sim_scenario(
        conversation={"name": "short", "kind": "short-baseline", "prompt_tokens": 40},
        tiers=[2],
        iterations=4,
        max_tokens=32,
    )
    scenario = write_scenario(tmp_path / "s.yaml", data)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(locustfile),
            "--headless",
            "--scenario",
            str(scenario),
            "--results-dir",
            str(tmp_path / "r"),
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done, pd.read_csv(only_run_dir(tmp_path / "r") / "summary.csv")


def test_a_saturated_worker_is_flagged_live_and_in_the_summary(tmp_path: Path) -> None:
    burning = tmp_path / "burning.py"
    burning.write_text(BURNING_LOCUSTFILE)
    done, summary = run(tmp_path, burning)
    assert "LOAD GENERATOR SATURATED" in done.stderr
    assert bool(summary["saturated"].iloc[0])
    assert summary["worker_lag_p99_ms"].iloc[0] > 10
    records = pd.read_parquet(only_run_dir(tmp_path / "r") / "records.parquet")
    assert records["worker_lag_p99_ms"].notna().all() and records["worker_cpu"].notna().any()


@pytest.mark.parametrize("stopping", [False, True])
def test_a_stall_that_ends_in_the_stop_is_not_lag(stopping: bool) -> None:
    """The probe counts a stall only if requests were in flight when it slept and still are when it
    wakes: Locust's `Runner.stop()` holds the hub, then (test_stopping) the worker says it is stopping."""
    state = {"stopping": False}
    check = SelfCheck(busy=lambda: not state["stopping"])
    check.start()
    try:
        gevent.sleep(0.3)  # a few quiet probes
        quiet = check.lag_p99_ms
        assert quiet is not None and quiet < 50
        # hold the hub 200 ms, as the stop does: longer than any probe interval, so the probe's wake-up
        # falls inside the stall and comes at least 125 ms late
        end = time.perf_counter() + 0.2
        while time.perf_counter() < end:
            pass
        state["stopping"] = stopping
        gevent.sleep(0.2)  # the probe wakes late
        assert check.lag_p99_ms is not None
        if stopping:
            assert check.lag_p99_ms == quiet
        else:
            assert check.lag_p99_ms > 100
    finally:
        check.stop()

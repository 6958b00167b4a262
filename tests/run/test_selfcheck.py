"""The load generator watches itself: a worker saturated on purpose has its tiers flagged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

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

"""The top of the study's ladder: tiers up to 200 users on one load-generator process against the
simulated engine, every record there once, every tier whose event times are off the engine's own (the
simulator's truth log) by more than 5 ms flagged by the self-check, and on a machine with a core to
spare no tier flagged and every time within 5 ms; the worker's RSS told."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from grill_locust.report import load_run, summarize
from grill_locust.verdicts import SATURATION_LAG_P99_MS
from tests.run.conftest import LOCUSTFILE, only_run_dir, sim_scenario, truth_once_it_holds, write_scenario

LADDER = [1, 50, 100, 200]  # the study's tiers: its first, and the top three
MIB = 1024 * 1024
SHORT = {"name": "short", "kind": "short-baseline", "prompt_tokens": 40}
ITERATIONS = 6
MAX_TOKENS = 16


class PeakRss:
    """Samples a process's resident memory every 0.2 s until it ends; `peak_bytes` is the highest."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak_bytes = 0
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while True:
            try:
                self.peak_bytes = max(self.peak_bytes, self.process.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.2)

    def join(self) -> None:
        self._thread.join(timeout=5)


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.timeout(180)
def test_the_ladder_up_to_200_users_on_one_worker(tmp_path: Path) -> None:
    truth_path = tmp_path / "truth.jsonl"
    data = sim_scenario(
        conversation=SHORT,
        tiers=LADDER,
        iterations=ITERATIONS,
        max_tokens=MAX_TOKENS,
        sim_args={"truth_log": str(truth_path)},
    )
    # tiers of about 7 s: over 100 self-check probes each, so its p99 is no single late wake-up
    data["load"]["think_time_s"] = 0.8
    scenario = write_scenario(tmp_path / "ladder.yaml", data)
    results = tmp_path / "results"
    started = time.monotonic()
    locust = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary"]
        + ["--scenario", str(scenario), "--results-dir", str(results)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=open(tmp_path / "locust.log", "wb"),
        stderr=subprocess.STDOUT,
    )
    rss = PeakRss(locust.pid)
    try:
        code = locust.wait(timeout=150)
    finally:
        if locust.poll() is None:
            locust.kill()
            locust.wait()
    rss.join()
    elapsed_s = time.monotonic() - started
    assert code == 0, (tmp_path / "locust.log").read_text()[-3000:]

    run_dir = only_run_dir(results)
    records = pd.read_parquet(run_dir / "records.parquet")
    assert records["record_id"].is_unique
    assert records.groupby("tier_users").size().to_dict() == {u: u * ITERATIONS for u in LADDER}
    assert (records["status"] == "ok").all(), records["error"].value_counts().head()
    assert (records["output_tokens"] == MAX_TOKENS).all()
    assert records.groupby("tier_users")["user_id"].nunique().to_dict() == {u: u for u in LADDER}

    # the engine's own time of each request's first and last token (the simulator's truth log, on the
    # wall clock) against the client's: what the worker's timing lag bounds
    truth = truth_once_it_holds(truth_path, set(records["record_id"]))
    engine = pd.DataFrame(truth).set_index("request_id")[["first_token", "end"]]
    timed = records.join(engine, on="record_id")
    timed["first_token_late_ms"] = (timed["wall_start"] + timed["ttft_s"] - timed["first_token"]) * 1000
    timed["end_late_ms"] = (timed["wall_start"] + timed["e2e_s"] - timed["end"]) * 1000
    late = timed.groupby("tier_users")[["first_token_late_ms", "end_late_ms"]].quantile(0.99)

    summary = summarize(load_run(run_dir)).set_index("tier_users")
    print(
        f"\nladder {LADDER} x {ITERATIONS} on one worker: {len(records)} records in {elapsed_s:.0f} s; "
        f"worker RSS peak {rss.peak_bytes / MIB:.0f} MiB"
    )
    for users, tier in summary.iterrows():
        print(
            f"  {users:>3} users: TTFT p50 {tier['ttft_p50_s'] * 1000:.0f} ms, p99 "
            f"{tier['ttft_p99_s'] * 1000:.0f} ms; {tier['requests_per_s']:.0f} req/s; read lag p99 "
            f"{tier['worker_read_lag_p99_ms']:.2f} ms, event-loop lag p99 {tier['worker_lag_p99_ms']:.2f} ms; "
            f"CPU {tier['worker_cpu_mean']:.0f} %; first token / end read vs the engine's p99 "
            f"{late.loc[users, 'first_token_late_ms']:.2f} / {late.loc[users, 'end_late_ms']:.2f} ms"
        )
    assert summary["worker_read_lag_p99_ms"].notna().all() and summary["worker_cpu_mean"].notna().all()
    assert (summary["worker_cpu_mean"] > 0).all()
    # what the self-check vouches for, whatever the machine: a tier whose event times are more than
    # 5 ms off the engine's (p99) is flagged
    flagged = summary["saturated"].astype(bool)
    off = late.max(axis=1)
    missed = off[(off >= SATURATION_LAG_P99_MS) & ~flagged.reindex(off.index)]
    assert missed.empty, f"timings off but not flagged (ms):\n{late.loc[missed.index]}\n{summary}"
    assert (timed[["first_token_late_ms", "end_late_ms"]].min() > -1.0).all()  # same clock, no early arrival
    # and on a machine with a core to spare, no tier is flagged: every event timed within 5 ms, the
    # CPU under 70 % (a CPU hog beside the worker fails here, named)
    assert not flagged.any(), (
        "load generator flagged: read lag p99 (ms) "
        f"{summary['worker_read_lag_p99_ms'].round(2).to_dict()}, CPU % "
        f"{summary['worker_cpu_mean'].round(0).to_dict()}"
    )
    assert (late < SATURATION_LAG_P99_MS).all().all(), late
    assert rss.peak_bytes < 1024 * MIB

"""Soak: many users against the simulated engine for minutes; worker memory and records lost.

Runs `locust -f locustfiles/coding.py --headless --processes W --scenario S` (a master and W forked
workers, the real distributed path) with one tier of U users of a multi-turn coding session against a
simulated engine that the run starts itself (truth log on). The tier lasts until its time cap
(`--minutes`), then the run stops its users: requests in flight are recorded as cancelled. Meanwhile
the RSS of every worker process is sampled; at the end it prints each worker's RSS at start (once
all users run) and at the end, the growth, and the records lost: requests the simulator saw (its
truth log) with no record in records.parquet.

    python bench/soak.py                        # 200 users, 10 minutes, 2 worker processes
    python bench/soak.py --minutes 2            # a shorter run
Targets: RSS growth < 10 % per worker; 0 records lost.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd
import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
LOCUSTFILE = ROOT / "locustfiles" / "coding.py"
SAMPLE_INTERVAL_S = 2.0
TARGET_GROWTH = 0.10
STOP_GRACE_S = 120.0  # after the time cap: users stop, results are written
MIB = 1024 * 1024


def scenario(users: int, minutes: float, max_tokens: int, truth_path: Path) -> dict[str, Any]:
    return {
        "name": f"soak-{users}",
        "backends": [
            {
                "name": "sim",
                "engine": "sim",
                "profile": "vllm",
                "sim_args": {"truth_log": str(truth_path), "spin_ms": 0, "max_num_seqs": users + 8},
            }
        ],
        "models": [{"name": "grill-sim", "max_tokens": max_tokens, "ignore_eos": True}],
        "conversations": [
            {
                "name": "session",
                "kind": "multi-turn",
                "system_tokens": 400,
                "user_turns": 3,
                "turn_tokens": 60,
            }
        ],
        "targets": [{"backend": "sim", "model": "grill-sim", "conversation": "session"}],
        "load": {
            "tiers": [users],
            "iterations": 1_000_000,  # the time cap ends the tier
            "pause_s": 0,
            "think_time_s": 0.5,
            "spawn_rate": max(1.0, users / 5.0),
            "tier_timeout_s": minutes * 60.0,
        },
    }


class RssSampler:
    """RSS of the run's worker processes (the master's children that run locust, not the sim)."""

    def __init__(self, master_pid: int) -> None:
        self.master = psutil.Process(master_pid)
        self.samples: list[tuple[float, int, int]] = []  # wall, pid, rss bytes
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> RssSampler:
        self._thread.start()
        return self

    def workers(self) -> list[psutil.Process]:
        try:
            children = self.master.children(recursive=False)
        except psutil.Error:
            return []
        found = []
        for child in children:
            try:
                if "grill_locust.sim" not in " ".join(child.cmdline()):
                    found.append(child)
            except psutil.Error:
                continue
        return found

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            for worker in self.workers():
                try:
                    self.samples.append((now, worker.pid, worker.memory_info().rss))
                except psutil.Error:
                    continue
            self._stop.wait(SAMPLE_INTERVAL_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--processes", type=int, default=2, help="worker processes (locust --processes)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--keep", default=None, help="keep the run folder here")
    args = parser.parse_args()
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="grill-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    truth_path = workdir / "truth.jsonl"
    scenario_path = workdir / "soak.yaml"
    scenario_path.write_text(
        yaml.safe_dump(scenario(args.users, args.minutes, args.max_tokens, truth_path), sort_keys=False)
    )
    results = workdir / "results"
    command = [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary",
        "--processes", str(args.processes), "--scenario", str(scenario_path), "--results-dir", str(results),
    ]  # fmt: skip
    print(
        f"soak: {args.users} users, {args.minutes:g} min, {args.processes} worker processes, "
        f"multi-turn session (400 + 3 x 60 tokens), {args.max_tokens} output tokens, 0.5 s think time"
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started = time.time()
    with open(workdir / "locust.out", "w") as out, open(workdir / "locust.err", "w") as err:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=err)
        sampler = RssSampler(process.pid).start()
        try:
            code = process.wait(timeout=args.minutes * 60.0 + STOP_GRACE_S)
        finally:
            sampler.stop()
            if process.poll() is None:
                process.kill()
    wall_s = time.time() - started
    if code != 0:
        errors = [line for line in (workdir / "locust.err").read_text().splitlines() if "Error" in line]
        print(f"  locust exited {code}: {(errors or ['?'])[-1][:160]}", file=sys.stderr)

    run_dir = next(p for p in results.iterdir() if p.is_dir())
    records = pd.read_parquet(run_dir / "records.parquet")
    phases = pd.read_csv(run_dir / "phases.csv")
    tier_start, tier_end = float(phases["start_wall"].iloc[0]), float(phases["end_wall"].iloc[0])
    print(f"  run: {wall_s:.0f} s wall, tier {tier_end - tier_start:.0f} s, locust exit code {code}")
    pd.DataFrame(sampler.samples, columns=["wall", "pid", "rss"]).to_csv(workdir / "rss.csv", index=False)
    report_memory(sampler.samples, tier_start + args.users / max(1.0, args.users / 5.0) + 5.0, tier_end)
    report_records(records, truth_path)


def report_memory(samples: list[tuple[float, int, int]], warm_from: float, tier_end: float) -> None:
    frame = pd.DataFrame(samples, columns=["wall", "pid", "rss"])
    if frame.empty:
        print("  no worker process found to sample")
        return
    for pid, rows in frame.groupby("pid"):
        first = rows.iloc[0]
        warm = rows[rows.wall >= warm_from]
        running = warm[warm.wall <= tier_end]
        if running.empty:
            print(f"  worker pid {pid}: too few samples")
            continue
        start, end = running.iloc[0], running.iloc[-1]
        growth = end.rss / start.rss - 1.0
        verdict = "OK" if growth < TARGET_GROWTH else "OVER TARGET"
        print(
            f"  worker pid {pid}: RSS {first.rss / MIB:.1f} MiB at launch, {start.rss / MIB:.1f} MiB once all "
            f"users run, {end.rss / MIB:.1f} MiB at the end of the tier ({end.wall - start.wall:.0f} s later): "
            f"growth {100 * growth:+.1f} % ({verdict}, target < {100 * TARGET_GROWTH:.0f} %)"
        )
        # the shape of the growth: a warm-up that levels off, or a steady climb (a leak)
        quarters = [running.iloc[round(q * (len(running) - 1))] for q in (0.0, 0.25, 0.5, 0.75, 1.0)]
        path = " -> ".join(f"{row.rss / MIB:.1f}" for row in quarters)
        half = running[running.wall >= start.wall + (end.wall - start.wall) / 2]
        slope = (
            (half.rss.iloc[-1] - half.rss.iloc[0]) / MIB / max(1.0, half.wall.iloc[-1] - half.wall.iloc[0])
        )
        print(f"    RSS by quarter of the tier (MiB): {path}; second half {60 * slope:+.2f} MiB/min")


def report_records(records: pd.DataFrame, truth_path: Path) -> None:
    truth = [json.loads(line) for line in truth_path.read_text().splitlines() if line.strip()]
    truth = [row for row in truth if "chat" in row["endpoint"]]
    never_sent = int(records["status"].eq("connect").sum())  # no request reached the engine
    seen = len(records) - never_sent
    lost = len(truth) - seen
    duplicates = int(records["record_id"].duplicated().sum())
    statuses = records["status"].value_counts().to_dict()
    cancelled = int(records["error"].eq("cancelled").sum())
    print(
        f"  requests the simulator saw: {len(truth)}; records: {len(records)} {statuses} "
        f"({cancelled} cancelled at the stop, {never_sent} never reached the engine)"
    )
    verdict = "OK" if lost == 0 and duplicates == 0 else "NOT OK"
    print(f"  records lost: {lost}; duplicated: {duplicates} ({verdict}, target 0)")


if __name__ == "__main__":
    main()

"""Soak: the fault suite's long version (tests/reliability): many tiers, every fault mixed, minutes.

Runs `locust -f locustfiles/coding.py --headless --processes W --scenario S` (a master and W forked
workers, the real distributed path) through several tiers of a multi-turn coding session against a
simulated engine started here (truth log on) that faults a share of its requests with every kind it
has (grill_locust/sim/faults.py: errors, 429s, which the backend retries, stalls before and after the
first token, cut streams, broken JSON, trickles). Midway the engine is stopped and restarted on its
port, and later one worker is killed. Each tier lasts until its time cap; requests in flight then are
recorded as cancelled. Meanwhile the RSS of every worker process is sampled. At the end it prints each
worker's RSS growth, and the records against the engine's own log by fault (tests/reliability/ledger.py):
fault | records expected | records found | lost | duplicated | misattributed.

    python bench/soak.py                            # tiers 10,30,60 users, 2 minutes each, 2 workers
    python bench/soak.py --tiers 5,20 --minutes 1   # a shorter run
Targets: RSS growth < 10 % per worker; 0 lost, 0 duplicated, 0 misattributed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the suite's ledger and the simulator of this checkout

from grill_locust.sim import SimProcess  # noqa: E402
from grill_locust.sim.faults import FAULT_KINDS  # noqa: E402
from tests.reliability.ledger import Ledger, counted_lost, engine_requests, ledger, table, total  # noqa: E402
from tests.run.conftest import read_truth  # noqa: E402

LOCUSTFILE = ROOT / "locustfiles" / "coding.py"
SAMPLE_INTERVAL_S = 2.0
TARGET_GROWTH = 0.10
STOP_GRACE_S = 120.0  # after the last time cap: users stop, results are written
OUTAGE_S = 3.0  # how long the engine stays down
MIB = 1024 * 1024
NO_ENGINE_LINE = "none logged (engine down, worker killed)"


def engine_args(fault_rate: float, max_users: int) -> list[str]:
    return [
        "--fault-rate", str(fault_rate), "--fault-kinds", ",".join(FAULT_KINDS), "--fault-seed", "7",
        "--fault-trickle-ms", "50", "--spin-ms", "0", "--max-num-seqs", str(max_users + 8),
    ]  # fmt: skip


def scenario(url: str, tiers: list[int], minutes: float, max_tokens: int) -> dict[str, Any]:
    return {
        "name": "soak",
        "backends": [
            {
                "name": "sim",
                "engine": "vllm",
                "url": url,
                "retries": 2,
                "timeouts": {"connect_s": 2.0, "first_token_s": 3.0, "idle_s": 1.0, "total_s": 30.0},
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
            "tiers": tiers,
            "iterations": 1_000_000,  # the time cap ends each tier
            "pause_s": 1.0,
            "think_time_s": 0.5,
            "spawn_rate": max(1.0, max(tiers) / 5.0),
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
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tiers", default="10,30,60", help="users per tier, comma-separated")
    parser.add_argument("--minutes", type=float, default=2.0, help="length of each tier")
    parser.add_argument("--processes", type=int, default=2, help="worker processes (locust --processes)")
    parser.add_argument("--fault-rate", type=float, default=0.2, help="share of requests the engine faults")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--keep", default=None, help="keep the run folder here")
    args = parser.parse_args()
    tiers = [int(t) for t in args.tiers.split(",")]
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="grill-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    truth_paths = [workdir / "truth.jsonl", workdir / "truth-restarted.jsonl"]
    results = workdir / "results"
    span_s = len(tiers) * args.minutes * 60.0
    print(
        f"soak: tiers {tiers} users, {args.minutes:g} min each, {args.processes} worker processes, "
        f"multi-turn session (400 + 3 x 60 tokens), {args.max_tokens} output tokens, 0.5 s think time, "
        f"{100 * args.fault_rate:g} % of requests faulted ({', '.join(FAULT_KINDS)}), 429s retried twice; "
        f"the engine down {OUTAGE_S:g} s at 40 % of the run, a worker killed at 60 %"
    )
    faults = engine_args(args.fault_rate, max(tiers))
    engine = SimProcess.start("vllm", truth_log=str(truth_paths[0]), extra_args=faults)
    scenario_path = workdir / "soak.yaml"
    scenario_path.write_text(
        yaml.safe_dump(scenario(engine.url, tiers, args.minutes, args.max_tokens), sort_keys=False)
    )
    command = [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary",
        "--processes", str(args.processes), "--scenario", str(scenario_path), "--results-dir", str(results),
        "--telemetry-interval", "0",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    started = time.time()
    killed: int | None = None
    with open(workdir / "locust.out", "w") as out, open(workdir / "locust.err", "w") as err:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=err)
        sampler = RssSampler(process.pid).start()
        try:
            time.sleep(0.4 * span_s)
            port = engine.port
            engine.stop()
            time.sleep(OUTAGE_S)
            engine = SimProcess.start("vllm", port=port, truth_log=str(truth_paths[1]), extra_args=faults)
            time.sleep(max(0.0, started + 0.6 * span_s - time.time()))
            workers = sampler.workers()
            if workers:
                killed = workers[-1].pid
                workers[-1].kill()
            code = process.wait(timeout=span_s + STOP_GRACE_S)
        finally:
            sampler.stop()
            if process.poll() is None:
                process.kill()
            engine.stop()
    wall_s = time.time() - started
    if code not in (0, 1):  # 1: Locust's exit code when requests failed
        errors = [line for line in (workdir / "locust.err").read_text().splitlines() if "Error" in line]
        print(f"  locust exited {code}: {(errors or ['?'])[-1][:160]}", file=sys.stderr)

    run_dir = next(p for p in results.iterdir() if p.is_dir())
    records = pd.read_parquet(run_dir / "records.parquet")
    phases = pd.read_csv(run_dir / "phases.csv")
    tier_start, tier_end = float(phases["start_wall"].iloc[0]), float(phases["end_wall"].iloc[-1])
    print(
        f"  run: {wall_s:.0f} s wall, tiers {tier_end - tier_start:.0f} s, locust exit code {code}; "
        f"worker pid {killed} killed"
    )
    pd.DataFrame(sampler.samples, columns=["wall", "pid", "rss"]).to_csv(workdir / "rss.csv", index=False)
    report_memory(sampler.samples, tier_start + 5.0, float(phases["end_wall"].iloc[0]))
    report_records(records, [line for path in truth_paths for line in read_truth(path)], phases)
    print(f"  folder: {workdir}")


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


def report_records(records: pd.DataFrame, truth: list[dict[str, Any]], phases: pd.DataFrame) -> None:
    """The ledger by the fault the engine gave each request, and for records it has no line of."""
    lines_by_fault: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in engine_requests(truth):
        lines_by_fault[line["fault"] or "none"].append(line)
    # a worker the run reports lost: its requests without records are what it counted lost (a conversation
    # of several requests is one iteration, so the count of requests is not bounded by the iterations')
    named = counted_lost(phases)
    excused = {worker: len(records) + len(truth) for worker in named}
    print(f"  iterations the run counted lost: {named or 'none'}; records by status: "
          f"{records['status'].value_counts().to_dict()}")  # fmt: skip
    rows: list[Ledger] = []
    logged: set[str] = set()
    for fault in ["none", *FAULT_KINDS]:
        lines = lines_by_fault.get(fault, [])
        ids = {str(line["request_id"]) for line in lines}
        logged |= ids
        rows.append(ledger(fault, records[records["record_id"].isin(ids)], lines, phases, excused))
    rows.append(ledger(NO_ENGINE_LINE, records[~records["record_id"].isin(logged)], [], phases, excused))
    everything = total(rows)
    print("\n".join("  " + line for line in table([*rows, everything]).splitlines()))
    verdict = "OK" if everything.lost == everything.duplicated == everything.misattributed == 0 else "NOT OK"
    print(f"  lost {everything.lost}, duplicated {everything.duplicated}, "
          f"misattributed {everything.misattributed} ({verdict}, target 0)")  # fmt: skip


if __name__ == "__main__":
    main()

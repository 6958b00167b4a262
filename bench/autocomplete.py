"""Typing developers: what 500 of them on one worker cost the load generator, and how well it keeps
their schedule.

    python bench/autocomplete.py                       # 500 developers, 8 requests each, two runs
    python bench/autocomplete.py --developers 200 --requests 4

One Locust process (the local runner: worker and master) types for `--developers` autocomplete
developers against `grill sim`, twice with the same typing: once on an engine that answers each
completion at once (a 1-token completion, shown), once on one whose first token comes seconds late, so
that the next keystroke abandons every request. Printed for each run:
- CPU of the Locust process per developer-second while the developers type (between the first and
  the last request sent), beside the floor: as many greenlets sleeping to the same send and keystroke
  deadlines, in this process, with nothing sent;
- schedule accuracy: each send's lateness, the time it went (the record's `wall_start`) minus its
  debounce deadline (iteration start + the plan's `send_at_s`; the iteration's start is read from the
  records as the earliest send minus its offset, so a lateness is at least 0), p50 / p99 / max;
- CPU per request in each run; their difference is what an abandon costs beyond a completion that
  arrived (closing the connection, recording the abandon, the next request's new connection), beside
  the floor: a loopback connect and close to the simulator.
The typing is fast (12 characters a second: most keystroke gaps are under the 150 ms debounce), so
requests go out at the pauses between bursts, ~0.4 a second per developer: the simulator keeps up.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grill_locust.scenario import validate_conversation  # noqa: E402
from grill_locust.sim import SimProcess  # noqa: E402
from grill_locust.workload import build_workload  # noqa: E402
from grill_locust.workload.autocomplete import AutocompletePlan  # noqa: E402

LOCUSTFILE = ROOT / "locustfiles" / "coding.py"
SAMPLE_INTERVAL_S = 0.2
TYPING_CPS = 12
# the engine that answers at once, and the one whose first token comes after every next keystroke
# (the slowest pause is a few seconds; the tier's time cap ends the run well before it matters)
ENGINES = {
    "completed": ["--step-a-ms=1", "--step-b-ms=0", "--step-c-ms=0", "--step-d-ms=0"],
    "abandoned": ["--step-a-ms=30000", "--step-b-ms=0", "--step-c-ms=0", "--step-d-ms=0"],
}
COMMON_SIM_ARGS = ["--spin-ms=0", "--reasoning-tokens=0", "--max-num-seqs=1024"]


def conversation(requests: int) -> dict[str, Any]:
    return {
        "name": "typing",
        "kind": "autocomplete",
        "requests": requests,
        "typing_cps": TYPING_CPS,
        "max_tokens": 1,
    }


def scenario(url: str, developers: int, requests: int) -> dict[str, Any]:
    return {
        "name": "autocomplete-bench",
        "backends": [{"name": "sim", "engine": "sim", "url": url}],
        "models": [{"name": "grill-sim", "temperature": 0.0, "ignore_eos": True}],
        "conversations": [conversation(requests)],
        "targets": [{"backend": "sim", "model": "grill-sim", "conversation": "typing"}],
        "load": {"tiers": [developers], "iterations": 1, "pause_s": 0, "engine_wait_s": 0},
    }


class CpuSampler(threading.Thread):
    """The process's CPU seconds (user + system), sampled with the wall time."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                times = self.process.cpu_times()
            except psutil.Error:  # the process ended
                return
            self.samples.append((time.time(), times.user + times.system))
            self.stop.wait(SAMPLE_INTERVAL_S)

    def cpu_between(self, start: float, end: float) -> float:
        def at(wall: float) -> float:
            before = [s for s in self.samples if s[0] <= wall][-1]
            after = next((s for s in self.samples if s[0] >= wall), self.samples[-1])
            if after[0] == before[0]:
                return before[1]
            return before[1] + (after[1] - before[1]) * (wall - before[0]) / (after[0] - before[0])

        return at(end) - at(start)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def lateness_s(records: list[dict[str, Any]], requests: int) -> list[tuple[float, float]]:
    """Each send minus its debounce deadline (module docstring), plans rebuilt from conversation ids."""
    workload = build_workload(validate_conversation(conversation(requests)))
    by_iteration: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_iteration.setdefault(record["conversation_id"], []).append(record)
    late: list[tuple[float, float]] = []  # (wall_start, lateness)
    for conversation_id, sent in by_iteration.items():
        _, user_key, iteration = conversation_id.split(":")
        plan = workload.script(user_key, int(iteration))
        assert isinstance(plan, AutocompletePlan)
        offsets = [record["wall_start"] - plan.requests[record["turn"]].send_at_s for record in sent]
        start = min(offsets)
        late += [(record["wall_start"], offset - start) for record, offset in zip(sent, offsets, strict=True)]
    return late


def run_headless(data: dict[str, Any], folder: Path, timeout_s: float) -> tuple[int, str, CpuSampler]:
    """One headless Locust run of the scenario `data` into `folder`/results, its CPU sampled: its exit
    code, its stderr and the sampler."""
    path = folder / "scenario.yaml"
    path.write_text(json.dumps(data))
    command = [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--scenario", str(path),
        "--results-dir", str(folder / "results"), "--loglevel", "WARNING", "--only-summary",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    locust = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sampler = CpuSampler(locust.pid)
    sampler.start()
    _, stderr = locust.communicate(timeout=timeout_s)
    sampler.stop.set()
    return locust.returncode, stderr, sampler


def run_typing(label: str, developers: int, requests: int) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="autocomplete-bench-") as folder,
        SimProcess.start("vllm", extra_args=[*COMMON_SIM_ARGS, *ENGINES[label]]) as sim,
    ):
        returncode, stderr, sampler = run_headless(
            scenario(sim.url, developers, requests), Path(folder), timeout_s=600
        )
        records = [
            json.loads(line) for path in Path(folder).glob("results/*/records.jsonl") for line in open(path)
        ]
        connect_close_s = connect_close_cpu_s(sim.url)
    if returncode not in (0, 1) or len(records) != developers * requests:
        print(stderr[-3000:])
        raise SystemExit(f"{label}: locust exited {returncode} with {len(records)} records")
    first = min(record["wall_start"] for record in records)
    last = max(record["wall_start"] for record in records)
    cpu_s = sampler.cpu_between(first, last)
    statuses = [record["status"] for record in records]
    sent_between = sum(1 for record in records if record["wall_start"] < last)
    lateness = lateness_s(records, requests)
    late_ms = [late * 1000.0 for _, late in lateness]
    # the developers start at once, each planning its iteration first (tokenizing its file): sends that
    # fall due meanwhile wait for the plans; after the last developer's first send, typing alone
    all_typing = max(
        min(r["wall_start"] for r in records if r["conversation_id"] == c)
        for c in {r["conversation_id"] for r in records}
    )
    steady_ms = [late * 1000.0 for wall, late in lateness if wall > all_typing]
    return {
        "label": label,
        "window_s": last - first,
        "cpu_s": cpu_s,
        "per_developer_s_us": cpu_s / (developers * (last - first)) * 1e6,
        "per_request_us": cpu_s / sent_between * 1e6,
        "requests": len(records),
        "ok": statuses.count("ok"),
        "abandoned": statuses.count("abandoned"),
        "other": len(statuses) - statuses.count("ok") - statuses.count("abandoned"),
        "late_ms": (percentile(late_ms, 0.5), percentile(late_ms, 0.99), max(late_ms)),
        "steady_late_ms": (percentile(steady_ms, 0.5), percentile(steady_ms, 0.99), max(steady_ms)),
        "steady_sends": len(steady_ms),
        "all_typing_s": all_typing - first,
        "connect_close_us": connect_close_s * 1e6,
        "load": os.getloadavg()[0],
    }


def connect_close_cpu_s(url: str, repeats: int = 2000) -> float:
    """CPU of one loopback TCP connect and close to the simulator, in this process (the abandon's floor)."""
    parts = urlsplit(url)
    address = (parts.hostname or "127.0.0.1", parts.port or 80)
    start = time.process_time()
    for _ in range(repeats):
        socket.create_connection(address).close()
    return (time.process_time() - start) / repeats


def timer_floor_us(developers: int, requests: int) -> float:
    """CPU per developer-second of greenlets that only sleep to the plans' send and keystroke deadlines
    (two timers a request, as the user loop sets), nothing built or sent."""
    import gevent

    workload = build_workload(validate_conversation(conversation(requests)))
    plans = []
    for developer in range(developers):
        plan = workload.script(f"floor-u{developer}", 0)
        assert isinstance(plan, AutocompletePlan)
        plans.append(plan)

    def type_through(plan: AutocompletePlan, start: float) -> None:
        for planned in plan.requests:
            for deadline in (planned.send_at_s, planned.next_keystroke_at_s):
                wait_s = start + deadline - time.perf_counter()
                if wait_s > 0:
                    gevent.sleep(wait_s)

    start = time.perf_counter()
    cpu = time.process_time()
    gevent.joinall([gevent.spawn(type_through, plan, start) for plan in plans])
    cpu_s = time.process_time() - cpu
    window_s = max(plan.requests[-1].next_keystroke_at_s for plan in plans)
    return cpu_s / (developers * window_s) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--developers", type=int, default=500)
    parser.add_argument("--requests", type=int, default=8, help="requests per developer (one iteration)")
    args = parser.parse_args()
    print(
        f"{args.developers} typing developers ({TYPING_CPS} cps, 150 ms debounce, 1500 + 400 tokens around the "
        f"cursor), {args.requests} requests each, one Locust process against grill sim"
    )
    runs = [run_typing(label, args.developers, args.requests) for label in ENGINES]
    floor_us = timer_floor_us(args.developers, args.requests)
    for run in runs:
        p50, p99, worst = run["late_ms"]
        print(
            f"{run['label']}: {run['requests']} requests ({run['ok']} ok, {run['abandoned']} abandoned, "
            f"{run['other']} other) over {run['window_s']:.1f} s, load {run['load']:.1f}\n"
            f"  CPU {run['cpu_s']:.2f} s: {run['per_developer_s_us']:.0f} µs per developer-second, "
            f"{run['per_request_us']:.0f} µs per request\n"
            f"  lateness after the debounce: p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {worst:.2f} ms\n"
            f"  once every developer typed ({run['all_typing_s']:.1f} s in, {run['steady_sends']} sends): "
            "p50 {:.2f} ms, p99 {:.2f} ms, max {:.2f} ms".format(*run["steady_late_ms"])
        )
    completed, abandoned = runs
    print(
        f"floor: greenlets sleeping to the same deadlines, nothing sent: {floor_us:.1f} µs per developer-second"
    )
    print(
        f"an abandon costs {abandoned['per_request_us'] - completed['per_request_us']:+.0f} µs beside a "
        f"1-token completion; floor: a loopback connect + close {statistics.mean(r['connect_close_us'] for r in runs):.0f} µs"
    )


if __name__ == "__main__":
    main()

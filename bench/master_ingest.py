"""Records per second the master ingests through the real message path while writing the results folder.

The master is a real Locust `MasterRunner` in this process, with grill's own handler of the
"grill_records" message (`listeners.on_records` -> `Campaign.on_records` -> `ResultsWriter`,
which appends records.jsonl and de-duplicates by record_id). N workers are separate processes, each a
real `WorkerRunner` on loopback that sends batches of realistic record dicts (built by
`record.build_record` from a measured 200-event stream) with `runner.send_message`, as
`WorkerState.flush` does, as fast as the master takes them. The figure is the records written per
second of wall time, from the first batch to the last record; then the time `ResultsWriter.close()`
takes to write records.parquet is printed too.

    python bench/master_ingest.py [--workers 4] [--records-per-worker 50000] [--batch 250]
Target: >= 50,000 records/s (room for 100 workers).
"""

from __future__ import annotations

import argparse
import logging
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gevent
import locust  # noqa: F401  (gevent patches the stdlib before the network libraries below)
from locust.env import Environment
from locust.event import Events

from grill_locust.record import RawTiming, build_record, measure
from grill_locust.run.worker import MSG_PHASE, MSG_RECORDS

TARGET_RECORDS_PER_S = 50_000
WAIT_FOR_WORKERS_S = 60.0
INGEST_TIMEOUT_S = 300.0
LABELS = {
    "run_id": "20260101-000000-ingest",
    "target": "sim-vllm/grill-sim/multi-turn-session",
    "backend": "sim-vllm",
    "engine": "sim",
    "model": "grill-sim",
    "conversation": "multi-turn-session",
    "kind": "multi-turn",
    "tier_index": 0,
    "tier_users": 200,
    "iteration": 3,
    "user_id": 117,
    "conversation_id": "p0-host-w3-abc123-u117-i3",
    "turn": 2,
}


def realistic_record(worker_id: str) -> dict[str, Any]:
    """One record as a worker ships it: a measured 200-token stream with usage and cached tokens."""
    t0 = 1000.0
    raw = RawTiming(t0=t0, wall_start=1767225600.123456)
    raw.output_times = [t0 + 0.35 + 0.016 * i + 0.0003 * (i % 7) for i in range(200)]
    raw.first_visible_time = raw.output_times[0]
    raw.end_time = raw.output_times[-1] + 0.001
    raw.prompt_tokens, raw.cached_tokens, raw.completion_tokens = 2150, 1904, 200
    raw.finish_reason = "length"
    raw.http_status = 200
    labels = {**LABELS, "worker_id": worker_id, "record_id": f"{worker_id}-0"}
    return build_record(labels, measure(raw), worker_lag_p99_ms=1.7, worker_cpu=41.5, retries=0).to_dict()


# --- worker process ------------------------------------------------------------------------------


def run_worker(port: int, index: int, records: int, batch: int) -> None:
    environment = Environment(user_classes=[], events=Events())
    runner = environment.create_worker_runner("127.0.0.1", port)
    runner.register_message(MSG_PHASE, lambda environment, msg, **kw: None)
    worker_id = f"{socket.gethostname()}-w{index}-bench"
    template = realistic_record(worker_id)
    sent = 0
    iterations_per_batch = max(1, batch // 3)  # multi-turn: about three requests per iteration
    while sent < records:
        size = min(batch, records - sent)
        chunk = [{**template, "record_id": f"{worker_id}-{sent + i}"} for i in range(size)]
        runner.send_message(
            MSG_RECORDS, {"worker": worker_id, "records": chunk, "iterations": {"0": iterations_per_batch}}
        )
        sent += size
        gevent.sleep(0)  # let heartbeats and the zmq greenlets run, as the users' loop would
    gevent.sleep(1.0)
    runner.quit()


# --- master --------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scenario_for_bench() -> Any:
    from grill_locust.scenario import parse_scenario

    data = {
        "name": "ingest",
        "backends": [{"name": "sim-vllm", "url": "http://127.0.0.1:9", "engine": "vllm"}],
        "models": [{"name": "grill-sim"}],
        "targets": [{"backend": "sim-vllm", "model": "grill-sim", "conversation": "multi-turn-session"}],
        "load": {"tiers": [200], "iterations": 1_000_000},
    }
    return parse_scenario(data, source="master_ingest")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--records-per-worker", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=250, help="records per message (a 0.5 s flush)")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.worker is not None:
        run_worker(args.port, args.worker, args.records_per_worker, args.batch)
        return

    from grill_locust.run.campaign import Campaign
    from grill_locust.run.listeners import on_records
    from grill_locust.run.state import run_state
    from grill_locust.sinks.results import ResultsWriter

    port = free_port()
    environment = Environment(user_classes=[], events=Events())
    runner = environment.create_master_runner("127.0.0.1", port)
    scenario = scenario_for_bench()
    run_dir = Path(tempfile.mkdtemp(prefix="grill-ingest-")) / LABELS["run_id"]
    writer = ResultsWriter(run_dir, {"run_id": LABELS["run_id"]}, scenario.redacted())
    campaign = Campaign(environment, scenario, writer, LABELS["run_id"])
    run_state(environment).campaign = campaign
    runner.register_message(
        MSG_RECORDS, lambda environment, msg, **kw: on_records(environment, msg.data, msg.node_id)
    )
    campaign._start_phase(campaign.phases[0])  # records arrive for the current tier, as in a run
    first_seen: list[float] = []

    original = campaign.on_records

    def timed_on_records(*a: Any, **kw: Any) -> None:
        if not first_seen:
            first_seen.extend((time.perf_counter(), time.process_time()))
        original(*a, **kw)

    campaign.on_records = timed_on_records  # type: ignore[method-assign]
    total = args.workers * args.records_per_worker
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--worker",
                str(i),
                "--port",
                str(port),
                "--records-per-worker",
                str(args.records_per_worker),
                "--batch",
                str(args.batch),
            ]  # fmt: skip
        )
        for i in range(args.workers)
    ]
    deadline = time.monotonic() + WAIT_FOR_WORKERS_S + INGEST_TIMEOUT_S
    while writer.record_count < total and time.monotonic() < deadline:
        gevent.sleep(0.01)
    ended = time.perf_counter()
    cpu_s = time.process_time() - first_seen[1] if first_seen else float("nan")
    elapsed = ended - first_seen[0] if first_seen else float("nan")
    close_start = time.perf_counter()
    writer.close()
    close_s = time.perf_counter() - close_start
    for worker in workers:
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
    runner.quit()
    jsonl_bytes = (run_dir / "records.jsonl").stat().st_size
    rate = writer.record_count / elapsed
    print(
        f"{args.workers} workers x {args.records_per_worker} records in batches of {args.batch} "
        f"(realistic records, {jsonl_bytes / writer.record_count:.0f} bytes each in records.jsonl)"
    )
    print(f"  records written: {writer.record_count}/{total} (duplicates dropped by record_id)")
    print(
        f"  master ingest: {rate:,.0f} records/s over {elapsed:.2f} s; master CPU {cpu_s:.2f} s "
        f"({cpu_s / writer.record_count * 1e6:.1f} µs/record: {writer.record_count / cpu_s:,.0f} records "
        "per CPU-second of the master)"
    )
    print(f"  records.parquet at close: {close_s:.2f} s for {writer.record_count} records")
    verdict = "OK" if rate >= TARGET_RECORDS_PER_S and writer.record_count == total else "UNDER TARGET"
    print(f"target >= {TARGET_RECORDS_PER_S:,} records/s: {verdict}")


if __name__ == "__main__":
    main()

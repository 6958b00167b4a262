"""InfluxSink against a real VictoriaMetrics on loopback (it answers influxdb-client's /api/v2/write)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from influx_dataset import WORKERS, make_campaign, make_record
from influx_servers import VictoriaMetrics

from grill_locust.sinks.influx import InfluxSink
from grill_locust.sinks.line_protocol import REQUEST_FIELDS, REQUEST_TAGS, STEP_TAG
from grill_locust.workload.kinds import KIND_AGENTIC
from tests.ports import free_port

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
FLUSH_WAIT_S = 30.0


def wait_written(sink: InfluxSink, points: int, timeout_s: float = FLUSH_WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while sink.written < points and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sink.written == points, f"written {sink.written} of {points}"


def expected_samples(records: list[dict[str, Any]], worker: str) -> dict[tuple[Any, ...], float]:
    """(metric name, sorted tags, timestamp ms) -> value, as VictoriaMetrics stores an Influx point."""
    samples = {}
    for record in records:
        tags = {key: str(record[key]) for key in REQUEST_TAGS if record[key] not in (None, "")}
        tags["worker"] = worker
        if record["kind"] == KIND_AGENTIC:
            tags[STEP_TAG] = str(record["turn"])
        tag_key = tuple(sorted(tags.items()))
        for name in REQUEST_FIELDS:
            if record[name] is not None:
                key = (f"grill_request_{name}", tag_key, round(record["wall_start"] * 1000))
                samples[key] = float(record[name])
    return samples


def stored_samples(victoria: VictoriaMetrics, run_id: str) -> dict[tuple[Any, ...], float]:
    samples: dict[tuple[Any, ...], float] = {}
    count = 0
    for series in victoria.export(f'{{__name__=~"grill_request_.*",run_id="{run_id}"}}'):
        labels = dict(series["metric"])
        name = labels.pop("__name__")
        labels.pop("db", None)
        tag_key = tuple(sorted(labels.items()))
        for value, timestamp in zip(series["values"], series["timestamps"], strict=True):
            samples[(name, tag_key, timestamp)] = float(value)
            count += 1
    assert count == len(samples), "a sample was stored twice"
    return samples


def test_campaign_points_read_back_equal_the_records(victoria: VictoriaMetrics) -> None:
    campaign = make_campaign(start_s=time.time() - 3600)
    expected: dict[tuple[Any, ...], float] = {}
    for worker in WORKERS:
        sink = InfluxSink(victoria.url, "org", "bucket", "test-token", worker, flush_interval_s=0.1)
        records = campaign.records[worker]
        for start in range(0, len(records), 40):  # as the lead's greenlet does, a batch at a time
            sink.write_records(records[start : start + 40])
        sink.close()
        assert sink.dropped == 0
        assert sink.written == len(records)
        expected.update(expected_samples(records, worker))
    assert stored_samples(victoria, "run-a") == expected


def test_records_offered_after_close_are_counted_as_dropped_and_said(
    victoria: VictoriaMetrics, caplog
) -> None:
    sink = InfluxSink(victoria.url, "org", "bucket", "test-token", "w1", flush_interval_s=0.1)
    sink.write_records([make_record(run_id="late", output_tokens=1)])
    sink.close()
    assert (sink.written, sink.dropped) == (1, 0)
    sink.write_records([make_record(run_id="late", output_tokens=i) for i in range(3)])
    assert (sink.written, sink.dropped) == (1, 3)
    assert "3 points dropped" in caplog.text and "after the sink closed" in caplog.text


def test_requests_sharing_a_millisecond_all_survive(victoria: VictoriaMetrics) -> None:
    start_s = round(time.time() - 60, 3)
    records = [make_record(run_id="same-ms", wall_start=start_s, output_tokens=i) for i in range(50)]
    sink = InfluxSink(victoria.url, "org", "bucket", "test-token", "w1", flush_interval_s=0.1)
    sink.write_records(records)
    sink.close()
    series = victoria.export('{__name__="grill_request_output_tokens",run_id="same-ms"}')
    values = sorted(value for one in series for value in one["values"])
    timestamps = sorted(timestamp for one in series for timestamp in one["timestamps"])
    assert values == list(range(50))
    assert timestamps == [round(start_s * 1000) + i for i in range(50)]


def test_points_of_this_second_are_read_back_as_soon_as_the_sink_closes(victoria: VictoriaMetrics) -> None:
    # a run's last requests start in the second before it ends; a worker's clock may run ahead of the store's
    now_s = time.time()
    starts = [now_s - 0.3 + i * 0.01 for i in range(30)] + [now_s + 2.0]
    records = [make_record(run_id="this-second", wall_start=s, output_tokens=i) for i, s in enumerate(starts)]
    sink = InfluxSink(victoria.url, "org", "bucket", "test-token", "w1", flush_interval_s=0.1)
    sink.write_records(records)
    sink.close()
    assert sink.written == len(records)
    series = victoria.export('{__name__="grill_request_output_tokens",run_id="this-second"}')
    assert sorted(value for one in series for value in one["values"]) == list(range(len(records)))


def test_outage_loses_nothing_within_the_bound_and_counts_the_rest(victoria: VictoriaMetrics) -> None:
    bound = 300
    start_s = time.time() - 600
    records = [
        make_record(run_id="outage", wall_start=start_s + i * 0.01, output_tokens=i) for i in range(600)
    ]
    sink = InfluxSink(
        victoria.url,
        "org",
        "bucket",
        "test-token",
        "w1",
        max_buffered_points=bound,
        batch_points=100,
        flush_interval_s=0.1,
    )
    sink.write_records(records[:100])
    wait_written(sink, 100)

    victoria.stop()
    for start in range(100, 600, 50):  # 500 records while the server is down: 300 fit, 200 do not
        sink.write_records(records[start : start + 50])
        time.sleep(0.02)
    time.sleep(1.0)  # the writer retries against a dead server meanwhile
    assert sink.dropped == 200
    assert sink.written == 100

    victoria.start()
    wait_written(sink, 400)
    sink.close()
    assert sink.dropped == 200
    series = victoria.export('{__name__="grill_request_output_tokens",run_id="outage"}')
    values = sorted(value for one in series for value in one["values"])
    assert values == list(range(400))  # the first 100, then the 300 the buffer held; newest dropped


def test_dead_server_never_blocks_and_close_is_bounded() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    sink = InfluxSink(url, "org", "bucket", "test-token", "w1", flush_interval_s=0.05, http_timeout_s=1.0)
    records = [make_record(run_id="dead", wall_start=time.time(), output_tokens=i) for i in range(1000)]
    before = time.perf_counter()
    for start in range(0, 1000, 100):
        sink.write_records(records[start : start + 100])
    assert time.perf_counter() - before < 0.5  # appends only, whatever the server does
    time.sleep(0.5)
    before = time.perf_counter()
    sink.close(timeout_s=1.0)
    assert time.perf_counter() - before < 8.0  # close timeout + one HTTP timeout, with slack for a busy host
    assert sink.written == 0
    assert sink.dropped == 1000


def run_probe(url: str, batches: int, batch_size: int, wait_s: float) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, str(HERE / "gevent_probe.py"), url, str(batches), str(batch_size), str(wait_s)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={"PYTHONPATH": f"{REPO}:{HERE}", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "probe-secret-token" not in result.stdout + result.stderr
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def test_under_gevent_the_event_loop_keeps_running_while_points_are_written(
    victoria: VictoriaMetrics,
) -> None:
    figures = run_probe(victoria.url, batches=20, batch_size=500, wait_s=FLUSH_WAIT_S)
    assert figures["written"] == 10_000
    assert figures["dropped"] == 0
    assert figures["max_call_ms"] < 100  # the caller only appends
    # serialising and sending happen on another OS thread: the loop is only ever held for a GIL slice
    assert figures["lag_p99_ms"] < 200, figures


def test_under_gevent_a_dead_server_costs_the_users_nothing() -> None:
    figures = run_probe(f"http://127.0.0.1:{free_port()}", batches=10, batch_size=200, wait_s=0)
    assert figures["written"] == 0
    assert figures["dropped"] == 2000
    assert figures["max_call_ms"] < 100
    assert figures["close_s"] < 15

"""The exporter's push of grill_gpu points, into a real InfluxDB-v2-write server on loopback (VictoriaMetrics)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from telemetry_helpers import SERVE_POLL_S, FakeGpu, FakeNvml

from grill_locust.sinks.influx import InfluxSink
from grill_locust.telemetry.exporter import GpuExporter
from grill_locust.telemetry.influx_push import DirectInfluxWriter, influx_push
from grill_locust.telemetry.nvml import NvmlReader
from tests.influx.influx_servers import VictoriaMetrics


def get(url: str, timeout_s: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return bytes(response.read())


@pytest.fixture
def victoria(tmp_path: Path) -> Iterator[str]:
    server = VictoriaMetrics(tmp_path)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def exported(url: str, metric: str) -> list[dict[str, Any]]:
    get(f"{url}/internal/force_flush")
    query = urllib.parse.urlencode({"match[]": metric})
    body = get(f"{url}/api/v1/export?{query}").decode()
    return [json.loads(line) for line in body.splitlines() if line.strip()]


def wait_exported(url: str, metric: str, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 15.0
    while True:
        series = exported(url, metric)
        if len(series) >= count or time.monotonic() > deadline:
            return series
        time.sleep(0.2)


def test_exporter_pushes_grill_gpu_points_per_gpu(victoria: str, h100_pair: list[FakeGpu]) -> None:
    reader = NvmlReader(FakeNvml(h100_pair), host="gpu-node-1")
    reader.open()
    push = influx_push(victoria, "grill", "grill", "", host="gpu-node-1")
    exporter = GpuExporter(reader, interval_s=60.0, on_samples=push.write_telemetry)
    exporter.poll_once()
    push.close()
    series = wait_exported(victoria, "grill_gpu_power_w", 2)
    by_gpu = {s["metric"]["gpu_index"]: s for s in series}
    assert sorted(by_gpu) == ["0", "1"]
    assert by_gpu["0"]["values"] == [512.25]
    assert by_gpu["0"]["metric"]["host"] == "gpu-node-1"
    assert by_gpu["0"]["metric"]["gpu_uuid"] == "GPU-aaaa-0000"
    energy = wait_exported(victoria, "grill_gpu_energy_mj", 2)
    assert sorted(s["values"][0] for s in energy) == [123_456.0, 987_654_321.0]


def test_direct_writer_without_the_project_sink_writes_the_same_points(
    victoria: str, h100_pair: list[FakeGpu]
) -> None:
    reader = NvmlReader(FakeNvml(h100_pair), host="gpu-node-2")
    reader.open()
    samples, _failed = reader.read(wall_time=time.time())
    writer = DirectInfluxWriter(victoria, "grill", "grill", "")
    writer.write_telemetry(samples)
    writer.close()
    series = wait_exported(victoria, 'grill_gpu_gpu_util_pct{host="gpu-node-2"}', 2)
    assert sorted(s["values"][0] for s in series) == [3.0, 97.0]


def test_unreachable_influx_is_logged_and_polling_goes_on(
    h100_pair: list[FakeGpu], caplog: pytest.LogCaptureFixture
) -> None:
    reader = NvmlReader(FakeNvml(h100_pair), host="h")
    reader.open()
    writer = DirectInfluxWriter("http://127.0.0.1:9", "grill", "grill", "")
    exporter = GpuExporter(reader, interval_s=60.0, on_samples=writer.write_telemetry)
    assert len(exporter.poll_once()) == 2
    assert len(exporter.poll_once()) == 2
    writer.close()
    assert sum("refused the points" in r.getMessage() for r in caplog.records) == 1


@pytest.fixture
def write_capture() -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """A loopback InfluxDB v2 write endpoint that keeps each request's query and body."""
    received: list[tuple[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((urllib.parse.urlsplit(self.path).query, body.decode()))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(SERVE_POLL_S,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


def test_the_direct_writer_sends_the_lines_the_runs_sink_sends(
    write_capture: tuple[str, list[tuple[str, str]]], h100_pair: list[FakeGpu]
) -> None:
    url, received = write_capture
    reader = NvmlReader(FakeNvml(h100_pair), host="gpu-node-3")
    reader.open()
    samples, _failed = reader.read(wall_time=1_700_000_000.5)
    writer = DirectInfluxWriter(url, "grill", "grill", "")
    writer.write_telemetry(samples)
    writer.close()
    sink = InfluxSink(url, "grill", "grill", "", worker="gpu-node-3")
    sink.write_telemetry(samples)
    sink.close()
    assert len(received) == 2
    (direct_query, direct_body), (sink_query, sink_body) = received
    assert "precision=ms" in direct_query and "precision=ms" in sink_query
    assert direct_body.splitlines() == sink_body.splitlines()
    assert direct_body.splitlines()[0].startswith("grill_gpu,gpu_index=0,")

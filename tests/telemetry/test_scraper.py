"""TelemetryScraper against real servers on loopback: recorded texts, a failing backend, the simulated engine."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import gevent
import pandas as pd
import pytest
from telemetry_helpers import FakeGpu, FakeNvml, MetricsServer, fixture_text

from grill_locust.config import Backend
from grill_locust.samples import TELEMETRY_COLUMNS
from grill_locust.sim import SimProcess
from grill_locust.telemetry.exporter import GpuExporter
from grill_locust.telemetry.nvml import NvmlReader
from grill_locust.telemetry.scraper import TelemetryScraper, build_targets, exporter_metrics_url
from grill_locust.telemetry.tiers import tier_telemetry


def wait_for(condition: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        gevent.sleep(0.05)
    return condition()


def test_targets_default_to_engine_metrics_and_deduplicate_exporters() -> None:
    backends = [
        Backend(
            name="vllm-a", url="http://10.0.0.5:8000", engine="vllm", gpu_exporters=["http://10.0.0.5:9835"]
        ),
        Backend(name="gw", url="http://10.0.0.9:4000", engine="litellm"),
        Backend(
            name="llama",
            url="http://10.0.0.6:8080",
            engine="llamacpp",
            metrics_url="http://10.0.0.6:8080/metrics?x=1",
        ),
    ]
    targets = build_targets(backends, ["http://10.0.0.5:9835/metrics", "http://10.0.0.7:9835"])
    assert [(t.kind, t.url, t.backend) for t in targets] == [
        ("engine", "http://10.0.0.5:8000/metrics", "vllm-a"),
        ("engine", "http://10.0.0.6:8080/metrics?x=1", "llama"),
        ("gpu", "http://10.0.0.5:9835/metrics", "vllm-a"),
        ("gpu", "http://10.0.0.7:9835/metrics", ""),
    ]
    assert exporter_metrics_url("gpu-host:9835/") == "http://gpu-host:9835/metrics"


def test_scrape_rounds_give_canonical_samples_and_hit_rate(metrics_server: MetricsServer) -> None:
    backend = Backend(name="vllm-a", url=metrics_server.url, engine="vllm")
    scraper = TelemetryScraper([backend], interval_s=1.0)
    metrics_server.body = fixture_text("vllm_v1.txt")
    (first,) = scraper.scrape_once()
    metrics_server.body = fixture_text("vllm_v1_later.txt")
    (second,) = scraper.scrape_once()
    assert first["source"] == "vllm-a" and first["host"] == "127.0.0.1"
    assert first["requests_running"] == 12.0 and second["requests_running"] == 30.0
    assert second["prefix_cache_hit_rate"] == pytest.approx(0.8)
    assert abs(second["wall_time"] - time.time()) < 60


def test_failing_backend_is_logged_once_retried_and_never_stops_the_others(
    metrics_server: MetricsServer, caplog: pytest.LogCaptureFixture
) -> None:
    down = Backend(name="down", url="http://127.0.0.1:9", engine="sglang")  # discard port: refused
    up = Backend(name="up", url=metrics_server.url, engine="sglang")
    metrics_server.body = fixture_text("sglang.txt")
    scraper = TelemetryScraper([down, up], interval_s=1.0)
    with caplog.at_level(logging.WARNING, logger="grill_locust.telemetry.scraper"):
        rounds = [scraper.scrape_once() for _ in range(3)]
        metrics_server.status = 500
        assert scraper.scrape_once() == []
        metrics_server.status = 200
        assert len(scraper.scrape_once()) == 1
    assert all([s["backend"] for s in samples] == ["up"] for samples in rounds)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("backend down" in m for m in messages) == 1
    assert sum("backend up" in m and "HTTP 500" in m for m in messages) == 1
    assert sum("answers again" in m for m in messages) == 1


def test_started_scraper_delivers_engine_and_gpu_samples_every_interval(
    metrics_server: MetricsServer, h100_pair: list[FakeGpu]
) -> None:
    reader = NvmlReader(FakeNvml(h100_pair), host="gpu-node-1")
    reader.open()
    exporter = GpuExporter(reader, interval_s=0.2)
    server, port = exporter.serve("127.0.0.1", 0)
    metrics_server.body = fixture_text("vllm_v1.txt")
    backend = Backend(
        name="vllm-a", url=metrics_server.url, engine="vllm", gpu_exporters=[f"http://127.0.0.1:{port}"]
    )
    rounds: list[list[dict[str, Any]]] = []
    scraper = TelemetryScraper([backend], interval_s=0.2, on_samples=rounds.append)
    try:
        scraper.start()
        assert wait_for(lambda: len(rounds) >= 3, timeout_s=20)
    finally:
        scraper.stop()
        exporter.stop()
        server.shutdown()
    kinds = sorted((s["kind"], s["gpu_index"]) for s in rounds[0])
    assert kinds == [("engine", None), ("gpu", 0), ("gpu", 1)]
    gpu0 = next(s for s in rounds[0] if s["gpu_index"] == 0)
    assert gpu0["backend"] == "vllm-a" and gpu0["host"] == "gpu-node-1" and gpu0["power_w"] == 512.25
    settled = len(rounds)
    gevent.sleep(0.5)
    assert len(rounds) == settled  # stopped means stopped


SILENT_TARGETS = 3


def test_a_silent_target_holds_up_no_other_under_gevent(metrics_server: MetricsServer) -> None:
    """Under Locust (gevent-patched sockets) the targets of a round are fetched at once: three
    targets that accept and never answer cost one scrape timeout together, not one each."""
    silent = [socket.socket() for _ in range(SILENT_TARGETS)]
    for listener in silent:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)  # the kernel accepts; nobody reads or answers
    metrics_server.body = fixture_text("vllm_v1.txt")
    script = textwrap.dedent(
        """
        from gevent import monkey; monkey.patch_all()
        import sys, time
        from grill_locust.config import Backend
        from grill_locust.telemetry.scraper import TelemetryScraper
        fast, *silent = sys.argv[1:]
        backends = [Backend(name=f"silent{i}", url=url, engine="vllm") for i, url in enumerate(silent)]
        scraper = TelemetryScraper([*backends, Backend(name="fast", url=fast, engine="vllm")], interval_s=1.0)
        start = time.monotonic()
        samples = scraper.scrape_once()
        print(scraper.timeout_s, time.monotonic() - start, *[s["backend"] for s in samples])
        """
    )
    urls = [f"http://127.0.0.1:{listener.getsockname()[1]}" for listener in silent]
    try:
        done = subprocess.run(
            [sys.executable, "-c", script, metrics_server.url, *urls],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        for listener in silent:
            listener.close()
    assert done.returncode == 0, done.stderr[-2000:]
    timeout_s, elapsed_s, *answered = done.stdout.split()
    assert answered == ["fast"]
    assert float(timeout_s) <= float(elapsed_s) < SILENT_TARGETS * float(timeout_s)


def chat(url: str, prompt: str) -> None:
    body = json.dumps(
        {
            "model": "grill-sim",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 8,
            "stream": False,
        }
    ).encode()
    request = urllib.request.Request(
        url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()


def test_live_scrape_of_the_simulated_engine_lands_samples_with_the_right_fields(tmp_path: Path) -> None:
    shared = "You are a careful coding assistant. " * 40
    with SimProcess.start(profile="vllm") as sim:
        backend = Backend(name="sim-vllm", url=sim.url, engine="sim")
        rounds: list[list[dict[str, Any]]] = []
        scraper = TelemetryScraper([backend], interval_s=0.2, on_samples=rounds.append)
        requests_done = threading.Event()

        def send() -> None:
            try:
                for index in range(6):
                    chat(sim.url, shared + f"Question {index}: what does this function return?")
            finally:
                requests_done.set()

        scraper.start()
        wall_start = time.time()
        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        try:
            assert wait_for(requests_done.is_set, timeout_s=60)
            count = len(rounds)
            assert wait_for(lambda: len(rounds) >= count + 2, timeout_s=10)  # a scrape after the last request
        finally:
            scraper.stop()
        wall_end = time.time()
    samples = [s for one_round in rounds for s in one_round]
    assert samples and all(s["kind"] == "engine" and s["backend"] == "sim-vllm" for s in samples)
    last = samples[-1]
    for field in (
        "requests_running",
        "requests_waiting",
        "kv_cache_usage",
        "prompt_tokens_total",
        "generation_tokens_total",
        "cached_tokens_total",
        "prefix_queries_total",
        "preemptions_total",
    ):
        assert last[field] is not None, field
    assert last["prompt_tokens_total"] > 0 and last["generation_tokens_total"] > 0
    assert 0.0 <= last["kv_cache_usage"] <= 1.0
    assert last["cached_tokens_total"] > 0  # the shared prefix was served from the cache

    frame = pd.DataFrame(samples, columns=list(TELEMETRY_COLUMNS))
    frame.to_parquet(tmp_path / "telemetry.parquet")
    telemetry = pd.read_parquet(tmp_path / "telemetry.parquet")
    assert list(telemetry.columns) == list(TELEMETRY_COLUMNS)
    phases = pd.DataFrame(
        [
            {
                "target": "sim-vllm/grill-sim/x",
                "backend": "sim-vllm",
                "tier_index": 0,
                "start_wall": wall_start - 1.0,
                "end_wall": wall_end,
            }
        ]
    )
    records = pd.DataFrame([{"target": "sim-vllm/grill-sim/x", "tier_index": 0, "output_tokens": 8}] * 6)
    (row,) = tier_telemetry(telemetry, phases, records).to_dict("records")
    assert 0.0 < row["prefix_hit_rate"] <= 1.0
    assert row["kv_cache_peak"] >= row["kv_cache_mean"] >= 0.0
    assert row["waiting_mean"] >= 0.0
    assert pd.isna(row["gpu_util_mean"])  # no GPU exporter in this run

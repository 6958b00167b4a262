"""TGI's /metrics scraped by default like vLLM's: its router's exposition (counters without `_total`,
per-request histograms) served on loopback, read into the same canonical series, and per tier."""

from __future__ import annotations

import pandas as pd
import pytest
from telemetry_helpers import MetricsServer, fixture_text

from grill_locust.config import Backend
from grill_locust.telemetry.engine_metrics import EngineSampler
from grill_locust.telemetry.scraper import TelemetryScraper, build_targets
from grill_locust.telemetry.tiers import tier_telemetry


def test_tgi_is_scraped_at_its_default_route_into_the_canonical_series(metrics_server: MetricsServer) -> None:
    backend = Backend(name="tgi-a", url=metrics_server.url, engine="tgi")  # no metrics_url given
    scraper = TelemetryScraper([backend], interval_s=1.0)
    assert [t.url for t in scraper.targets] == [metrics_server.url + "/metrics"]
    metrics_server.body = fixture_text("tgi.txt")
    (first,) = scraper.scrape_once()
    metrics_server.body = fixture_text("tgi_later.txt")
    (second,) = scraper.scrape_once()
    assert (first["requests_running"], first["requests_waiting"]) == (8.0, 3.0)  # batch size, queue size
    assert (second["requests_running"], second["requests_waiting"]) == (12.0, 5.0)
    assert (first["prompt_tokens_total"], first["generation_tokens_total"]) == (20000.0, 8000.0)
    assert (first["queue_seconds_total"], first["queued_requests_total"]) == (2.0, 40.0)
    # TGI has no KV gauge nor prefix cache counters: those stay empty, never 0
    assert first["kv_cache_usage"] is None and second["prefix_cache_hit_rate"] is None

    phases = pd.DataFrame(
        [{"target": "tgi-a/m/s", "tier_index": 0, "backend": "tgi-a", "start_wall": 0.0, "end_wall": 2e10}]
    )
    tier = tier_telemetry(pd.DataFrame([first, second]), phases, None).iloc[0]
    # 3 s of queueing over the 20 requests that left the queue between the two scrapes
    assert tier["queue_time_mean_s"] == pytest.approx(3.0 / 20)
    assert tier["waiting_mean"] == pytest.approx(4.0)


def test_vllm_queue_time_histogram_feeds_the_same_series() -> None:
    text = (
        "# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase for request.\n"
        "# TYPE vllm:request_queue_time_seconds histogram\n"
        'vllm:request_queue_time_seconds_bucket{engine="0",le="0.3",model_name="m"} 9.0\n'
        'vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} 10.0\n'
        'vllm:request_queue_time_seconds_count{engine="0",model_name="m"} 10.0\n'
        'vllm:request_queue_time_seconds_sum{engine="0",model_name="m"} 1.25\n'
    )
    sample = EngineSampler("vllm", "v", "v", "h").sample(text, 0.0)
    assert (sample["queue_seconds_total"], sample["queued_requests_total"]) == (1.25, 10.0)


def test_ollama_has_no_metrics_route_so_nothing_is_scraped() -> None:
    ollama = Backend(name="ollama", url="http://127.0.0.1:11434", engine="ollama")
    assert build_targets([ollama], []) == []
    assert TelemetryScraper([ollama]).targets == []

"""Recorded /metrics texts of vLLM (current and pre-0.9), SGLang and llama.cpp -> exact canonical values."""

from __future__ import annotations

import pytest
from telemetry_helpers import fixture_text

from grill_locust.samples import TELEMETRY_COLUMNS
from grill_locust.telemetry.engine_metrics import EngineSampler, parse_samples


def sampler(engine: str) -> EngineSampler:
    return EngineSampler(engine, source="b", backend="b", host="10.0.0.5")


def test_vllm_current_names_give_canonical_fields() -> None:
    sample = sampler("vllm").sample(fixture_text("vllm_v1.txt"), wall_time=100.0)
    assert list(sample) == list(TELEMETRY_COLUMNS)
    assert sample["kind"] == "engine" and sample["backend"] == "b" and sample["host"] == "10.0.0.5"
    assert sample["requests_running"] == 12.0
    assert sample["requests_waiting"] == 3.0
    assert sample["kv_cache_usage"] == 0.4375
    assert sample["prompt_tokens_total"] == 182344.0
    assert sample["generation_tokens_total"] == 40960.0
    assert sample["cached_tokens_total"] == 121500.0  # prefix_cache_hits_total, not its _created twin
    assert sample["prefix_queries_total"] == 180000.0
    assert sample["preemptions_total"] == 2.0
    assert sample["prefix_cache_hit_rate"] is None  # first scrape: no delta yet
    assert sample["gpu_util_pct"] is None


def test_vllm_prefix_hit_rate_comes_from_deltas_between_scrapes() -> None:
    engine = sampler("vllm")
    engine.sample(fixture_text("vllm_v1.txt"), wall_time=100.0)
    later = engine.sample(fixture_text("vllm_v1_later.txt"), wall_time=102.0)
    # (129500 - 121500) / (190000 - 180000): this interval's hit rate, not the cumulative 0.68
    assert later["prefix_cache_hit_rate"] == pytest.approx(0.8)
    assert later["requests_waiting"] == 17.0 and later["kv_cache_usage"] == 0.875
    assert later["preemptions_total"] == 5.0


def test_vllm_counter_reset_after_restart_gives_no_rate_then_recovers() -> None:
    engine = sampler("vllm")
    engine.sample(fixture_text("vllm_v1_later.txt"), wall_time=100.0)
    after_restart = engine.sample(fixture_text("vllm_v1.txt"), wall_time=102.0)
    assert after_restart["prefix_cache_hit_rate"] is None
    again = engine.sample(fixture_text("vllm_v1_later.txt"), wall_time=104.0)
    assert again["prefix_cache_hit_rate"] == pytest.approx(0.8)


def test_idle_engine_has_no_hit_rate() -> None:
    engine = sampler("vllm")
    engine.sample(fixture_text("vllm_v1.txt"), wall_time=100.0)
    assert engine.sample(fixture_text("vllm_v1.txt"), wall_time=102.0)["prefix_cache_hit_rate"] is None


def test_vllm_v1_before_the_rename_reads_the_gpu_prefix_cache_counters() -> None:
    # vLLM V1 until 0.9 named the prefix-cache counters gpu_prefix_cache_*, with no hit-rate gauge
    def old_names(text: str) -> str:
        return text.replace("vllm:prefix_cache_", "vllm:gpu_prefix_cache_")

    engine = sampler("vllm")
    first = engine.sample(old_names(fixture_text("vllm_v1.txt")), wall_time=100.0)
    assert first["cached_tokens_total"] == 121500.0 and first["prefix_queries_total"] == 180000.0
    later = engine.sample(old_names(fixture_text("vllm_v1_later.txt")), wall_time=102.0)
    assert later["prefix_cache_hit_rate"] == pytest.approx(0.8)


def test_vllm_before_0_9_uses_gpu_cache_usage_and_hit_rate_gauge() -> None:
    sample = sampler("vllm").sample(fixture_text("vllm_v0.txt"), wall_time=100.0)
    assert sample["kv_cache_usage"] == 0.62
    assert sample["requests_running"] == 8.0 and sample["requests_waiting"] == 5.0
    assert sample["prefix_cache_hit_rate"] == 0.35
    assert sample["cached_tokens_total"] is None and sample["prefix_queries_total"] is None
    assert sample["preemptions_total"] == 7.0
    assert sample["prompt_tokens_total"] == 51234.0 and sample["generation_tokens_total"] == 20480.0


def test_vllm_data_parallel_engines_sum_counts_and_average_usage() -> None:
    text = "\n".join(
        [
            'vllm:num_requests_running{engine="0",model_name="m"} 4',
            'vllm:num_requests_running{engine="1",model_name="m"} 6',
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2',
            'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.6',
            "",
        ]
    )
    sample = sampler("vllm").sample(text, wall_time=1.0)
    assert sample["requests_running"] == 10.0
    assert sample["kv_cache_usage"] == pytest.approx(0.4)


def test_sglang_names_and_hit_rate_from_cached_over_prompt_tokens() -> None:
    engine = sampler("sglang")
    first = engine.sample(fixture_text("sglang.txt"), wall_time=100.0)
    assert first["requests_running"] == 24.0
    assert first["requests_waiting"] == 6.0
    assert first["kv_cache_usage"] == 0.71
    assert first["prompt_tokens_total"] == 8128902.0
    assert first["generation_tokens_total"] == 7557572.0
    assert first["cached_tokens_total"] == 4_500_000.0  # device + host cache sources
    assert first["preemptions_total"] == 3.0
    assert first["prefix_cache_hit_rate"] is None  # counters present: the gauge is not used
    later = engine.sample(fixture_text("sglang_later.txt"), wall_time=102.0)
    assert later["prefix_cache_hit_rate"] == pytest.approx(15000 / 20000)


def test_llamacpp_names_without_kv_gauge_or_cached_counter() -> None:
    sample = sampler("llamacpp").sample(fixture_text("llamacpp.txt"), wall_time=100.0)
    assert sample["requests_running"] == 2.0
    assert sample["requests_waiting"] == 5.0
    assert sample["prompt_tokens_total"] == 33065.0
    assert sample["generation_tokens_total"] == 7801.0
    assert sample["kv_cache_usage"] is None
    assert sample["cached_tokens_total"] is None and sample["prefix_cache_hit_rate"] is None


def test_llamacpp_hit_rate_where_cached_counter_is_present() -> None:
    def text(cached: int, prompt: int) -> str:
        return (
            fixture_text("llamacpp.txt").replace(
                "llamacpp:prompt_tokens_total 33065", f"llamacpp:prompt_tokens_total {prompt}"
            )
            + f"# TYPE llamacpp:prompt_tokens_cached_total counter\nllamacpp:prompt_tokens_cached_total {cached}\n"
        )

    # llama.cpp's prompt counter leaves out cached tokens: 900 cached beside 1000 computed is 900 of 1900
    engine = sampler("llamacpp")
    engine.sample(text(1000, 33065), wall_time=1.0)
    assert engine.sample(text(1900, 34065), wall_time=3.0)["prefix_cache_hit_rate"] == pytest.approx(
        900 / 1900
    )


def test_engine_not_named_is_recognised_by_its_metric_prefix() -> None:
    sample = sampler("openai").sample(fixture_text("sglang.txt"), wall_time=1.0)
    assert sample["kv_cache_usage"] == 0.71


def test_simulated_engine_is_read_with_vllm_names() -> None:
    sample = sampler("sim").sample(fixture_text("vllm_v1.txt"), wall_time=1.0)
    assert sample["requests_running"] == 12.0


def test_unparseable_text_raises_for_the_scraper_to_log() -> None:
    with pytest.raises(ValueError):
        parse_samples("vllm:num_requests_running{engine=0} twelve\n")

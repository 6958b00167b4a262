"""`/metrics` of the simulated engine: Prometheus text with vLLM's metric names (and SGLang's as well,
for that profile), labelled `model_name="<served name>"` as vLLM does; or llama.cpp's own names alone,
unlabelled, for the llama.cpp flavor."""

from __future__ import annotations

from dataclasses import dataclass

from grill_locust.engines import SIM_ABORTED_TOKENS
from grill_locust.sim.engine import TTFT_BUCKETS_S, Engine


def _sample(lines: list[str], name: str, kind: str, help_text: str, value: float, labels: str) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")
    selector = f"{{{labels}}}" if labels else ""
    lines.append(f"{name}{selector} {float(value)!r}")


def render_metrics(engine: Engine, model: str, flavor: str = "vllm") -> str:
    counters = engine.counters
    cache = engine.cache
    labels = f'model_name="{model}"'
    running = len(engine.running)
    waiting = len(engine.waiting)
    lines: list[str] = []
    _sample(
        lines,
        "vllm:num_requests_running",
        "gauge",
        "Number of requests in model execution batches.",
        running,
        labels,
    )
    _sample(
        lines,
        "vllm:num_requests_waiting",
        "gauge",
        "Number of requests waiting to be processed.",
        waiting,
        labels,
    )
    _sample(
        lines,
        "vllm:kv_cache_usage_perc",
        "gauge",
        "KV-cache usage. 1 means 100 percent usage.",
        cache.usage(),
        labels,
    )
    counter_values = (
        (
            "vllm:prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.",
            cache.query_tokens,
        ),
        (
            "vllm:prefix_cache_hits_total",
            "Prefix cache hits, in terms of number of cached tokens.",
            cache.hit_tokens,
        ),
        ("vllm:prompt_tokens_total", "Number of prefill tokens processed.", counters.prompt_tokens),
        (
            "vllm:generation_tokens_total",
            "Number of generation tokens processed.",
            counters.generation_tokens,
        ),
        (
            "vllm:num_preemptions_total",
            "Cumulative number of preemption from the engine.",
            counters.preemptions,
        ),
    )
    for name, help_text, value in counter_values:
        _sample(lines, name, "counter", help_text, value, labels)
    # one series per finish reason; "abort": abandoned by its client (vLLM's label, though vLLM's own
    # releases leave it at 0: their abort path skips the finished-request stats); a fault is none
    name = "vllm:request_success_total"
    lines.append(f"# HELP {name} Count of successfully processed requests.")
    lines.append(f"# TYPE {name} counter")
    for reason, count in counters.finished_by_reason.items():
        lines.append(f'{name}{{finished_reason="{reason}",{labels}}} {float(count)!r}')
    _sample(  # vLLM has no name for it
        lines,
        SIM_ABORTED_TOKENS,
        "counter",
        "Tokens generated for requests whose client closed the stream (wasted work).",
        counters.aborted_generation_tokens,
        labels,
    )
    name = "vllm:time_to_first_token_seconds"
    lines.append(f"# HELP {name} Histogram of time to first token in seconds.")
    lines.append(f"# TYPE {name} histogram")
    cumulative = 0
    for bound, count in zip(TTFT_BUCKETS_S, counters.ttft_bucket_counts, strict=False):
        cumulative += count
        lines.append(f'{name}_bucket{{le="{bound}",{labels}}} {float(cumulative)!r}')
    lines.append(f'{name}_bucket{{le="+Inf",{labels}}} {float(counters.ttft_count)!r}')
    lines.append(f"{name}_count{{{labels}}} {float(counters.ttft_count)!r}")
    lines.append(f"{name}_sum{{{labels}}} {counters.ttft_sum_s!r}")

    if flavor == "sglang":
        sg = f'model_name="{model}"'
        hit_rate = cache.hit_tokens / cache.query_tokens if cache.query_tokens else 0.0
        _sample(lines, "sglang:num_running_reqs", "gauge", "The number of running requests.", running, sg)
        _sample(
            lines,
            "sglang:num_queue_reqs",
            "gauge",
            "The number of requests in the waiting queue.",
            waiting,
            sg,
        )
        _sample(lines, "sglang:token_usage", "gauge", "The token usage.", cache.usage(), sg)
        _sample(lines, "sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", hit_rate, sg)
        _sample(
            lines,
            "sglang:prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            cache.query_tokens,
            sg,
        )
        _sample(
            lines,
            "sglang:cached_tokens_total",
            "counter",
            "Number of cached prompt tokens.",
            cache.hit_tokens,
            sg,
        )
        _sample(
            lines,
            "sglang:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            counters.generation_tokens,
            sg,
        )
    return "\n".join(lines) + "\n"


@dataclass(slots=True)
class PredictionTotals:
    """What llama-server adds up as each request leaves its slot."""

    prompt_tokens: int = 0  # computed, the cached ones excluded
    cached_tokens: int = 0
    prompt_s: float = 0.0
    predicted_tokens: int = 0
    predicted_s: float = 0.0
    tokens_max: int = 0  # the longest sequence seen, prompt + output


def render_llamacpp_metrics(engine: Engine, totals: PredictionTotals) -> str:
    """The names, help texts and order of llama-server's `--metrics` (b11434); no KV gauge (it has none)."""
    steps = engine.counters.steps
    counters = (
        (
            "prompt_tokens_total",
            "Number of prompt tokens processed, excluding cached tokens",
            totals.prompt_tokens,
        ),
        ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", totals.cached_tokens),
        ("prompt_seconds_total", "Total time spent processing prompts", totals.prompt_s),
        ("tokens_predicted_total", "Number of generation tokens processed", totals.predicted_tokens),
        ("tokens_predicted_seconds_total", "Total time spent generating tokens", totals.predicted_s),
        (
            "n_decode_total",
            "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
            steps,
        ),
        ("n_tokens_max", "Largest observed sequence length (prompt + generation)", totals.tokens_max),
        ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated", 0),
        (
            "spec_decode_num_accepted_tokens_total",
            "Speculative: Total draft tokens accepted by the target model",
            0,
        ),
        ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps", 0),
    )
    prompt_rate = totals.prompt_tokens / totals.prompt_s if totals.prompt_s else 0.0
    predicted_rate = totals.predicted_tokens / totals.predicted_s if totals.predicted_s else 0.0
    # every step decodes one token per busy slot: generated tokens per step stand for busy slots per step
    busy_per_decode = engine.counters.generation_tokens / steps if steps else 0.0
    gauges = (
        ("prompt_tokens_seconds", "Average prompt throughput in tokens/s", prompt_rate),
        ("predicted_tokens_seconds", "Average generation throughput in tokens/s", predicted_rate),
        ("requests_processing", "Number of requests processing", len(engine.running)),
        ("requests_deferred", "Number of requests deferred", len(engine.waiting)),
        ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call", busy_per_decode),
    )
    lines: list[str] = []
    for kind, items in (("counter", counters), ("gauge", gauges)):
        for name, help_text, value in items:
            _sample(lines, f"llamacpp:{name}", kind, help_text, value, "")
    return "\n".join(lines) + "\n"

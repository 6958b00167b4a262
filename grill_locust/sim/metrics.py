"""`/metrics` of the simulated engine: Prometheus text with vLLM's metric names (and SGLang's or
llama.cpp's as well, for those profiles), labelled `model_name="<served name>"` as vLLM does."""

from __future__ import annotations

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
    name = "vllm:request_success_total"  # one series per finish reason; a cancelled request is none
    lines.append(f"# HELP {name} Count of successfully processed requests.")
    lines.append(f"# TYPE {name} counter")
    for reason, count in counters.finished_by_reason.items():
        lines.append(f'{name}{{finished_reason="{reason}",{labels}}} {float(count)!r}')
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
    elif flavor == "llamacpp":
        _sample(lines, "llamacpp:requests_processing", "gauge", "Number of requests processing.", running, "")
        _sample(lines, "llamacpp:requests_deferred", "gauge", "Number of requests deferred.", waiting, "")
        _sample(
            lines,
            "llamacpp:prompt_tokens_total",
            "counter",
            "Number of prompt tokens processed.",
            cache.query_tokens,
            "",
        )
        _sample(
            lines,
            "llamacpp:tokens_predicted_total",
            "counter",
            "Number of generation tokens processed.",
            counters.generation_tokens,
            "",
        )
    return "\n".join(lines) + "\n"

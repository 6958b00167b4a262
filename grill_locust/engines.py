"""What grill-locust knows of each engine, in one table: routes, wire quirks, metric names.

Every module that decides something by engine reads `engine_facts(name)`; none compares engine
names itself. Adding an engine is one `EngineFacts` entry here plus a recorded transcript test
(tests/client/transcripts/). Facts were seen on real servers or read in their sources (2026).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Api = Literal["chat", "completions", "messages", "infill"]
TokenizeBody = Literal["content", "prompt"]
SUM = "sum"
MEAN = "mean"


@dataclass(frozen=True)
class MetricSource:
    """Where one canonical telemetry field comes from: sample names tried in order (newest first),
    and how several series of that name combine (summed, or averaged for fractions). `labels`: only
    the series carrying these label values count (one finish reason of a per-reason counter)."""

    names: tuple[str, ...]
    combine: str = SUM
    labels: tuple[tuple[str, str], ...] = ()


# The simulator's count of tokens generated for requests whose client went away (aborted): no engine
# exports one (vLLM counts them in generation_tokens_total with the rest; llama.cpp and SGLang likewise)
SIM_ABORTED_TOKENS = "grill_sim:aborted_generation_tokens_total"


@dataclass(frozen=True)
class MetricNames:
    """One engine family's Prometheus names. `hit_rate_gauge` is the fallback when no counters exist.
    `queried_excludes_cached`: the prompt counter that stands for prefix-cache queries leaves out the
    tokens served from the cache (llama.cpp's), so the queries are that counter plus the cached one."""

    family: str
    prefix: str
    fields: Mapping[str, MetricSource]
    hit_rate_gauge: str | None = None
    queried_excludes_cached: bool = False


@dataclass(frozen=True)
class EngineFacts:
    """What the code decides by engine.

    `apis`: the request APIs the server answers (a backend's `api` must be one of them; `messages`
    is Anthropic's `/v1/messages`). `metrics_path` / `tokenize_path`: routes scraped or called
    without being configured (None: the engine has none by default). Every engine here ends an
    OpenAI stream with `data: [DONE]` (a Messages stream with `message_stop`) and sends usage in it
    when `stream_options.include_usage` is asked; `cached_tokens_flag` is the server flag without
    which usage carries no `cached_tokens`. `closes_after_stream`: the server closes the connection
    after each streamed reply despite keep-alive, so a client reconnects rather than reusing it.
    `ignore_eos_param`: the body field that makes generation run to max_tokens (None: the engine
    has none, and a model's `ignore_eos` is not sent to it).
    """

    name: str
    apis: frozenset[Api]
    metrics_path: str | None = None
    metrics: MetricNames | None = None
    tokenize_path: str | None = None
    tokenize_body: TokenizeBody = "prompt"
    models_path: str | None = "/v1/models"
    health_path: str | None = None
    model_in_tokenize: bool = True  # vLLM's /tokenize wants the served model's name
    cached_tokens_flag: str | None = None
    ignore_eos_param: str | None = None
    closes_after_stream: bool = False
    synonyms: tuple[str, ...] = field(default=())


VLLM_METRICS = MetricNames(
    family="vllm",
    prefix="vllm:",
    fields={
        "requests_running": MetricSource(("vllm:num_requests_running",)),
        "requests_waiting": MetricSource(("vllm:num_requests_waiting",)),
        # vLLM >= 0.9 (V1); the pre-0.9 name stays as a fallback
        "kv_cache_usage": MetricSource(("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), MEAN),
        "prompt_tokens_total": MetricSource(("vllm:prompt_tokens_total",)),
        "generation_tokens_total": MetricSource(("vllm:generation_tokens_total",)),
        # prefix-cache counters count tokens: hits / queries is the token hit rate (V1 named them
        # gpu_prefix_cache_* until 0.9)
        "cached_tokens_total": MetricSource(
            ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
        ),
        "prefix_queries_total": MetricSource(
            ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
        ),
        "preemptions_total": MetricSource(("vllm:num_preemptions_total",)),
        # histogram sum and count: their rises give the mean time a request waited in the queue
        "queue_seconds_total": MetricSource(("vllm:request_queue_time_seconds_sum",)),
        "queued_requests_total": MetricSource(("vllm:request_queue_time_seconds_count",)),
        # requests finished by an abort (the client went away); V1 releases up to at least 0.13 leave
        # it at 0 for client disconnects, whose requests skip the finished-request stats
        "aborted_requests_total": MetricSource(
            ("vllm:request_success_total",), labels=(("finished_reason", "abort"),)
        ),
        "aborted_tokens_total": MetricSource((SIM_ABORTED_TOKENS,)),
    },
    hit_rate_gauge="vllm:gpu_prefix_cache_hit_rate",  # V0 engine, cumulative block hit rate
)

SGLANG_METRICS = MetricNames(
    family="sglang",
    prefix="sglang:",
    fields={
        "requests_running": MetricSource(("sglang:num_running_reqs",)),
        "requests_waiting": MetricSource(("sglang:num_queue_reqs",)),
        "kv_cache_usage": MetricSource(("sglang:token_usage",), MEAN),
        "prompt_tokens_total": MetricSource(("sglang:prompt_tokens_total",)),
        "generation_tokens_total": MetricSource(("sglang:generation_tokens_total",)),
        "cached_tokens_total": MetricSource(("sglang:cached_tokens_total",)),
        "prefix_queries_total": MetricSource(("sglang:prompt_tokens_total",)),
        "preemptions_total": MetricSource(("sglang:num_retracted_requests_total",)),
        "aborted_requests_total": MetricSource(("sglang:num_aborted_requests_total",)),
    },
    hit_rate_gauge="sglang:cache_hit_rate",  # instantaneous gauge: only when the counters are missing
)

LLAMACPP_METRICS = MetricNames(
    family="llamacpp",
    prefix="llamacpp:",
    fields={
        "requests_running": MetricSource(("llamacpp:requests_processing",)),
        "requests_waiting": MetricSource(("llamacpp:requests_deferred",)),
        # older llama-server builds only; newer ones have no KV gauge on /metrics
        "kv_cache_usage": MetricSource(("llamacpp:kv_cache_usage_ratio",), MEAN),
        "prompt_tokens_total": MetricSource(("llamacpp:prompt_tokens_total",)),
        "generation_tokens_total": MetricSource(("llamacpp:tokens_predicted_total",)),
        "cached_tokens_total": MetricSource(("llamacpp:prompt_tokens_cached_total",)),
        "prefix_queries_total": MetricSource(("llamacpp:prompt_tokens_total",)),
    },
    queried_excludes_cached=True,  # "Number of prompt tokens processed, excluding cached tokens"
)

# TGI's router (metrics-exporter-prometheus): counters without `_total`, histograms per request; its
# token sums are recorded when a request is validated (input) or done (generated), not per step
TGI_METRICS = MetricNames(
    family="tgi",
    prefix="tgi_",
    fields={
        "requests_running": MetricSource(("tgi_batch_current_size",)),
        "requests_waiting": MetricSource(("tgi_queue_size",)),
        "prompt_tokens_total": MetricSource(("tgi_request_input_length_sum",)),
        "generation_tokens_total": MetricSource(("tgi_request_generated_tokens_sum",)),
        "queue_seconds_total": MetricSource(("tgi_request_queue_duration_sum",)),
        "queued_requests_total": MetricSource(("tgi_request_queue_duration_count",)),
    },
)

# every family a scrape can be recognised by, for engines named e.g. `openai` or `litellm`
METRIC_FAMILIES: tuple[MetricNames, ...] = (VLLM_METRICS, SGLANG_METRICS, LLAMACPP_METRICS, TGI_METRICS)

_OPENAI_APIS: frozenset[Api] = frozenset({"chat", "completions"})
_WITH_MESSAGES: frozenset[Api] = frozenset({"chat", "completions", "messages"})

ENGINES: dict[str, EngineFacts] = {
    facts.name: facts
    for facts in (
        EngineFacts(
            "vllm",
            apis=_WITH_MESSAGES,
            metrics_path="/metrics",
            metrics=VLLM_METRICS,
            tokenize_path="/tokenize",
            health_path="/health",
            cached_tokens_flag="--enable-prompt-tokens-details",
            ignore_eos_param="ignore_eos",
        ),
        EngineFacts(
            "sglang",
            apis=_WITH_MESSAGES,
            metrics_path="/metrics",
            metrics=SGLANG_METRICS,
            tokenize_path="/tokenize",
            health_path="/health",
            cached_tokens_flag="--enable-cache-report",
            ignore_eos_param="ignore_eos",
        ),
        EngineFacts(
            "llamacpp",
            apis=frozenset({"chat", "completions", "messages", "infill"}),
            metrics_path="/metrics",
            metrics=LLAMACPP_METRICS,
            tokenize_path="/tokenize",
            tokenize_body="content",
            health_path="/health",
            model_in_tokenize=False,
            ignore_eos_param="ignore_eos",
            closes_after_stream=True,
            synonyms=("llamacppserver", "llamaserver"),
        ),
        EngineFacts(
            "tgi",
            apis=_OPENAI_APIS,
            metrics_path="/metrics",
            metrics=TGI_METRICS,
            health_path="/health",
            synonyms=("textgenerationinference",),
        ),
        # Anthropic's Messages API since Ollama 0.14 (its own docs); TGI serves OpenAI's routes only
        EngineFacts("ollama", apis=_WITH_MESSAGES),
        # gateways and unnamed OpenAI-compatible servers: ignore_eos is passed on to the engine behind
        EngineFacts(
            "litellm", apis=_WITH_MESSAGES, health_path="/health/liveliness", ignore_eos_param="ignore_eos"
        ),
        EngineFacts(
            "openai", apis=_OPENAI_APIS, ignore_eos_param="ignore_eos", synonyms=("openaicompatible",)
        ),
        # the simulated engine speaks vLLM's wire format and metric names
        EngineFacts(
            "sim",
            apis=_WITH_MESSAGES,
            metrics_path="/metrics",
            metrics=VLLM_METRICS,
            tokenize_path="/tokenize",
            health_path="/health",
            ignore_eos_param="ignore_eos",
            synonyms=("simulated",),
        ),
    )
}
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINES)
_SYNONYMS = {synonym: facts.name for facts in ENGINES.values() for synonym in facts.synonyms}


class UnknownEngine(ValueError):
    """A name that is no engine of the table (the message lists the known ones)."""


def engine_name(spelling: str) -> str:
    """The table's name for an engine as other tools' files spell it (`llama.cpp-server`, `TGI`)."""
    key = re.sub(r"[\s._-]", "", spelling.lower())
    key = _SYNONYMS.get(key, key)
    if key not in ENGINES:
        raise UnknownEngine(f"unknown engine {spelling!r} (known: {', '.join(sorted(ENGINES))})")
    return key


def engine_facts(name: str) -> EngineFacts:
    """The facts of engine `name` (a name of the table; see `engine_name` for other spellings)."""
    return ENGINES[name]

"""Engine /metrics text -> canonical engine samples (sans-IO: text in, dicts out).

Each engine family names the same facts differently; `DIALECTS` maps every canonical field to the
sample names that carry it, newest name first (vLLM renamed its KV gauge in 0.9). Text is parsed
only with prometheus_client's parser. Several series of one name (data-parallel ranks, vLLM
`engine` label, SGLang `cache_source`) are summed, except fractions, which are averaged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from grill_locust.telemetry.samples import KIND_ENGINE, empty_sample

SUM = "sum"
MEAN = "mean"


@dataclass(frozen=True)
class FieldSource:
    """Where one canonical field comes from: sample names tried in order, and how series combine."""

    names: tuple[str, ...]
    combine: str = SUM


@dataclass(frozen=True)
class Dialect:
    """One engine family's metric names. `hit_rate_gauge` is the fallback when no counters exist."""

    name: str
    prefix: str
    fields: Mapping[str, FieldSource]
    hit_rate_gauge: str | None = None


VLLM = Dialect(
    name="vllm",
    prefix="vllm:",
    fields={
        "requests_running": FieldSource(("vllm:num_requests_running",)),
        "requests_waiting": FieldSource(("vllm:num_requests_waiting",)),
        # vLLM >= 0.9 (V1); the pre-0.9 name stays as a fallback
        "kv_cache_usage": FieldSource(("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), MEAN),
        "prompt_tokens_total": FieldSource(("vllm:prompt_tokens_total",)),
        "generation_tokens_total": FieldSource(("vllm:generation_tokens_total",)),
        # prefix-cache counters count tokens: hits / queries is the token hit rate (V1 named them
        # gpu_prefix_cache_* until 0.9)
        "cached_tokens_total": FieldSource(
            ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
        ),
        "prefix_queries_total": FieldSource(
            ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
        ),
        "preemptions_total": FieldSource(("vllm:num_preemptions_total",)),
    },
    hit_rate_gauge="vllm:gpu_prefix_cache_hit_rate",  # V0 engine, cumulative block hit rate
)

SGLANG = Dialect(
    name="sglang",
    prefix="sglang:",
    fields={
        "requests_running": FieldSource(("sglang:num_running_reqs",)),
        "requests_waiting": FieldSource(("sglang:num_queue_reqs",)),
        "kv_cache_usage": FieldSource(("sglang:token_usage",), MEAN),
        "prompt_tokens_total": FieldSource(("sglang:prompt_tokens_total",)),
        "generation_tokens_total": FieldSource(("sglang:generation_tokens_total",)),
        "cached_tokens_total": FieldSource(("sglang:cached_tokens_total",)),
        "prefix_queries_total": FieldSource(("sglang:prompt_tokens_total",)),
        "preemptions_total": FieldSource(("sglang:num_retracted_requests_total",)),
    },
    hit_rate_gauge="sglang:cache_hit_rate",  # instantaneous gauge: only when the counters are missing
)

LLAMACPP = Dialect(
    name="llamacpp",
    prefix="llamacpp:",
    fields={
        "requests_running": FieldSource(("llamacpp:requests_processing",)),
        "requests_waiting": FieldSource(("llamacpp:requests_deferred",)),
        # older llama-server builds only; newer ones have no KV gauge on /metrics
        "kv_cache_usage": FieldSource(("llamacpp:kv_cache_usage_ratio",), MEAN),
        "prompt_tokens_total": FieldSource(("llamacpp:prompt_tokens_total",)),
        "generation_tokens_total": FieldSource(("llamacpp:tokens_predicted_total",)),
        "cached_tokens_total": FieldSource(("llamacpp:prompt_tokens_cached_total",)),
        "prefix_queries_total": FieldSource(("llamacpp:prompt_tokens_total",)),
    },
)

TGI = Dialect(
    name="tgi",
    prefix="tgi_",
    fields={
        "requests_running": FieldSource(("tgi_batch_current_size",)),
        "requests_waiting": FieldSource(("tgi_queue_size",)),
    },
)

DIALECTS: dict[str, Dialect] = {d.name: d for d in (VLLM, SGLANG, LLAMACPP, TGI)}
# engine named in the scenario -> dialect; the simulated engine speaks vLLM's names
ENGINE_DIALECT: dict[str, str] = {
    "vllm": "vllm",
    "sim": "vllm",
    "sglang": "sglang",
    "llamacpp": "llamacpp",
    "tgi": "tgi",
}


def parse_samples(text: str) -> dict[str, list[float]]:
    """Prometheus text -> {sample name: [value of each series]} (ValueError when unparseable)."""
    values: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values.setdefault(sample.name, []).append(float(sample.value))
    return values


def detect_dialect(values: Mapping[str, list[float]]) -> Dialect | None:
    """The dialect whose prefix the most sample names carry (for engines named e.g. `openai`)."""
    counts = {d.name: sum(1 for name in values if name.startswith(d.prefix)) for d in DIALECTS.values()}
    best = max(counts, key=lambda name: counts[name])
    return DIALECTS[best] if counts[best] else None


def dialect_for(engine: str, values: Mapping[str, list[float]]) -> Dialect | None:
    named = DIALECTS.get(ENGINE_DIALECT.get(engine, ""))
    if named is not None and any(name.startswith(named.prefix) for name in values):
        return named
    return detect_dialect(values)


def _combine(series: list[float], how: str) -> float | None:
    finite = [v for v in series if not math.isnan(v)]
    if not finite:
        return None
    return sum(finite) / len(finite) if how == MEAN else sum(finite)


def read_fields(values: Mapping[str, list[float]], dialect: Dialect) -> dict[str, float | None]:
    """The canonical fields present in one scrape (first name found wins), None for the others."""
    fields: dict[str, float | None] = {}
    for field_name, source in dialect.fields.items():
        fields[field_name] = None
        for sample_name in source.names:
            if sample_name in values:
                fields[field_name] = _combine(values[sample_name], source.combine)
                break
    return fields


class EngineSampler:
    """Turns successive scrapes of ONE backend into samples; keeps the last counters for hit-rate deltas."""

    def __init__(self, engine: str, source: str, backend: str, host: str) -> None:
        self.engine = engine
        self.source = source
        self.backend = backend
        self.host = host
        self._previous_counters: tuple[float, float] | None = None  # (cached tokens, queried tokens)

    def sample(self, text: str, wall_time: float) -> dict[str, object]:
        values = parse_samples(text)
        sample = empty_sample(KIND_ENGINE, wall_time, self.source, self.backend, self.host)
        dialect = dialect_for(self.engine, values)
        if dialect is None:
            return sample
        fields = read_fields(values, dialect)
        sample.update(fields)
        sample["prefix_cache_hit_rate"] = self._hit_rate(fields, values, dialect)
        return sample

    def _hit_rate(
        self, fields: Mapping[str, float | None], values: Mapping[str, list[float]], dialect: Dialect
    ) -> float | None:
        cached, queried = fields.get("cached_tokens_total"), fields.get("prefix_queries_total")
        if cached is None or queried is None:
            self._previous_counters = None
            if dialect.hit_rate_gauge and dialect.hit_rate_gauge in values:
                return _combine(values[dialect.hit_rate_gauge], MEAN)
            return None
        previous, self._previous_counters = self._previous_counters, (cached, queried)
        if previous is None:
            return None
        cached_delta, queried_delta = cached - previous[0], queried - previous[1]
        if cached_delta < 0 or queried_delta <= 0:  # engine restarted (counters reset) or idle
            return None
        return min(1.0, cached_delta / queried_delta)

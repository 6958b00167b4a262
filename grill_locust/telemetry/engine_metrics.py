"""Engine /metrics text -> canonical engine samples (sans-IO: text in, dicts out).

Each engine family names the same facts differently; grill_locust.engines maps every canonical field
to the sample names that carry it, newest name first (vLLM renamed its KV gauge in 0.9). Text is parsed
only with prometheus_client's parser. Several series of one name (data-parallel ranks, vLLM
`engine` label, SGLang `cache_source`) are summed, except fractions, which are averaged; a source
that names label values (vLLM's `finished_reason="abort"`) takes only the series carrying them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

from grill_locust.engines import ENGINES, MEAN, METRIC_FAMILIES, MetricNames, MetricSource
from grill_locust.samples import KIND_ENGINE, Sample, empty_sample

Series = tuple[Mapping[str, str], float]  # one series of a sample name: its labels and its value
Scrape = Mapping[str, list[Series]]


def parse_samples(text: str) -> dict[str, list[Series]]:
    """Prometheus text -> {sample name: [(labels, value) of each series]} (ValueError when unparseable)."""
    values: dict[str, list[Series]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values.setdefault(sample.name, []).append((sample.labels, float(sample.value)))
    return values


def detect_dialect(values: Scrape) -> MetricNames | None:
    """The family whose prefix the most sample names carry (for engines named e.g. `openai`)."""
    counts = [(sum(1 for name in values if name.startswith(f.prefix)), f) for f in METRIC_FAMILIES]
    best_count, best = max(counts, key=lambda pair: pair[0])
    return best if best_count else None


def dialect_for(engine: str, values: Scrape) -> MetricNames | None:
    facts = ENGINES.get(engine)
    named = facts.metrics if facts is not None else None
    if named is not None and any(name.startswith(named.prefix) for name in values):
        return named
    return detect_dialect(values)


def _combine(series: list[float], how: str) -> float | None:
    finite = [v for v in series if not math.isnan(v)]
    if not finite:
        return None
    return sum(finite) / len(finite) if how == MEAN else sum(finite)


def _matching(series: list[Series], source: MetricSource) -> list[float]:
    """The values of the series that carry every label value the source names."""
    return [value for labels, value in series if all(labels.get(k) == v for k, v in source.labels)]


def read_fields(values: Scrape, dialect: MetricNames) -> dict[str, float | None]:
    """The canonical fields present in one scrape (first name found wins), None for the others."""
    fields: dict[str, float | None] = {}
    for field_name, source in dialect.fields.items():
        fields[field_name] = None
        for sample_name in source.names:
            if sample_name in values:
                fields[field_name] = _combine(_matching(values[sample_name], source), source.combine)
                break
    queried, cached = fields.get("prefix_queries_total"), fields.get("cached_tokens_total")
    if dialect.queried_excludes_cached and queried is not None and cached is not None:
        fields["prefix_queries_total"] = queried + cached
    return fields


class EngineSampler:
    """Turns successive scrapes of ONE backend into samples; keeps the last counters for hit-rate deltas."""

    def __init__(self, engine: str, source: str, backend: str, host: str) -> None:
        self.engine = engine
        self.source = source
        self.backend = backend
        self.host = host
        self._previous_counters: tuple[float, float] | None = None  # (cached tokens, queried tokens)

    def sample(self, text: str, wall_time: float) -> Sample:
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
        self, fields: Mapping[str, float | None], values: Scrape, dialect: MetricNames
    ) -> float | None:
        cached, queried = fields.get("cached_tokens_total"), fields.get("prefix_queries_total")
        if cached is None or queried is None:
            self._previous_counters = None
            if dialect.hit_rate_gauge and dialect.hit_rate_gauge in values:
                return _combine([value for _, value in values[dialect.hit_rate_gauge]], MEAN)
            return None
        previous, self._previous_counters = self._previous_counters, (cached, queried)
        if previous is None:
            return None
        cached_delta, queried_delta = cached - previous[0], queried - previous[1]
        if cached_delta < 0 or queried_delta <= 0:  # engine restarted (counters reset) or idle
            return None
        return min(1.0, cached_delta / queried_delta)

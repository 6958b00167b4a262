"""Telemetry per tier: what the GPUs and the engine did while each (target, tier) ran.

Samples are matched to a tier by time (start_wall <= wall_time <= end_wall) and by backend; GPU
samples from an exporter that no backend lists, or that several do, count for every backend. Counters
(energy, cached and queried prefix tokens, aborted requests and their tokens) count their rise over the tier: each interval between two
consecutive samples by its overlap with the tier, so a tier with fewer than two scrapes inside still
gets its own figure, and an engine restart (counter reset) loses one interval, not the tier.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from grill_locust.samples import KIND_ENGINE, KIND_GPU

TIER_TELEMETRY_COLUMNS: tuple[str, ...] = (
    "target",
    "tier_index",
    "gpu_util_mean",  # %, mean over the tier and over the backend's GPUs
    "vram_peak_bytes",  # sum over GPUs of each GPU's peak memory in use
    "power_mean_w",  # sum over GPUs of each GPU's mean power
    "energy_per_token_j",  # GPU energy over the tier / output tokens of the tier's requests
    "kv_cache_mean",
    "kv_cache_peak",
    "prefix_hit_rate",
    "waiting_mean",
    "queue_time_mean_s",  # the engine's own figure: mean time a request waited in its queue
    # the engine's wasted work: requests it aborted as their client went away (an autocomplete
    # developer typed on), and the tokens it generated for them, where its /metrics count them
    "engine_aborted_requests",
    "engine_aborted_tokens",
)
# tier column -> the engine counter whose rise over the tier it is
ENGINE_RISES: dict[str, str] = {
    "engine_aborted_requests": "aborted_requests_total",
    "engine_aborted_tokens": "aborted_tokens_total",
}
MILLIJOULES_PER_JOULE = 1000.0


def _rise(samples: pd.DataFrame, column: str, start: float, end: float) -> float | None:
    """How much a counter rose over [start, end]: each interval between consecutive samples adds its
    rise times the share of it inside the window (a rise spread evenly over its interval); a drop (a
    restart) adds nothing. None when no interval overlaps the window."""
    one = samples[["wall_time", column]].dropna().sort_values("wall_time")
    times, values = one["wall_time"].to_numpy(float), one[column].to_numpy(float)
    if len(times) < 2:
        return None
    span = times[1:] - times[:-1]
    inside = np.clip(np.minimum(times[1:], end) - np.maximum(times[:-1], start), 0.0, None)
    counted = (span > 0) & (inside > 0)
    if not counted.any():
        return None
    rise = np.clip(values[1:] - values[:-1], 0.0, None)
    return float((rise[counted] * inside[counted] / span[counted]).sum())


def _energy_j(gpu_samples: pd.DataFrame, start: float, end: float) -> float | None:
    """Energy of all GPUs over the tier: the energy counter's rise, or power integrated over the
    samples inside the tier without it."""
    total_j = 0.0
    found = False
    for _gpu, one_gpu in gpu_samples.sort_values("wall_time").groupby(
        ["source", "host", "gpu_uuid"], dropna=False
    ):
        energy_mj = _rise(one_gpu, "energy_mj", start, end)
        if energy_mj is not None:
            total_j += energy_mj / MILLIJOULES_PER_JOULE
            found = True
            continue
        tier = one_gpu[(one_gpu["wall_time"] >= start) & (one_gpu["wall_time"] <= end)]
        power = tier[["wall_time", "power_w"]].dropna()
        if len(power) >= 2:
            times, watts = power["wall_time"].to_numpy(float), power["power_w"].to_numpy(float)
            total_j += float(((watts[1:] + watts[:-1]) / 2.0 * (times[1:] - times[:-1])).sum())
            found = True
    return total_j if found else None


def _mean(series: pd.Series) -> float | None:
    series = series.dropna()
    return float(series.mean()) if len(series) else None


def _gpu_figures(gpu: pd.DataFrame) -> dict[str, float | None]:
    if gpu.empty:
        return {"gpu_util_mean": None, "vram_peak_bytes": None, "power_mean_w": None}
    per_gpu = gpu.groupby(["source", "host", "gpu_uuid"], dropna=False)
    peaks = per_gpu["mem_used_bytes"].max().dropna()
    powers = per_gpu["power_w"].mean().dropna()
    return {
        "gpu_util_mean": _mean(gpu["gpu_util_pct"]),
        "vram_peak_bytes": float(peaks.sum()) if len(peaks) else None,
        "power_mean_w": float(powers.sum()) if len(powers) else None,
    }


def _engine_figures(samples: pd.DataFrame, start: float, end: float) -> dict[str, float | None]:
    """Gauges from the backend's samples inside the tier; the prefix hit rate from its counters' rise."""
    engine = samples[(samples["wall_time"] >= start) & (samples["wall_time"] <= end)]
    if engine.empty and samples.empty:
        return dict.fromkeys(
            (
                "kv_cache_mean",
                "kv_cache_peak",
                "prefix_hit_rate",
                "waiting_mean",
                "queue_time_mean_s",
                *ENGINE_RISES,
            )
        )
    kv = engine["kv_cache_usage"].dropna()
    hit_rate: float | None = None
    hits, queries = [], []
    counters = samples["prefix_queries_total"].notna().any()
    for _source, one in samples.groupby("source"):
        cached = _rise(one, "cached_tokens_total", start, end)
        queried = _rise(one, "prefix_queries_total", start, end)
        if cached is not None and queried is not None:
            hits.append(cached)
            queries.append(queried)
    if queries and sum(queries) > 0:
        hit_rate = min(1.0, sum(hits) / sum(queries))
    elif not counters:  # an engine without the counters (vLLM V0): mean of its per-scrape rates
        hit_rate = _mean(engine["prefix_cache_hit_rate"])
    queued_s, dequeued = [], []
    for _source, one in samples.groupby("source"):
        seconds = _rise(one, "queue_seconds_total", start, end)
        requests = _rise(one, "queued_requests_total", start, end)
        if seconds is not None and requests is not None:
            queued_s.append(seconds)
            dequeued.append(requests)
    return {
        **{column: _summed_rise(samples, counter, start, end) for column, counter in ENGINE_RISES.items()},
        "queue_time_mean_s": sum(queued_s) / sum(dequeued) if dequeued and sum(dequeued) > 0 else None,
        "kv_cache_mean": float(kv.mean()) if len(kv) else None,
        "kv_cache_peak": float(kv.max()) if len(kv) else None,
        "prefix_hit_rate": hit_rate,
        "waiting_mean": _mean(engine["requests_waiting"]),
    }


def _summed_rise(samples: pd.DataFrame, counter: str, start: float, end: float) -> float | None:
    """A counter's rise over the tier, summed over the backend's scrape sources (None: none counts it)."""
    if counter not in samples:
        return None
    rises = [_rise(one, counter, start, end) for _source, one in samples.groupby("source")]
    counted = [rise for rise in rises if rise is not None]
    return sum(counted) if counted else None


def _output_tokens(records: pd.DataFrame | None, target: str, tier_index: int) -> float:
    if records is None or records.empty or "output_tokens" not in records:
        return 0.0
    mask = (records["target"] == target) & (records["tier_index"] == tier_index)
    return float(pd.to_numeric(records.loc[mask, "output_tokens"], errors="coerce").fillna(0).sum())


def tier_telemetry(
    telemetry_df: pd.DataFrame | None, phases_df: pd.DataFrame, records_df: pd.DataFrame | None
) -> pd.DataFrame:
    """One row per (target, tier_index) of phases.csv with the tier's GPU and engine figures."""
    rows: list[dict[str, object]] = []
    if telemetry_df is None or telemetry_df.empty or phases_df is None or phases_df.empty:
        return pd.DataFrame(rows, columns=list(TIER_TELEMETRY_COLUMNS))
    telemetry = telemetry_df.copy()
    telemetry["backend"] = telemetry["backend"].fillna("")
    for phase in phases_df.itertuples(index=False):
        start, end = float(phase.start_wall), float(phase.end_wall)
        if math.isnan(start) or math.isnan(end):
            continue
        backend = str(getattr(phase, "backend", ""))
        engine = telemetry[(telemetry["kind"] == KIND_ENGINE) & (telemetry["backend"] == backend)]
        gpu = telemetry[(telemetry["kind"] == KIND_GPU) & telemetry["backend"].isin([backend, ""])]
        row: dict[str, object] = {"target": phase.target, "tier_index": int(phase.tier_index)}
        row.update(_gpu_figures(gpu[(gpu["wall_time"] >= start) & (gpu["wall_time"] <= end)]))
        energy_j = _energy_j(gpu, start, end) if not gpu.empty else None
        tokens = _output_tokens(records_df, str(phase.target), int(phase.tier_index))
        row["energy_per_token_j"] = energy_j / tokens if energy_j is not None and tokens > 0 else None
        row.update(_engine_figures(engine, start, end))
        rows.append(row)
    return pd.DataFrame(rows, columns=list(TIER_TELEMETRY_COLUMNS))

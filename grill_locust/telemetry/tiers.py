"""Telemetry per tier: what the GPUs and the engine did while each (target, tier) ran.

Samples are matched to a tier by time (start_wall <= wall_time <= end_wall) and by backend; GPU
samples from an exporter no backend lists count for every backend. Counters (energy, cached and
queried prefix tokens) are summed over their positive deltas between consecutive samples inside the
tier, so an engine restart (counter reset) loses one interval, not the tier.
"""

from __future__ import annotations

import math

import pandas as pd

from grill_locust.telemetry.samples import KIND_ENGINE, KIND_GPU

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
)
MILLIJOULES_PER_JOULE = 1000.0


def _positive_delta_sum(values: pd.Series) -> float | None:
    values = values.dropna()
    if len(values) < 2:
        return None
    deltas = values.diff().dropna()
    return float(deltas[deltas > 0].sum())


def _energy_j(gpu_samples: pd.DataFrame) -> float | None:
    """Energy of all GPUs over the samples: counter deltas, or power integrated over time without it."""
    total_j = 0.0
    found = False
    for _gpu, one_gpu in gpu_samples.sort_values("wall_time").groupby(
        ["source", "host", "gpu_uuid"], dropna=False
    ):
        energy_mj = _positive_delta_sum(one_gpu["energy_mj"])
        if energy_mj is not None:
            total_j += energy_mj / MILLIJOULES_PER_JOULE
            found = True
            continue
        power = one_gpu[["wall_time", "power_w"]].dropna()
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


def _engine_figures(engine: pd.DataFrame) -> dict[str, float | None]:
    if engine.empty:
        return {"kv_cache_mean": None, "kv_cache_peak": None, "prefix_hit_rate": None, "waiting_mean": None}
    engine = engine.sort_values("wall_time")
    kv = engine["kv_cache_usage"].dropna()
    hit_rate: float | None = None
    hits, queries = [], []
    for _source, one in engine.groupby("source"):
        cached = _positive_delta_sum(one["cached_tokens_total"])
        queried = _positive_delta_sum(one["prefix_queries_total"])
        if cached is not None and queried is not None:
            hits.append(cached)
            queries.append(queried)
    if queries and sum(queries) > 0:
        hit_rate = min(1.0, sum(hits) / sum(queries))
    elif not queries:  # no counters (e.g. vLLM V0): mean of the per-scrape rates
        hit_rate = _mean(engine["prefix_cache_hit_rate"])
    return {
        "kv_cache_mean": float(kv.mean()) if len(kv) else None,
        "kv_cache_peak": float(kv.max()) if len(kv) else None,
        "prefix_hit_rate": hit_rate,
        "waiting_mean": _mean(engine["requests_waiting"]),
    }


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
        in_tier = telemetry[(telemetry["wall_time"] >= start) & (telemetry["wall_time"] <= end)]
        backend = str(getattr(phase, "backend", ""))
        engine = in_tier[(in_tier["kind"] == KIND_ENGINE) & (in_tier["backend"] == backend)]
        gpu = in_tier[(in_tier["kind"] == KIND_GPU) & in_tier["backend"].isin([backend, ""])]
        row: dict[str, object] = {"target": phase.target, "tier_index": int(phase.tier_index)}
        row.update(_gpu_figures(gpu))
        energy_j = _energy_j(gpu) if not gpu.empty else None
        tokens = _output_tokens(records_df, str(phase.target), int(phase.tier_index))
        row["energy_per_token_j"] = energy_j / tokens if energy_j is not None and tokens > 0 else None
        row.update(_engine_figures(engine))
        rows.append(row)
    return pd.DataFrame(rows, columns=list(TIER_TELEMETRY_COLUMNS))

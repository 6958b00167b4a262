"""The telemetry sample: one flat dict per engine scrape or per GPU reading, the rows of telemetry.parquet.

Every sample carries every column (None where it does not apply), so a list of samples becomes a
DataFrame with stable columns whatever mix of engines and exporters a run scraped.
"""

from __future__ import annotations

# One sample: a column's number, its label's text, or None where it does not apply.
Sample = dict[str, str | int | float | None]

KIND_ENGINE = "engine"
KIND_GPU = "gpu"

SAMPLE_LABEL_COLUMNS: tuple[str, ...] = (
    "wall_time",  # Unix time of the scrape (or of the NVML reading, for the exporter's own samples)
    "kind",  # "engine" | "gpu"
    "source",  # backend name (engine) or the exporter's host:port (gpu)
    "backend",  # backend this sample belongs to ("" for an exporter no backend lists)
    "host",  # machine: metrics URL host (engine), exporter's hostname label (gpu)
    "gpu_index",
    "gpu_uuid",
    "gpu_name",
)

ENGINE_COLUMNS: tuple[str, ...] = (
    "requests_running",
    "requests_waiting",
    "kv_cache_usage",  # fraction 0..1 of the KV cache in use
    "prefix_cache_hit_rate",  # 0..1, from counter deltas since the previous scrape of this backend
    "prompt_tokens_total",
    "cached_tokens_total",  # prompt tokens served from the prefix cache (counter)
    "prefix_queries_total",  # denominator of the hit rate (counter): tokens looked up in the cache
    "generation_tokens_total",
    "preemptions_total",
    "queue_seconds_total",  # seconds requests spent queued, summed over those that left the queue (counter)
    "queued_requests_total",  # requests that left the queue (counter)
    "aborted_requests_total",  # requests the engine aborted because their client went away (counter)
    "aborted_tokens_total",  # tokens generated for those requests (counter; the simulator's only)
)

GPU_COLUMNS: tuple[str, ...] = (
    "gpu_util_pct",
    "mem_used_bytes",
    "mem_total_bytes",
    "power_w",
    "energy_mj",  # energy since the driver loaded (NVML total energy consumption), millijoules
    "temperature_c",
    "sm_clock_mhz",
    "throttle_reasons",  # NVML clocks-event reasons bitmask
)

TELEMETRY_COLUMNS: tuple[str, ...] = SAMPLE_LABEL_COLUMNS + ENGINE_COLUMNS + GPU_COLUMNS


def empty_sample(kind: str, wall_time: float, source: str, backend: str, host: str) -> Sample:
    """A sample with every column present; the caller fills the numbers it has."""
    sample: Sample = dict.fromkeys(TELEMETRY_COLUMNS)
    sample.update(kind=kind, wall_time=wall_time, source=source, backend=backend, host=host)
    return sample

"""Telemetry: the NVML GPU exporter, engine /metrics scraping and per-tier telemetry figures.

Names are imported lazily, so the exporter runs on an engine machine with only nvidia-ml-py and
prometheus_client installed (no gevent, pandas or locust needed there).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "TelemetryScraper": "grill_locust.telemetry.scraper",
    "tier_telemetry": "grill_locust.telemetry.tiers",
    "TIER_TELEMETRY_COLUMNS": "grill_locust.telemetry.tiers",
    "TELEMETRY_COLUMNS": "grill_locust.samples",
    "EngineSampler": "grill_locust.telemetry.engine_metrics",
    "parse_gpu_text": "grill_locust.telemetry.gpu_metrics",
    "GpuExporter": "grill_locust.telemetry.exporter",
    "NvmlReader": "grill_locust.telemetry.nvml",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)

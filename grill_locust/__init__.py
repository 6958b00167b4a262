"""grill-locust: distributed load tests of LLM inference engines for coding assistants, built on Locust.

Public entry points (docs/ARCHITECTURE.md shows how the packages join):
- `load_scenario`, `Scenario` — scenario files (grill_locust.scenario)
- `RequestRecord`, `measure` — one row per request and the metric definitions (grill_locust.record)
- `EngineClient` — the streaming, per-event timed OpenAI client (grill_locust.client)
- `SimProcess` — the simulated engine in a subprocess (grill_locust.sim)
- `summarize_run`, `load_run` — tables of a results folder (grill_locust.report)
Names are imported on first use, so `import grill_locust` stays light (the simulated engine needs only
the standard library, an engine machine's GPU exporter only nvidia-ml-py and prometheus_client).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "load_scenario": "grill_locust.scenario",
    "Scenario": "grill_locust.scenario",
    "RequestRecord": "grill_locust.record",
    "measure": "grill_locust.record",
    "EngineClient": "grill_locust.client",
    "SimProcess": "grill_locust.sim",
    "summarize_run": "grill_locust.report",
    "load_run": "grill_locust.report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'grill_locust' has no attribute {name!r}")

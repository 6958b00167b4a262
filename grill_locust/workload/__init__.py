"""What is sent: the code corpus and the workload generators (see generators.py).

Imported lazily, so importing the package needs no pydantic."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grill_locust.workload.calibrate import TokenCounter, backend_token_counter
    from grill_locust.workload.generators import ConversationScript, Workload, build_workload

__all__ = ["ConversationScript", "TokenCounter", "Workload", "backend_token_counter", "build_workload"]

_HOMES = {
    "TokenCounter": "grill_locust.workload.calibrate",
    "backend_token_counter": "grill_locust.workload.calibrate",
    "ConversationScript": "grill_locust.workload.generators",
    "Workload": "grill_locust.workload.generators",
    "build_workload": "grill_locust.workload.generators",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)

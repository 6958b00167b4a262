"""Run a blocking call (NVML through ctypes, a blocking socket) without freezing gevent's hub.

When gevent has patched threading (Locust is imported), the call goes to gevent's pool of real OS
threads; otherwise there is no hub to protect and it runs in place.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def gevent_is_patched() -> bool:
    if "gevent.monkey" not in sys.modules:
        return False
    from gevent import monkey

    return bool(monkey.is_module_patched("threading"))


def call_off_hub(function: Callable[..., T], *args: object) -> T:
    if gevent_is_patched():
        import gevent

        return gevent.get_hub().threadpool.apply(function, args)  # type: ignore[no-any-return]
    return function(*args)

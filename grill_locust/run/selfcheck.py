"""The load generator's own health: event-loop lag (a probe greenlet) and CPU share of this process.

A worker whose gevent hub is late inflates every TTFT it measures long before Locust's 90 % CPU warning
fires; each record carries the worker's state when it ended, so the report can flag saturated tiers.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable

import gevent
import psutil

from grill_locust.record import SATURATION_CPU_PCT, SATURATION_LAG_P99_MS, percentile

PROBE_INTERVAL_S = 0.05  # how often the probe asks the hub to wake it
LAG_WINDOW = 40  # probes kept: the last ~2 s
CPU_SAMPLE_INTERVAL_S = 1.0


class SelfCheck:
    """`busy()` says whether a request is in flight (and the run is not stopping): a stall while no
    stream is open (Locust handling a spawn message between tiers, say) delays no measurement, so it
    is not counted as lag. A probe counts only if `busy()` held both when it went to sleep and when it
    woke: a stall that ends in Locust's own stop is the stop's."""

    def __init__(self, busy: Callable[[], bool] = lambda: True) -> None:
        self._busy = busy
        self._lags_ms: deque[float] = deque(maxlen=LAG_WINDOW)
        self._process = psutil.Process()
        self.cpu_pct: float | None = None
        self.lag_p99_ms: float | None = None
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        if self._greenlet is None:
            self._process.cpu_percent(None)  # first call primes the counter
            self._greenlet = gevent.spawn(self._probe)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _probe(self) -> None:
        last_cpu = time.monotonic()
        while True:
            # a jittered interval, so the probe cannot lock onto the phase of a periodic stall
            interval = PROBE_INTERVAL_S * random.uniform(0.5, 1.5)
            before = time.monotonic()
            measuring = self._busy()
            gevent.sleep(interval)
            now = time.monotonic()
            if measuring and self._busy():
                self._lags_ms.append(max(0.0, (now - before - interval) * 1000.0))
                self.lag_p99_ms = percentile(sorted(self._lags_ms), 99)
            if now - last_cpu >= CPU_SAMPLE_INTERVAL_S:
                self.cpu_pct = self._process.cpu_percent(None)
                last_cpu = now

    @property
    def saturated(self) -> bool:
        return (self.lag_p99_ms or 0.0) > SATURATION_LAG_P99_MS or (self.cpu_pct or 0.0) > SATURATION_CPU_PCT

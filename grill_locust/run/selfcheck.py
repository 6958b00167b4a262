"""The load generator's own health: how late it reads replies, its event-loop lag, and its CPU share.

A worker that reads a reply late can time its events late long before Locust's 90 % CPU warning fires;
each record carries the worker's state when it ended, so the report can flag saturated tiers.

Two lags, each a p99 over the current tier on this worker (`new_window` at each phase: a p99 over the
last few dozen samples would be their maximum, and one late wake-up in a minute would flag a tier):
- the read lag: how far the times of the tier's output events may be from their arrivals. Event
  times are the kernel's stamps (client/_arrival.py), so a read that comes late costs nothing while it
  holds one output event: its stamp is that event's. A read that holds several carries the last
  one's stamp for all (the kernel merges segments that wait in a socket), so each earlier one may be
  off by up to the time since the worker last looked at that socket. The p99 is the higher of two:
  over output events, and over requests' first output events alone (the one TTFT is timed by, a
  sixteenth of a 16-token stream's events: a p99 over events would not show them late). It judges a
  tier whose reads are all stamped.
- the event-loop lag: how late a probe greenlet wakes. It is how late a user's send after its think
  time goes out (the request's t0 is taken at the send, so no latency includes it), and it judges
  tiers whose reads have no stamp (TLS), where every read's lateness is in the timings.
With 200 users finishing in one engine step, their next sends take the hub in turn: the event-loop lag
then grows with the users (each send builds its request) while the read lag stays small, because each
user reads every ready stream when its stream ends and before it sends (client/_poller.py).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable

import gevent
import psutil

from grill_locust.client import _arrival
from grill_locust.record import percentile_ranks
from grill_locust.verdicts import saturation_causes, timing_lag_ms

PROBE_INTERVAL_S = 0.05  # how often the probe asks the hub to wake it
CPU_SAMPLE_INTERVAL_S = 1.0
LAG_PERCENTILE = 99


class LagHistogram:
    """Lags of one window in buckets 2 % wide (0.01 ms to ~76 s; later ones in the last bucket): memory
    and time per sample stay bounded however long the tier. `percentile_ms` interpolates between two
    ranks as every percentile does (record.percentile_ranks), each sample at its bucket's upper edge: at
    most 2 % above the exact value (of samples at least FIRST_EDGE_MS)."""

    FIRST_EDGE_MS = 0.01
    GROWTH = 1.02
    BUCKETS = 800

    def __init__(self) -> None:
        self.counts = [0] * (self.BUCKETS + 1)
        self.samples = 0
        self._top = 0  # the highest bucket used

    def add(self, lag_ms: float) -> None:
        self.add_many(lag_ms, 1)

    def add_many(self, lag_ms: float, count: int) -> None:
        if count <= 0:
            return
        if lag_ms <= self.FIRST_EDGE_MS:
            index = 0
        else:
            index = min(
                self.BUCKETS, math.ceil(math.log(lag_ms / self.FIRST_EDGE_MS) / math.log(self.GROWTH))
            )
        self.counts[index] += count
        self.samples += count
        self._top = max(self._top, index)

    def percentile_ms(self, q: float) -> float | None:
        """The q-th percentile (0..100) of the window's lags, None with none."""
        if not self.samples:
            return None
        low, high, weight = percentile_ranks(self.samples, q)
        return self._value_at_ms(low) * (1.0 - weight) + self._value_at_ms(high) * weight

    def _value_at_ms(self, rank: int) -> float:
        """The rank-th smallest lag (0-based) as its bucket's upper edge, looked for from the top (the
        percentiles asked for are high ones)."""
        above = self.samples - 1 - rank  # samples above it
        index = self._top
        seen = self.counts[index]
        while seen <= above:  # ends: the counts add up to `samples`, more than `above`
            index -= 1
            seen += self.counts[index]
        return self.FIRST_EDGE_MS * self.GROWTH**index


class SelfCheck:
    """`busy()` says whether a request is in flight (and the run is not stopping): a stall while no
    stream is open (Locust handling a spawn message between tiers, say) delays no measurement, so it
    is not counted as lag. A probe counts only if `busy()` held both when it went to sleep and when it
    woke, a read only if it holds when the read is made: a stall that ends in Locust's own stop is the
    stop's (its reads come once the worker says it is stopping)."""

    def __init__(self, busy: Callable[[], bool] = lambda: True) -> None:
        self._busy = busy
        self._lags = LagHistogram()
        self._read_lags = LagHistogram()  # per output event
        self._first_lags = LagHistogram()  # per request, its first output event
        self._unstamped_reads = 0
        self._process = psutil.Process()
        self.cpu_pct: float | None = None
        self.lag_p99_ms: float | None = None  # the event-loop lag p99
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        if self._greenlet is None:
            self._process.cpu_percent(None)  # first call primes the counter
            self._greenlet = gevent.spawn(self._probe)
            _arrival.read_lag_sink = self._on_read

    def new_window(self) -> None:
        """A new tier begins on this worker: its lags start from its own samples."""
        self._lags = LagHistogram()
        self._read_lags = LagHistogram()
        self._first_lags = LagHistogram()
        self._unstamped_reads = 0
        self.lag_p99_ms = None

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None
        if _arrival.read_lag_sink == self._on_read:
            _arrival.read_lag_sink = None

    def _on_read(self, error_s: float | None, outputs: int, first: bool) -> None:
        if not self._busy():  # the run is stopping: Locust's stop held the hub before it said so
            return
        if error_s is None:
            self._unstamped_reads += 1
            return
        error_ms = error_s * 1000.0
        if outputs:
            # all but the read's last output event may be off by `error_ms`; the last is its own stamp
            self._read_lags.add_many(error_ms, outputs - 1)
            self._read_lags.add_many(0.0, 1)
        if first:
            self._first_lags.add_many(error_ms, 1)

    @property
    def read_lag_p99_ms(self) -> float | None:
        """The read lag p99 of this tier (see the module's docstring), or None when some read had no
        stamp (or no output came yet)."""
        if self._unstamped_reads:
            return None
        lags = [self._read_lags.percentile_ms(LAG_PERCENTILE), self._first_lags.percentile_ms(LAG_PERCENTILE)]
        known = [lag for lag in lags if lag is not None]
        return max(known) if known else None

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
                self._lags.add(max(0.0, (now - before - interval) * 1000.0))
                self.lag_p99_ms = self._lags.percentile_ms(LAG_PERCENTILE)
            if now - last_cpu >= CPU_SAMPLE_INTERVAL_S:
                self.cpu_pct = self._process.cpu_percent(None)
                last_cpu = now

    @property
    def saturated(self) -> bool:
        """Whether this worker looks saturated now: its lags so far and its latest CPU reading, judged
        as a tier is (verdicts.saturation_causes); the tier's verdict reads its records' CPU instead."""
        lag = timing_lag_ms(self.lag_p99_ms, self.read_lag_p99_ms)
        return bool(saturation_causes(lag, self.cpu_pct or 0.0))

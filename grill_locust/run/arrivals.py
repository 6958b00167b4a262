"""Open-loop send schedules: when each send of a rate tier leaves, drawn from a seeded arrival process.

A schedule is an iterable of `Send(at_s, iteration)`: the send's time in seconds after the tier began,
and the iteration the workload plays for it (`Workload.script(..., iteration, ...)`). The dispatcher
(run/openloop.py) takes any such iterable: an arrival process's here, or a trace's own timestamps.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from grill_locust.workload.trace import TraceRow, trace_schedule

Arrival = Literal["poisson", "constant", "gamma"]


class Send(NamedTuple):
    at_s: float  # seconds after the tier's start
    iteration: int  # passed to Workload.script: which conversation this send plays


def arrival_gaps(arrival: Arrival, rate: float, burstiness: float = 1.0, seed: int = 0) -> Iterator[float]:
    """Inter-arrival gaps in seconds, without end. Poisson: exponential of mean 1/rate; constant: 1/rate;
    gamma: shape `burstiness`, scale 1/(rate * burstiness) (mean 1/rate, CV 1/sqrt(burstiness): below 1
    burstier than Poisson, as vllm bench's --burstiness)."""
    if rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    draw = random.Random(seed)
    while True:
        if arrival == "constant":
            yield 1.0 / rate
        elif arrival == "poisson":
            yield draw.expovariate(rate)
        else:
            yield draw.gammavariate(burstiness, 1.0 / (rate * burstiness))


def arrival_schedule(
    arrival: Arrival, rate: float, duration_s: float, burstiness: float = 1.0, seed: int = 0
) -> Iterator[Send]:
    """The sends of one tier of `duration_s` at `rate` per second: the first after one gap (a tier of a
    constant rate does not open with a send that every worker makes at once), the last before the end."""
    at_s = 0.0
    for iteration, gap_s in enumerate(arrival_gaps(arrival, rate, burstiness, seed)):
        at_s += gap_s
        if at_s >= duration_s:
            return
        yield Send(at_s, iteration)


@dataclass
class ScheduledSend:
    """One send of a rate tier while its conversation plays: the open-loop columns of its records. Every
    record carries the send's intended wall time; the first (the request the arrival sent) its lateness,
    the later turns of its session, sent closed-loop, none. A request that ends after the tier's sending
    time is cooldown."""

    scheduled_wall: float
    tier_end_wall: float
    first: bool = True

    def columns(self, wall_start: float) -> dict[str, Any]:
        lag_s = wall_start - self.scheduled_wall if self.first else None
        self.first = False
        return {
            "scheduled_wall": self.scheduled_wall,
            "schedule_lag_s": lag_s,
            "cooldown": time.time() > self.tier_end_wall,
        }


# kinds whose one iteration is a session of several requests: their rate counts sessions
SESSION_KINDS = frozenset({"multi-turn", "agentic", "autocomplete", "mix"})
# a rate tier whose sends went out later than this at p99 measured the load generator, not the engine
SCHEDULE_LAG_P99_LIMIT_S = 0.010


def rate_unit(kind: str) -> str:
    """What a rate tier of this kind (a record's `kind`, a mix's "mix") counts per second."""
    return "sessions/s" if kind in SESSION_KINDS else "req/s"


def trace_share(rows: tuple[TraceRow, ...], place: int, dispatchers: int) -> list[Send]:
    """The sends of a trace replay that dispatcher `place` of `dispatchers` makes: rows place,
    place + dispatchers, ... at their own times (the dispatchers' shares add up to the trace)."""
    return [Send(*send) for send in trace_schedule(rows)[place::dispatchers]]

"""Open-loop send schedules: when each send of a rate tier leaves, drawn from a seeded arrival process.

A schedule is an iterable of `Send(at_s, iteration)`: the send's time in seconds after the tier began,
and the iteration the workload plays for it (`Workload.script(..., iteration, ...)`). The dispatcher
(run/openloop.py) takes any such iterable: an arrival process's here, or a trace's own timestamps.

A tier's rate is split over its dispatchers (one per worker), and split again over the remaining ones
when a worker is lost mid-tier (`Split`s): each dispatcher's share is a pure function of the splits, so
every dispatcher, hearing of a re-split, computes the same division of the sends from then on.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator, Sequence
from typing import Literal, NamedTuple

from grill_locust.workload.trace import TraceRow, trace_schedule

Arrival = Literal["poisson", "constant", "gamma"]
# (seconds after the tier's start from which it holds, the dispatchers that split the tier's rate from
# then): a tier's first split is at 0; the master adds one each time it loses a dispatcher mid-tier
Split = tuple[float, tuple[str, ...]]


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


def arrival_share(
    arrival: Arrival,
    rate: float,
    duration_s: float,
    burstiness: float,
    seed_key: str,
    dispatcher: str,
    splits: Sequence[Split],
) -> Iterator[Send]:
    """The sends of a rate tier that `dispatcher` makes: in each split it is part of, its even share of
    the rate (the dispatchers' sum is the tier's), drawn anew from the split's time with a seed of its
    own (`seed_key`, its place, the split's index), the first send one gap after it, numbered on from
    the sends before. Poisson arrivals stay exact across a re-split (they have no memory); constant and
    gamma ones restart their gaps there. A dispatcher left out of a split sends nothing from its time."""
    iteration = 0
    for index, (from_s, dispatchers) in enumerate(splits):
        if dispatcher not in dispatchers:
            return
        until_s = min(duration_s, splits[index + 1][0]) if index + 1 < len(splits) else duration_s
        if until_s <= from_s:
            continue
        place = dispatchers.index(dispatcher)
        seed = zlib.crc32(f"{seed_key}/{place}{f'/{index}' if index else ''}".encode())
        share = rate / len(dispatchers)
        for send in arrival_schedule(arrival, share, until_s - from_s, burstiness, seed):
            yield Send(from_s + send.at_s, iteration)
            iteration += 1


def trace_share(rows: tuple[TraceRow, ...], dispatcher: str, splits: Sequence[Split]) -> list[Send]:
    """The sends of a trace replay that `dispatcher` makes, at the rows' own times: row i goes to the
    (i mod n)-th of the first split's n dispatchers (their shares add up to the trace); at each re-split,
    the rows from its time on whose dispatcher is not in it are dealt in turn to the ones that are."""
    first = splits[0][1]
    owners = [first[i % len(first)] for i in range(len(rows))]
    for from_s, dispatchers in splits[1:]:
        dealt = 0
        for i, row in enumerate(rows):
            if row.at_s >= from_s and owners[i] not in dispatchers:
                owners[i] = dispatchers[dealt % len(dispatchers)]
                dealt += 1
    return [
        Send(*send) for send, owner in zip(trace_schedule(rows), owners, strict=True) if owner == dispatcher
    ]

"""A rate tier re-split over the remaining dispatchers when a worker is lost mid-tier: each dispatcher's
sends as a pure function of the splits (run/arrivals.py), and the splits on the wire (run/phase.py)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import msgpack

from grill_locust.run.arrivals import Arrival, Send, Split, arrival_share, trace_share
from grill_locust.run.phase import Phase
from grill_locust.workload.trace import read_trace

TRACE = Path(__file__).parent / "traces" / "mooncake_40.jsonl"
A, B, C, D = "worker-a", "worker-b", "worker-c", "worker-d"


def share(
    arrival: Arrival, dispatcher: str, splits: list[Split], rate: float = 20.0, duration_s: float = 1000.0
) -> list[Send]:
    return list(arrival_share(arrival, rate, duration_s, 1.0, "t/0/0", dispatcher, splits))


def test_a_poisson_tier_keeps_its_rate_after_a_dispatcher_is_lost() -> None:
    rate, duration_s, cut_s = 20.0, 1000.0, 200.0
    before = share("poisson", A, [(0.0, (A, B))], rate, duration_s)
    after = share("poisson", A, [(0.0, (A, B)), (cut_s, (A,))], rate, duration_s)
    # until the re-split, the same sends: a dispatcher that hears of it in time has made none differently
    assert [s for s in after if s.at_s < cut_s] == [s for s in before if s.at_s < cut_s]
    taken_up = [s.at_s for s in after if s.at_s >= cut_s]
    expected = rate * (duration_s - cut_s)  # the whole rate, not its half
    assert abs(len(taken_up) - expected) < 4 * math.sqrt(expected), (len(taken_up), expected)
    gaps = [b - a for a, b in zip(taken_up, taken_up[1:], strict=False)]
    assert abs(statistics.pstdev(gaps) / statistics.fmean(gaps) - 1.0) < 0.05  # still Poisson
    assert len({s.iteration for s in after}) == len(after)  # each send its own conversation
    # the lost dispatcher, were it only cut off, sends nothing from the re-split on
    assert all(s.at_s < cut_s for s in share("poisson", B, [(0.0, (A, B)), (cut_s, (A,))], rate, duration_s))


def test_constant_arrivals_are_redrawn_at_the_new_share_from_the_resplit() -> None:
    splits: list[Split] = [(0.0, (A, B, C, D)), (3.0, (A, C))]
    sends = {d: share("constant", d, splits, rate=16.0, duration_s=9.0) for d in (A, B, C, D)}
    for dispatcher in (A, C):
        times = [s.at_s for s in sends[dispatcher]]
        assert times[:2] == [0.25, 0.5] and max(t for t in times if t < 3.0) == 2.75  # 4/s of 16/s
        # from the re-split, 8/s: the first one gap after it, the last before the tier's end
        later = [t for t in times if t >= 3.0]
        assert later[0] == 3.125 and later[-1] == 8.875 and len(later) == 47
        assert max(abs(b - a - 0.125) for a, b in zip(later, later[1:], strict=False)) < 1e-9
    assert max(s.at_s for d in (B, D) for s in sends[d]) < 3.0


def test_a_lost_dispatchers_trace_rows_from_the_resplit_are_dealt_to_the_others() -> None:
    rows = read_trace(str(TRACE), "mooncake")
    cut_s = rows[len(rows) // 2].at_s
    splits: list[Split] = [(0.0, (A, B, C)), (cut_s, (A, C))]
    shares = {d: trace_share(rows, d, splits) for d in (A, B, C)}
    # every row once: the lost one's before the cut, the others' own, its later rows dealt in turn
    sent = sorted(s.iteration for share in shares.values() for s in share)
    assert sent == list(range(len(rows)))
    assert all(rows[s.iteration].at_s < cut_s for s in shares[B])
    dealt = [
        sum(1 for s in shares[d] if s.iteration % 3 == 1 and rows[s.iteration].at_s >= cut_s) for d in (A, C)
    ]
    assert sum(dealt) > 0 and abs(dealt[0] - dealt[1]) <= 1
    assert [(s.at_s, s.iteration) for s in shares[A]] == sorted((s.at_s, s.iteration) for s in shares[A])


def test_a_resplit_travels_with_the_phase() -> None:
    phase = Phase(
        phase_id=0,
        run_id="r",
        target="t",
        tier_index=0,
        tier_users=0,
        iterations_per_user=0,
        think_time_s=0.0,
        tier_rate=4.0,
        dispatchers=(A, B),
        duration_s=10.0,
        resplits=((4.5, (A,)),),
    )
    assert phase.splits == ((0.0, (A, B)), (4.5, (A,)))
    # as Locust's messages carry it (msgpack: tuples arrive as lists)
    assert Phase.from_wire(msgpack.unpackb(msgpack.packb(phase.to_wire()))) == phase

"""Capacity search: the largest load meeting the SLO, by probing one load after another (no I/O here).

A search probes the bracket's low end first: if it fails, nothing in the bracket meets the SLO and the
search ends. Otherwise the load doubles (capped at the bracket's high end) until a probe fails or the
high end passes, so that no probe lands far above the knee (a probe far past it queues requests the
engine still works on when the next probe starts); then it bisects between the largest passing and
the smallest failing load: whole users at their midpoint, rates at their geometric midpoint (a rate
knee is as likely at 1.1 as at 110 requests/s). It stops when the two are within the precision: users
apart for users, a relative width (smallest failing / largest passing - 1) for rates.

The bisection assumes the verdict is monotone in the load; a probe that breaks that (a pass above a
failure, from noise) is recorded as measured and the bracket keeps the largest pass below the smallest
failure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from grill_locust.config import Search
from grill_locust.errors import GrillError
from grill_locust.run.phase import replays_trace
from grill_locust.scenario import Target

GROWTH_FACTOR = 2.0


@dataclass(frozen=True)
class Probe:
    """One probe's load and verdict; `binding_metric` (and, in a mix, `binding_persona`): the first
    bound it missed ("" when it met the SLO)."""

    load: float
    passed: bool
    binding_metric: str = ""
    binding_persona: str = ""


@dataclass
class Bisection:
    """The search on one target: which load to probe next, from the verdicts so far."""

    by: str  # "users" or "rate"
    low: float
    high: float
    precision: float  # users apart (users) or a relative width (rate)
    probes: list[Probe] = field(default_factory=list)

    @classmethod
    def of(cls, search: Search) -> Bisection:
        low, high = search.bracket
        return cls(search.by, low, high, search.stop_precision)

    @property
    def largest_passing(self) -> float | None:
        """The largest load that met the SLO below every failing one (None: none did)."""
        failing = self.smallest_failing
        passed = [p.load for p in self.probes if p.passed and (failing is None or p.load < failing)]
        return max(passed, default=None)

    @property
    def smallest_failing(self) -> float | None:
        return min((p.load for p in self.probes if not p.passed), default=None)

    def record(self, probe: Probe) -> None:
        self.probes.append(probe)

    def next_load(self) -> float | None:
        """The load to probe next, or None when the search is over."""
        if not self.probes:
            return self._round(self.low)
        passing, failing = self.largest_passing, self.smallest_failing
        if passing is None:
            return None  # the low end failed: nothing in the bracket meets the SLO
        if failing is None:
            if passing >= self.high:
                return None  # the high end met it
            return self._round(min(self.high, passing * GROWTH_FACTOR))
        if self._within_precision(passing, failing):
            return None
        if self.by == "users":
            return float((int(passing) + int(failing)) // 2)
        return math.sqrt(passing * failing)

    def _within_precision(self, passing: float, failing: float) -> bool:
        if self.by == "users":
            return failing - passing <= self.precision
        return failing / passing - 1.0 <= self.precision + 1e-12

    def _round(self, load: float) -> float:
        return float(math.floor(load)) if self.by == "users" else load

    def _shown(self, load: float | None) -> float | int | None:
        """Users as whole numbers, rates as they are."""
        return int(load) if load is not None and self.by == "users" else load

    def as_json(self, target: str) -> dict[str, Any]:
        """What run.json keeps of this search: the bracket found and every probe in order."""
        return {
            "target": target,
            "largest_passing": self._shown(self.largest_passing),
            "smallest_failing": self._shown(self.smallest_failing),
            "done": self.next_load() is None,
            "probes": [
                {
                    "tier_index": index,
                    self.by: self._shown(probe.load),
                    "passed": probe.passed,
                    "binding_metric": probe.binding_metric,
                    "binding_persona": probe.binding_persona,
                }
                for index, probe in enumerate(self.probes)
            ],
        }


def probes_at_most(search: Search) -> int:
    """The most probes a search of one target can take: the low end, the doublings to the high end, and
    the bisection of the last doubling's interval down to the precision."""
    low, high = search.bracket
    doublings = math.ceil(math.log2(high / low))
    if search.by == "users":
        bisections = math.ceil(math.log2(max(1.0, (high / 2) / search.stop_precision)))
    else:
        bisections = math.ceil(math.log2(max(1.0, math.log(2) / math.log1p(search.stop_precision))))
    return 1 + doublings + bisections


def check_search_runnable(
    search: Search | None, resuming: bool, targets: Sequence[Target] = (), repeats: int | None = None
) -> None:
    """A search this version cannot run (resumed, repeated, or of a trace target among `targets`, the
    scenario's): GrillError (exit 2) before anything starts."""
    if search is None:
        return
    if repeats is not None and repeats > 1:
        raise GrillError(
            "--repeat: a capacity search (load.search) runs once: its probes follow its own verdicts; "
            "repeat a campaign of tiers instead"
        )
    if resuming:
        raise GrillError(
            "--resume: a capacity search (load.search) cannot be resumed: each probe depends on the verdicts "
            "before it; run the search anew"
        )
    traces = [target.name for target in targets if replays_trace(target)]
    if traces:
        raise GrillError(
            f"load.search: target {traces[0]!r} replays a trace, which runs at its own times: a capacity "
            "search cannot vary its load; search in a scenario without it"
        )

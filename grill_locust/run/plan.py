"""A campaign's plan: which tier runs next, from how the last one ended (no I/O here).

The planner is a generator, as GuideLLM's profiles are: it yields the next step, a tier to run or a hold
for the engine, and receives how the tier ended (`outcome = yield tier`; a hold is answered with None
once the engine answers). The ladder (targets x tiers x `--repeat`, run/phase.py `campaign_tiers`), the
re-run after an outage (hold, then the tier once more), the skipping of a target whose engine refused a
tier, and the capacity search (run/search.py `Bisection`) live here; no list of phases is edited.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from grill_locust.config import Search
from grill_locust.run.phase import Phase, Tier, campaign_tiers, probe_tier
from grill_locust.run.search import Bisection, Probe
from grill_locust.scenario import Scenario
from grill_locust.workload.kinds import rate_unit


@dataclass(frozen=True)
class Outcome:
    """How a tier ended, as far as what follows it depends on it."""

    outage: bool = False  # it measured an engine outage (its requests could not be served)
    refused: bool = False  # the engine refused its requests as sent: its target's other tiers would be too
    stopped: bool = False  # the run stops (Locust's stop, a worker's refusal, a full disk): nothing follows
    # a probe's verdict by the SLO, judged when the search takes it (None: not judged)
    verdict: Callable[[], Probe] | None = None


@dataclass(frozen=True)
class Hold:
    """Hold at 0 users until the backend of `after` (the tier that measured an outage) answers; `then`
    runs next (the planner yields it once the hold is answered)."""

    after: Tier
    then: Tier


Step = Tier | Hold
# phase_id, target, tier_index, load -> a search's probe
ProbeMaker = Callable[[int, str, int, float], Tier]


@dataclass
class Plan:
    """The campaign's plan: its ladder (or its search), what it has run, and the generator `steps`."""

    ladder: tuple[Tier, ...]
    tier_count: int  # the campaign's tiers, those a resumption skips included (a search: probes planned)
    repeats: int = 1
    engine_wait_s: float = 0.0  # 0: an outage is neither held for nor run again
    # a capacity search's bisection per target, in scenario order, and how its probes are made
    searches: dict[str, Bisection] = field(default_factory=dict)
    probe: ProbeMaker | None = None
    refused: set[str] = field(default_factory=set)  # targets whose engine refused a tier
    _position: int = 0  # the ladder's next tier
    _yielded: int = 0  # tiers yielded so far (re-runs included): a probe's phase_id
    _hold_after: Tier | None = None  # a tier that measured an outage: the next tier waits for its engine

    @classmethod
    def of(
        cls,
        scenario: Scenario,
        run_id: str,
        session: str,
        repeats: int = 1,
        skip: set[tuple[str, int, int]] | None = None,
    ) -> Plan:
        """The plan of a scenario's campaign; `skip`: (target, tier_index, repeat) a resumption leaves out."""
        planned = campaign_tiers(scenario, run_id, session, repeats)
        ladder = tuple(
            t for t in planned if (t.phase.target, t.phase.tier_index, t.phase.repeat) not in (skip or set())
        )
        search = scenario.load.search
        if search is None:
            return cls(ladder, len(planned), repeats, scenario.load.engine_wait_s)
        targets = {t.name: t for t in scenario.targets}

        def probe(phase_id: int, target: str, tier_index: int, load: float) -> Tier:
            return probe_tier(scenario, run_id, session, phase_id, targets[target], tier_index, load)

        searches = {name: Bisection.of(search) for name in targets}
        return cls(ladder, 0, repeats, scenario.load.engine_wait_s, searches, probe)

    def steps(self) -> Generator[Step, Outcome | None, None]:
        """The planner: each tier to run (sent its Outcome once it ended), each hold (sent None)."""
        return self._search() if self.searches else self._ladder()

    def _ladder(self) -> Generator[Step, Outcome | None, None]:
        while self._position < len(self.ladder):
            tier = self.ladder[self._position]
            self._position += 1
            if tier.phase.target in self.refused:
                continue
            outcome = yield from self._run(tier)
            if outcome.stopped:
                return

    def _search(self) -> Generator[Step, Outcome | None, None]:
        """Each target's probes in turn, each load picked from the verdicts before it."""
        assert self.probe is not None
        for target, bisection in self.searches.items():
            load = bisection.next_load()
            while load is not None:
                self.tier_count += 1
                outcome = yield from self._run(self.probe(self._yielded, target, len(bisection.probes), load))
                if outcome.verdict is not None and not outcome.refused:
                    bisection.record(outcome.verdict())
                if outcome.stopped:
                    return
                if outcome.refused:  # a refused probe measured nothing: its target's search ends there
                    break
                load = bisection.next_load()

    def _run(self, tier: Tier) -> Generator[Step, Outcome | None, Outcome]:
        """Run `tier` (after a hold, when the tier before measured an outage). A tier that measures an
        outage runs once more after its hold (a re-run is not run again)."""
        if self._hold_after is not None:
            hold, self._hold_after = Hold(self._hold_after, tier), None
            yield hold
        self._yielded += 1
        outcome = yield tier
        assert outcome is not None, "a tier's step is answered with its Outcome"
        if outcome.refused:
            self.refused.add(tier.phase.target)
        elif outcome.outage and self.engine_wait_s > 0 and not outcome.stopped:
            self._hold_after = tier
            if tier.phase.attempt == 0:
                return (yield from self._run(tier.again()))
        return outcome

    def ahead(self) -> list[Tier]:
        """The ladder's tiers not yet run, but a refused target's (a search plans none ahead)."""
        return [t for t in self.ladder[self._position :] if t.phase.target not in self.refused]

    def label(self, phase: Phase) -> str:
        """`3/8` (the tier's place in the whole campaign), `3/8, attempt 2` for a tier run again; a
        search's probes are not known ahead: `3/?`."""
        label = f"{phase.phase_id + 1}/{'?' if self.searches else self.tier_count}"
        if self.repeats > 1:
            label += f", repeat {phase.repeat + 1}/{self.repeats}"
        return f"{label}, attempt {phase.attempt + 1}" if phase.attempt else label


def search_summary(search: Search, plan: Plan, kinds: Mapping[str, str]) -> dict[str, Any]:
    """run.json's `search`: what was searched, and per target the bracket found and every probe (`kinds`:
    each target's kind label, whose rate unit a search by rate counts)."""
    return {
        "by": search.by,
        "bracket": search.users if search.users is not None else search.rate,
        "probe_s": search.probe_s,
        "precision": search.stop_precision,
        "targets": [
            {
                **bisection.as_json(target),
                "unit": "users" if search.by == "users" else rate_unit(kinds[target]),
            }
            for target, bisection in plan.searches.items()
        ],
    }

"""A Phase: one target at one tier of concurrent users (or at one open-loop rate, or through one replay of
its trace), the unit the load shape walks through."""

from __future__ import annotations

import heapq
from dataclasses import asdict, dataclass, field
from typing import Any

from grill_locust.run.arrivals import Split
from grill_locust.scenario import Scenario, Target
from grill_locust.workload.trace import TraceRow, conversation_trace


@dataclass
class DeveloperSeats:
    """The developer indices of one tier's users: each user holds one from its first claim until it
    stops, a new user takes the lowest free one, so a tier of N users numbers them 0..N-1 whatever
    the workers they run on. Holders are (Locust client id, user key)."""

    held: dict[tuple[str, str], int] = field(default_factory=dict)
    _free: list[int] = field(default_factory=list)  # a heap of released indices
    _next: int = 0

    def claim(self, holder: tuple[str, str]) -> int:
        if holder not in self.held:
            if self._free:
                self.held[holder] = heapq.heappop(self._free)
            else:
                self.held[holder], self._next = self._next, self._next + 1
        return self.held[holder]

    def release(self, holder: tuple[str, str]) -> None:
        index = self.held.pop(holder, None)
        if index is not None:
            heapq.heappush(self._free, index)

    def release_client(self, client_id: str) -> None:
        """Free the indices of a worker that is gone: the users Locust starts elsewhere take them."""
        for holder in [h for h in self.held if h[0] == client_id]:
            self.release(holder)


@dataclass(frozen=True, slots=True)
class Phase:
    phase_id: int  # position in the campaign, 0-based
    run_id: str
    target: str
    tier_index: int
    tier_users: int
    iterations_per_user: int
    think_time_s: float
    session: str = ""  # the campaign's session (`<run_id>.<n>`): resumed runs tell theirs apart
    attempt: int = 0  # 1 when the tier runs again after an engine outage
    tier_rate: float | None = None  # an open-loop tier's rate (tier_users is then 0)
    # an open-loop tier's dispatchers: the Locust client ids of the workers that split its rate, set by
    # the master as the tier starts (a local run's one is "local")
    dispatchers: tuple[str, ...] = ()
    # a tier that sends for this long: a rate tier's dispatchers send until then (the sends still playing
    # finish after), a search probe's users loop conversations until then (it ends complete)
    duration_s: float | None = None
    repeat: int = 0  # which of `--repeat N` walks of the campaign's tiers (0-based)
    # an open-loop tier's re-splits, one each time the master lost a dispatcher mid-tier: the remaining
    # dispatchers take up its share from then on (run/arrivals.py, `Split`)
    resplits: tuple[Split, ...] = ()

    @property
    def key(self) -> str:
        """This phase, in this session and attempt: what workers count its iterations under."""
        return f"{self.session}/{self.phase_id}/{self.attempt}"

    @property
    def prompt_key(self) -> str:
        """What this phase's prompts are keyed by (with a user's own key, except in a trace replay, whose
        rows share blocks across workers): no other phase, attempt or session sends the same text."""
        return f"{self.session}-p{self.phase_id}a{self.attempt}"

    @property
    def iterations_target(self) -> int:
        """The iterations that end the tier; 0 for a tier that ends by time."""
        return self.tier_users * self.iterations_per_user if self.duration_s is None else 0

    def user_done(self, iterations_done: int) -> bool:
        """Whether a user that ran `iterations_done` conversations in this phase has no more to run."""
        return self.duration_s is None and iterations_done >= self.iterations_per_user

    @property
    def splits(self) -> tuple[Split, ...]:
        """How an open-loop tier's sends are split over its dispatchers: at its start, then at each re-split."""
        return ((0.0, self.dispatchers), *self.resplits)

    @property
    def users(self) -> int:
        """The Locust users this phase runs: its developers, or one dispatcher per worker of a rate tier.
        A lost worker's stays counted: a changed count would send the other workers a spawn message
        mid-tier, which stalls a worker for a few hundred ms (late sends); a user Locust puts on a worker
        that has its dispatcher idles (WorkerState.dispatched_phase_key)."""
        return self.tier_users if self.tier_rate is None else len(self.dispatchers)

    def labels(self, target: Target) -> dict[str, Any]:
        """The labels every record and tier row of this phase carries: LABEL_COLUMNS, the tier, its
        session and attempt. A mix target's phase is labelled with its whole mix; a developer's
        target (Target.for_developer), with the conversation it sends."""
        return {
            "run_id": self.run_id,
            "target": target.name,
            "backend": target.backend.name,
            "engine": target.backend.engine,
            "model": target.model.name,
            "conversation": target.conversation_label,
            "kind": target.kind_label,
            "tier_index": self.tier_index,
            "tier_users": self.tier_users,
            "tier_rate": self.tier_rate,
            "session": self.session,
            "attempt": self.attempt,
            "repeat": self.repeat,
        }

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Phase:
        resplits = tuple((from_s, tuple(ids)) for from_s, ids in data.get("resplits") or ())
        return cls(**{**data, "dispatchers": tuple(data.get("dispatchers") or ()), "resplits": resplits})


def campaign_phases(scenario: Scenario, run_id: str, session: str = "", repeats: int = 1) -> list[Phase]:
    """Targets in scenario order, each through every tier (of users, or of rates in an open-loop load),
    a trace target through one replay of its trace (whatever the load's tiers), all of it `repeats`
    times (`--repeat`); a search's first probe (the search picks each next one from the verdicts). Each
    phase has its own phase_id, which users' prompt keys carry: a repeat sends new prompts."""
    load = scenario.load
    if load.search is not None:
        first = scenario.targets[0].name
        return [probe_phase(scenario, run_id, session, 0, first, 0, load.search.bracket[0])]
    phases: list[Phase] = []
    tiers: list[tuple[int, float | None]] = (
        [(0, rate) for rate in load.rates]
        if load.rates is not None
        else [(users, None) for users in load.tiers]
    )
    for repeat in range(repeats):
        for target in scenario.targets:
            if replays_trace(target):
                phases.append(trace_phase(scenario, target, run_id, session, len(phases), repeat))
                continue
            for tier_index, (users, rate) in enumerate(tiers):
                phases.append(
                    Phase(
                        phase_id=len(phases),
                        run_id=run_id,
                        target=target.name,
                        tier_index=tier_index,
                        tier_users=users,
                        iterations_per_user=load.iterations if rate is None else 0,
                        think_time_s=load.think_time_s,
                        session=session,
                        tier_rate=rate,
                        duration_s=None if rate is None else load.duration_s,
                        repeat=repeat,
                    )
                )
    return phases


def replays_trace(target: Target) -> bool:
    """Whether the target replays a trace: once, at the trace's own times, not through the load's tiers."""
    return not target.mix and target.conversation.workload_kind.replays_at_own_times


def trace_rate(rows: tuple[TraceRow, ...]) -> float:
    """A trace replay's mean rate (requests/s): its rows over its span from the first send to the last; a
    replay whose rows all leave at once, its rows (as if over one second). It labels the replay's tier."""
    span_s = rows[-1].at_s
    return len(rows) / span_s if span_s > 0 else float(len(rows))


def trace_phase(
    scenario: Scenario, target: Target, run_id: str, session: str, phase_id: int, repeat: int = 0
) -> Phase:
    """The one tier of a trace target: an open-loop tier whose sends are the trace's rows (row i sent by
    dispatcher i mod the dispatchers, at its own time), labelled by the trace's mean rate; it sends until
    its last row's time, and the requests still running then finish as cooldown."""
    rows = conversation_trace(target.conversation)
    return Phase(
        phase_id=phase_id,
        run_id=run_id,
        target=target.name,
        tier_index=0,
        tier_users=0,
        iterations_per_user=0,
        think_time_s=scenario.load.think_time_s,
        session=session,
        tier_rate=trace_rate(rows),
        duration_s=rows[-1].at_s,
        repeat=repeat,
    )


def probe_phase(
    scenario: Scenario, run_id: str, session: str, phase_id: int, target: str, tier_index: int, load: float
) -> Phase:
    """A capacity search's probe of `load` (users, or requests/s): a tier of load.search.probe_s."""
    search = scenario.load.search
    assert search is not None
    by_users = search.by == "users"
    return Phase(
        phase_id=phase_id,
        run_id=run_id,
        target=target,
        tier_index=tier_index,
        tier_users=int(load) if by_users else 0,
        iterations_per_user=0,
        think_time_s=scenario.load.think_time_s,
        session=session,
        tier_rate=None if by_users else load,
        duration_s=search.probe_s,
    )

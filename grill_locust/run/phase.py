"""A Phase: one target at one tier of concurrent users (or at one open-loop rate, or through one replay of
its trace), the unit the load shape walks through; and the tier variants the master runs it as.

`Phase` is what the workers hear (its wire form); a `Tier` wraps it with what only the master needs, and
each variant (`UsersTier`, `UsersProbe`, `RateTier`, `RateProbe`, `TraceTier`) says how many users it
runs, how it reads in the log, how long it may run and when it is done.
"""

from __future__ import annotations

import abc
import dataclasses
import heapq
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from grill_locust.record import TierLabels
from grill_locust.run.arrivals import Split
from grill_locust.scenario import Scenario, Target
from grill_locust.verdicts import SCHEDULE_LAG_P99_LIMIT_S, behind_schedule, schedule_lag_p99_s
from grill_locust.workload.kinds import rate_unit
from grill_locust.workload.trace import TraceRow, conversation_trace

if TYPE_CHECKING:
    from grill_locust.run.progress import PhaseProgress

log = logging.getLogger("grill")

# Without a scenario spawn_rate a tier's users start within about a second (Locust warns above 100/s).
MAX_DEFAULT_SPAWN_RATE = 100.0
DISPATCHERS_SPAWN_RATE = 100.0  # a rate tier's dispatchers, one per worker, start at once
# A rate tier re-split over the remaining workers (a worker lost) holds from this long after the master
# decides it: time for every dispatcher to hear of it (openloop.RESPLIT_POLL_S), so none sends late for it.
RESPLIT_LEAD_S = 0.5


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

    def labels(self, target: Target) -> TierLabels:
        """The labels every record and tier row of this phase carries. A mix target's phase is labelled
        with its whole mix; a developer's target (Target.for_developer), with the conversation it sends."""
        return TierLabels(
            run_id=self.run_id,
            target=target.name,
            backend=target.backend.name,
            engine=target.backend.engine,
            model=target.model.name,
            conversation=target.conversation_label,
            kind=target.kind_label,
            tier_index=self.tier_index,
            tier_users=self.tier_users,
            tier_rate=self.tier_rate,
            session=self.session,
            attempt=self.attempt,
            repeat=self.repeat,
        )

    def to_wire(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Phase:
        resplits = tuple((from_s, tuple(ids)) for from_s, ids in data.get("resplits") or ())
        return cls(**{**data, "dispatchers": tuple(data.get("dispatchers") or ()), "resplits": resplits})


class LostWorkers(Protocol):
    """What a tier asks of the master when workers are lost mid-tier (the campaign's `WorkerWatch`)."""

    gone: set[str]  # Locust client ids of the workers lost during the run

    def name(self, client_id: str) -> str: ...

    def users_seen(self, client_id: str) -> int: ...

    def label(self, phase: Phase) -> str: ...

    def respawn(self, tier: Tier) -> None:
        """Ask the runner for the tier's users again (spread over the workers left)."""

    def broadcast(self) -> None:
        """Tell every worker the current phase (it changed)."""


@dataclass(frozen=True)
class Tier(abc.ABC):
    """One tier as the master runs it: its `phase` (what the workers hear) and how long it may run."""

    phase: Phase
    time_cap_s: float
    # its Locust users are dispatchers of a rate (run/openloop.py), not developers (run/user.py)
    open_loop: ClassVar[bool] = False
    # a search's probe: once its last records are in, the SLO judges it and the search picks the next
    judged: ClassVar[bool] = False

    @property
    @abc.abstractmethod
    def users(self) -> int:
        """The Locust users it runs."""

    @property
    @abc.abstractmethod
    def spawn_rate(self) -> float: ...

    @property
    @abc.abstractmethod
    def load(self) -> float:
        """What a search measures it by: users, or the rate."""

    @property
    @abc.abstractmethod
    def load_label(self) -> str:
        """`10 users`, `5 req/s`..."""

    @abc.abstractmethod
    def iterations_target(self, progress: PhaseProgress) -> int:
        """The iterations that end it (0 for a tier of users that ends by time)."""

    @abc.abstractmethod
    def done(self, progress: PhaseProgress, now: float, gone: set[str]) -> bool:
        """Whether it ended complete (`now` monotonic; `gone`: the workers lost)."""

    @abc.abstractmethod
    def start_text(self) -> str: ...

    @abc.abstractmethod
    def progress_text(self, progress: PhaseProgress, elapsed_s: float) -> str:
        """What the progress line says of it after its target and load."""

    @abc.abstractmethod
    def row(self, progress: PhaseProgress) -> dict[str, Any]:
        """Its own columns of phases.csv."""

    @abc.abstractmethod
    def workers_lost(self, progress: PhaseProgress, lost: Sequence[str], workers: LostWorkers) -> None:
        """Count what the workers lost mid-tier took, and take up their part."""

    def flags(self, progress: PhaseProgress) -> str:
        """What its note and the log flag of how it was sent ("" when nothing)."""
        return ""

    def started(self, dispatchers: tuple[str, ...]) -> Tier:
        """As it starts with these workers connected."""
        return self

    def again(self) -> Tier:
        """The tier run once more (after an engine outage): a phase of its own, attempt 1."""
        return dataclasses.replace(
            self, phase=dataclasses.replace(self.phase, attempt=self.phase.attempt + 1)
        )


@dataclass(frozen=True)
class UsersTier(Tier):
    """N developers, each running k conversations: done once N x k iterations are received."""

    users_spawn_rate: float = 1.0

    @property
    def users(self) -> int:
        return self.phase.tier_users

    @property
    def spawn_rate(self) -> float:
        return self.users_spawn_rate

    @property
    def load(self) -> float:
        return float(self.phase.tier_users)

    @property
    def load_label(self) -> str:
        return f"{self.phase.tier_users} users"

    def iterations_target(self, progress: PhaseProgress) -> int:
        return self.phase.iterations_target

    def done(self, progress: PhaseProgress, now: float, gone: set[str]) -> bool:
        return progress.iterations_done >= self.iterations_target(progress)

    def start_text(self) -> str:
        phase = self.phase
        return f"{phase.target} at {phase.tier_users} users, {phase.iterations_target} iterations to do"

    def progress_text(self, progress: PhaseProgress, elapsed_s: float) -> str:
        rate = progress.iterations_done / elapsed_s if elapsed_s > 0 else 0.0
        target = self.iterations_target(progress)
        remaining = target - progress.iterations_done
        eta = f"{remaining / rate:.0f} s" if rate > 0 else "?"
        line = f"{progress.iterations_done}/{target} iterations, {progress.errors} errors, ETA {eta}"
        return f"{line} | {progress.saturation}" if progress.saturation else line

    def row(self, progress: PhaseProgress) -> dict[str, Any]:
        return {"max_in_flight": "", "waited_for_max_in_flight": ""}

    def workers_lost(self, progress: PhaseProgress, lost: Sequence[str], workers: LostWorkers) -> None:
        """Each lost worker's iterations not done are lost; its users are spread over the others."""
        phase = self.phase
        for client_id in lost:
            quota = workers.users_seen(client_id) * phase.iterations_per_user
            lost_iterations = max(0, quota - progress.by_worker[client_id])
            name = workers.name(client_id)
            progress.lost_by_worker[name] = lost_iterations
            progress.developers.release_client(client_id)
            log.warning(
                "worker %s lost during tier %d (%s at %d users): %d of its %d iterations not done; "
                "its users are spread over the remaining workers",
                name,
                phase.phase_id + 1,
                phase.target,
                phase.tier_users,
                lost_iterations,
                quota,
            )
            workers.respawn(self)


@dataclass(frozen=True)
class UsersProbe(UsersTier):
    """A capacity search's probe of users: they loop conversations for load.search.probe_s; it ends
    complete then."""

    judged: ClassVar[bool] = True

    def done(self, progress: PhaseProgress, now: float, gone: set[str]) -> bool:
        return now - progress.started >= (self.phase.duration_s or 0.0)

    def progress_text(self, progress: PhaseProgress, elapsed_s: float) -> str:
        return (
            f"{elapsed_s:.0f}/{self.phase.duration_s or 0:g} s, {progress.records} requests, "
            f"{progress.errors} errors"
        )


@dataclass(frozen=True)
class RateTier(Tier):
    """An open-loop rate, split over one dispatcher per worker, sending for duration_s: done once every
    dispatcher reported its sends and every send is recorded."""

    unit: str = ""  # what the rate counts per second (the kinds' rate_unit)
    max_in_flight: int = 0  # the scenario's load.max_in_flight
    open_loop: ClassVar[bool] = True

    @property
    def users(self) -> int:
        """One dispatcher per worker. A lost worker's stays counted: a changed count would send the other
        workers a spawn message mid-tier, which stalls a worker for a few hundred ms (late sends); a user
        Locust puts on a worker that has its dispatcher idles (WorkerState.dispatched_phase_key)."""
        return len(self.phase.dispatchers)

    @property
    def spawn_rate(self) -> float:
        return DISPATCHERS_SPAWN_RATE

    @property
    def load(self) -> float:
        assert self.phase.tier_rate is not None
        return self.phase.tier_rate

    @property
    def load_label(self) -> str:
        return f"{self.load:g} {self.unit}"

    def iterations_target(self, progress: PhaseProgress) -> int:
        """The sends its dispatchers reported, and those of a lost worker (which reports none) that its
        records show."""
        reported = sum(share.sends for share in progress.dispatched.values())
        return reported + sum(
            n for client_id, n in progress.by_worker.items() if client_id not in progress.dispatched
        )

    def done(self, progress: PhaseProgress, now: float, gone: set[str]) -> bool:
        pending = set(self.phase.dispatchers) - set(progress.dispatched) - gone
        return not pending and progress.iterations_done >= self.iterations_target(progress)

    def start_text(self) -> str:
        phase = self.phase
        return (
            f"{phase.target} at {self.load_label} for {phase.duration_s:g} s, over "
            f"{len(phase.dispatchers)} workers"
        )

    def progress_text(self, progress: PhaseProgress, elapsed_s: float) -> str:
        line = (
            f"{elapsed_s:.0f}/{self.phase.duration_s or 0:g} s, {progress.iterations_done} sends done, "
            f"{progress.records} requests, {progress.errors} errors"
        )
        flags = "; ".join(f for f in (progress.saturation, self.flags(progress)) if f)
        return f"{line} | {flags}" if flags else line

    def row(self, progress: PhaseProgress) -> dict[str, Any]:
        """Its limit and the sends that waited for it (the report's "not served on schedule")."""
        return {"max_in_flight": self.max_in_flight, "waited_for_max_in_flight": progress.sends_waited}

    def flags(self, progress: PhaseProgress) -> str:
        """Sends held back by max_in_flight, sends late enough to measure the load generator rather than
        the engine."""
        flags = []
        waited = progress.sends_waited
        if waited:
            flags.append(f"max_in_flight {self.max_in_flight} reached: {waited} sends waited")
        lag_p99_s = schedule_lag_p99_s(progress.schedule_lags_s)
        if behind_schedule(lag_p99_s):
            flags.append(
                f"LOAD-GENERATOR-BOUND (schedule lag p99 {lag_p99_s * 1000:.1f} ms > "
                f"{SCHEDULE_LAG_P99_LIMIT_S * 1000:g} ms)"
            )
        return "; ".join(flags)

    def started(self, dispatchers: tuple[str, ...]) -> Tier:
        """The workers here now split the rate."""
        return dataclasses.replace(self, phase=dataclasses.replace(self.phase, dispatchers=dispatchers))

    def share_text(self, dispatchers: int) -> str:
        """What a lost dispatcher had to send."""
        return f"its share ({self.load / dispatchers:.4g} {self.unit})"

    @property
    def dealt_text(self) -> str:
        """How the remaining dispatchers take a re-split up, beyond their rate."""
        return ""

    def workers_lost(self, progress: PhaseProgress, lost: Sequence[str], workers: LostWorkers) -> None:
        """RESPLIT_LEAD_S from now, the remaining dispatchers split the tier's sends among them
        (Phase.resplits, broadcast), so that their sum keeps the tier's rate. What a lost worker had not
        sent or shipped by then is gone: the tier's note says from when to when."""
        phase = self.phase
        tier_s = time.time() - progress.started_wall
        dispatchers = phase.splits[-1][1]
        remaining = tuple(d for d in dispatchers if d not in workers.gone)
        cut_s = tier_s + RESPLIT_LEAD_S
        resplit = bool(remaining) and cut_s < (phase.duration_s or 0.0)
        for client_id in lost:
            name = workers.name(client_id)
            if client_id not in dispatchers:
                log.warning(
                    "worker %s lost during tier %d: it had no share of its sends", name, phase.phase_id + 1
                )
                continue
            last_s = progress.last_records_wall.get(client_id, progress.started_wall) - progress.started_wall
            if resplit:
                taken_up = (
                    f"to {cut_s:.1f} s, then sent by the {len(remaining)} remaining workers{self.dealt_text}"
                )
            else:
                why = "its sending time was over" if remaining else "no worker remained to take it up"
                taken_up = f"to the end of the tier's sends ({why})"
            loss = (
                f"worker {name} lost at {tier_s:.1f} s: {self.share_text(len(dispatchers))} unsent or "
                f"unrecorded from {last_s:.1f} s (its last records) {taken_up}"
            )
            progress.losses.append(loss)
            log.warning("tier %s (%s at %s): %s", workers.label(phase), phase.target, self.load_label, loss)
        if resplit and remaining != dispatchers:
            resplits = (*phase.resplits, (cut_s, remaining))
            progress.tier = dataclasses.replace(self, phase=dataclasses.replace(phase, resplits=resplits))
            workers.broadcast()


@dataclass(frozen=True)
class RateProbe(RateTier):
    """A capacity search's probe of a rate: a rate tier of load.search.probe_s."""

    judged: ClassVar[bool] = True


@dataclass(frozen=True)
class TraceTier(RateTier):
    """A trace target's one tier: its rows sent at their own times (row i by dispatcher i mod the
    dispatchers), labelled by the trace's mean rate; it may run as long as its trace, then the time cap."""

    @property
    def load_label(self) -> str:
        return f"the trace's times (mean {self.load:.4g} {self.unit})"

    def share_text(self, dispatchers: int) -> str:
        return "its rows"

    @property
    def dealt_text(self) -> str:
        return " (its rows from then dealt to them)"


def users_spawn_rate(scenario: Scenario, users: int) -> float:
    rate = scenario.load.spawn_rate_for(users)
    return float(rate) if rate else max(1.0, min(MAX_DEFAULT_SPAWN_RATE, float(users)))


def campaign_tiers(scenario: Scenario, run_id: str, session: str = "", repeats: int = 1) -> list[Tier]:
    """Targets in scenario order, each through every tier (of users, or of rates in an open-loop load),
    a trace target through one replay of its trace (whatever the load's tiers), all of it `repeats`
    times (`--repeat`). Each phase has its own phase_id, which users' prompt keys carry: a repeat sends
    new prompts. A capacity search has no tiers ahead: it plans each probe from the verdicts (run/plan.py)."""
    load = scenario.load
    if load.search is not None:
        return []
    tiers: list[Tier] = []
    for repeat in range(repeats):
        for target in scenario.targets:
            if replays_trace(target):
                tiers.append(trace_tier(scenario, target, run_id, session, len(tiers), repeat))
                continue
            unit = rate_unit(target.kind_label)
            levels: list[tuple[int, float | None]] = (
                [(0, rate) for rate in load.rates]
                if load.rates is not None
                else [(users, None) for users in load.tiers]
            )
            for tier_index, (users, rate) in enumerate(levels):
                phase = Phase(
                    phase_id=len(tiers),
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
                tiers.append(
                    UsersTier(phase, load.tier_timeout_s, users_spawn_rate(scenario, users))
                    if rate is None
                    else RateTier(phase, load.tier_timeout_s, unit, load.max_in_flight)
                )
    return tiers


def campaign_phases(scenario: Scenario, run_id: str, session: str = "", repeats: int = 1) -> list[Phase]:
    """The phases of `campaign_tiers`, as the workers hear them."""
    return [tier.phase for tier in campaign_tiers(scenario, run_id, session, repeats)]


def replays_trace(target: Target) -> bool:
    """Whether the target replays a trace: once, at the trace's own times, not through the load's tiers."""
    return not target.mix and target.conversation.workload_kind.replays_at_own_times


def trace_rate(rows: tuple[TraceRow, ...]) -> float:
    """A trace replay's mean rate (requests/s): its rows over its span from the first send to the last; a
    replay whose rows all leave at once, its rows (as if over one second). It labels the replay's tier."""
    span_s = rows[-1].at_s
    return len(rows) / span_s if span_s > 0 else float(len(rows))


def trace_tier(
    scenario: Scenario, target: Target, run_id: str, session: str, phase_id: int, repeat: int = 0
) -> TraceTier:
    """The one tier of a trace target: it sends until its last row's time, and the requests still running
    then finish as cooldown."""
    rows = conversation_trace(target.conversation)
    phase = Phase(
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
    load = scenario.load
    return TraceTier(
        phase, load.tier_timeout_s + rows[-1].at_s, rate_unit(target.kind_label), load.max_in_flight
    )


def probe_tier(
    scenario: Scenario, run_id: str, session: str, phase_id: int, target: Target, tier_index: int, load: float
) -> Tier:
    """A capacity search's probe of `load` (users, or requests/s): a tier of load.search.probe_s."""
    search = scenario.load.search
    assert search is not None
    by_users = search.by == "users"
    phase = Phase(
        phase_id=phase_id,
        run_id=run_id,
        target=target.name,
        tier_index=tier_index,
        tier_users=int(load) if by_users else 0,
        iterations_per_user=0,
        think_time_s=scenario.load.think_time_s,
        session=session,
        tier_rate=None if by_users else load,
        duration_s=search.probe_s,
    )
    cap_s = scenario.load.tier_timeout_s
    if by_users:
        return UsersProbe(phase, cap_s, users_spawn_rate(scenario, phase.tier_users))
    return RateProbe(phase, cap_s, rate_unit(target.kind_label), scenario.load.max_in_flight)

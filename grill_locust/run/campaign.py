"""Master side of a run: walks targets x tiers, counts iterations from received records, writes results.

The load shape asks `Campaign.tick()` for the user count. A tier ends when the master has *received*
records for N x k iterations (Locust's own stats reach the master late and overshoot), or when its time
cap passes (then it is marked incomplete). Between tiers the shape holds 0 users for the pause.

A capacity search (load.search) knows only its first probe up front: each probe is a tier that ends by
time; once its users are gone and their last records in, the master judges its tier row by the SLO and
adds the next probe the search picks (run/search.py), or the next target's first.

A tier that measured an engine outage (connections refused, or most requests failed) is incomplete:
the campaign holds at 0 users, probing the backend, until it answers (then the tier runs once more) or
`engine_wait_s` passes (then the campaign stops, exit code ENGINE_GONE). A tier whose failures are the
engine refusing the request as sent (errors.is_refusal, or one server error message on every failed
request while the engine answers its probe) is no outage: it is marked `refused: <message>`, not run
again, the target's other tiers are skipped, and the run exits ENGINE_REFUSED, saying what to change.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent
import gevent.event
from locust.runners import STATE_MISSING, STATE_RUNNING, STATE_SPAWNING, MasterRunner

from grill_locust.errors import (
    refusal_advice,
)
from grill_locust.run import exit_codes
from grill_locust.run.campaign_state import (
    DONE,
    DRAINING,
    HOLDING,
    PAUSING,
    RUNNING,
    SETTLING,
    CampaignStateMachine,
)
from grill_locust.run.phase import Phase, campaign_phases, probe_phase, replays_trace
from grill_locust.run.progress import PhaseProgress
from grill_locust.run.search import Bisection, Probe
from grill_locust.run.worker import LOCAL_CLIENT_ID, MSG_DEVELOPER, MSG_PHASE, runner_of
from grill_locust.sinks import PhaseEvent
from grill_locust.sinks.results import ResultsWriter
from grill_locust.verdicts import judge_failures, tier_misses
from grill_locust.workload.kinds import rate_unit

if TYPE_CHECKING:
    import pandas as pd
    from locust.env import Environment

    from grill_locust.config import Backend
    from grill_locust.scenario import Scenario
    from grill_locust.sinks import Sink

log = logging.getLogger("grill")

PROGRESS_INTERVAL_S = 5.0
TICK_WAIT_S = 1.0  # the shape polls at most this long for a change before answering Locust
# Without a scenario spawn_rate a tier's users start within about a second (Locust warns above 100/s).
MAX_DEFAULT_SPAWN_RATE = 100.0
PAUSE_SPAWN_RATE = 100.0
# after the last tier a master holds at 0 users until the workers' users are gone (they have
# --stop-timeout to end their requests, plus this margin), then FINAL_RECORDS_WAIT_S for their last batch
DRAIN_MARGIN_S = 5.0
FINAL_RECORDS_WAIT_S = 1.0
# how long the results folder may refuse every write (a full disk) before the run stops (--disk-full-give-up)
DISK_FULL_GIVE_UP_S = 60.0
ENGINE_PROBE_INTERVAL_S = 2.0
ENGINE_PROBE_TIMEOUT_S = 2.0
STOPPED_NOTE = "run stopped"
# A rate tier re-split over the remaining workers (a worker lost) holds from this long after the master
# decides it: time for every dispatcher to hear of it (openloop.RESPLIT_POLL_S), so none sends late for it.
RESPLIT_LEAD_S = 0.5


@dataclass
class EngineWait:
    """After a tier that measured an outage: the backend the campaign waits for, until when (monotonic)."""

    backend: Backend
    after: Phase
    since: float
    deadline: float
    next_probe: float = 0.0


class Campaign:
    """The campaign of one run: its phases, their progress, and its sinks (the results folder first).

    Phases, tier rows and telemetry go to every sink. Records go to the results folder only: each
    worker's own sinks took them from its users.
    """

    def __init__(
        self,
        environment: Environment,
        scenario: Scenario,
        results: ResultsWriter,
        run_id: str,
        sinks: Sequence[Sink] = (),
        skip: set[tuple[str, int, int]] | None = None,
        walk_tiers: bool = True,
        disk_full_give_up_s: float = DISK_FULL_GIVE_UP_S,
        repeats: int = 1,
    ) -> None:
        self.environment = environment
        self.scenario = scenario
        self.results = results
        self.sinks: list[Sink] = [results, *sinks]
        self._live = any(sink.live for sink in self.sinks)  # someone wants a summary row per tier
        self.run_id = run_id
        # this run, or this resumption of it: in every user's prompt keys, so that no run sends the
        # prompts of an earlier one, which the engine's prefix cache may still hold
        self.session = f"{run_id}.{len(results.meta.get('resumed_wall') or [])}"
        planned = campaign_phases(scenario, run_id, self.session, repeats) if walk_tiers else []
        self.tier_count = len(planned)  # tiers are numbered against the whole campaign, resumed or not
        self.repeats = repeats
        self.phases = [p for p in planned if (p.target, p.tier_index, p.repeat) not in (skip or set())]
        search = scenario.load.search if walk_tiers else None
        # a capacity search's bisection per target, in scenario order; its probe that ended, to judge
        self.searches = {t.name: Bisection.of(search) for t in scenario.targets} if search else {}
        self._probe_to_judge: PhaseProgress | None = None
        # by Phase.key: a tier run again after an outage is a phase of its own (attempt 1)
        self.progress: dict[str, PhaseProgress] = {p.key: PhaseProgress(p) for p in self.phases}
        self.targets = {t.name: t for t in scenario.targets}
        self.current: PhaseProgress | None = None
        self._next_index = 0
        self.walk = CampaignStateMachine()
        self._changed = gevent.event.Event()
        self.ended = False  # Locust stopped the test (after the last tier, or a stop): Start begins anew
        self.closed = False  # the sinks are closed: the run is over
        self.worker_names: dict[str, str] = {}  # Locust client id -> our worker id
        self._users_seen: dict[str, int] = {}  # client id -> most users it ran in the current phase
        self._gone: set[str] = set()  # workers lost (missing heartbeat) or quit during the run
        self.disk_full_give_up_s = disk_full_give_up_s
        self.gave_up_on_disk = False  # the results folder refused writes too long: the run was stopped
        self.refusals: list[str] = []  # workers that could not run the scenario, and why
        # targets whose engine refused a tier's requests -> why (their later tiers are skipped)
        self.refused_targets: dict[str, str] = {}
        # what the run's last lines say (a refusal: the backend and what to change)
        self.final_lines: list[str] = []
        self._engine_wait: EngineWait | None = None
        # records of another session (workers of a killed master, still sending): neither written nor counted
        self.foreign_records = 0

    # -- records from workers -------------------------------------------------------------------
    def on_records(
        self,
        worker: str,
        records: list[dict[str, Any]],
        iterations: dict[str, int],
        client_id: str = LOCAL_CLIENT_ID,
        dispatched: dict[str, dict[str, int]] | None = None,
    ) -> None:
        records = self._own_session(worker, records)
        fresh = self.results.unseen(records)
        self.results.write_records(fresh)
        ended: dict[str, PhaseProgress] = {}  # phases whose row was written: written again with these
        for record in fresh:
            progress = self._progress_of(record)
            if progress is not None:
                if progress.ended_wall is not None:
                    ended[progress.phase.key] = progress
                keep = (progress is self.current or progress is self._probe_to_judge) and (
                    self._live or bool(self.searches)
                )
                progress.count_record(record, keep_for_tier_row=keep)
        for phase_key, count in iterations.items():
            progress = self.progress.get(phase_key)  # another session's phase is none of ours
            if progress is not None:
                progress.count_iterations(client_id, worker, count)
                if progress.ended_wall is not None:
                    ended[phase_key] = progress
        for phase_key, share in (dispatched or {}).items():
            progress = self.progress.get(phase_key)
            if progress is not None:
                progress.dispatched[client_id] = share
                if progress.ended_wall is not None:
                    ended[phase_key] = progress
        for progress in ended.values():
            # iterations in flight when the tier ended (its time cap, a stop) finish after its row was
            # written: phases.csv counts them as records.jsonl holds them (live sinks had their "end")
            progress.note = progress.compose_note()
            self.results.write_phase("end", self._phase_row(progress))
        self.worker_names[client_id] = worker
        if iterations or dispatched:
            self._changed.set()
        if not self.phases:  # a plain run has no shape ticking: watch the disk here
            self._watch_disk()

    def on_developer_claim(self, client_id: str, data: dict[str, Any]) -> None:
        """A worker's user asks its developer index in a phase's tier (MSG_CLAIM): the tier's lowest free
        one, or None for a phase of another session."""
        progress = self.progress.get(data["phase"])
        developer = progress.developers.claim((client_id, data["user"])) if progress is not None else None
        reply = {**data, "developer": developer}
        runner_of(self.environment).send_message(MSG_DEVELOPER, reply, client_id=client_id)

    def on_developer_release(self, client_id: str, data: dict[str, Any]) -> None:
        """A user stopped (MSG_RELEASE): a user started in its place takes its index."""
        progress = self.progress.get(data["phase"])
        if progress is not None:
            progress.developers.release((client_id, data["user"]))

    def _own_session(self, worker: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The records sent in this session; the others (a killed master's workers, still running when
        this resumption began) are counted and logged, never written."""
        own = [record for record in records if record.get("session") == self.session]
        if len(own) < len(records):
            refused = len(records) - len(own)
            self.foreign_records += refused
            sessions = sorted({str(r.get("session") or "none") for r in records} - {self.session})
            log.warning(
                "%d records from worker %s refused: sent in session %s, not this one (%s); %d refused so far",
                refused,
                worker,
                ", ".join(sessions),
                self.session,
                self.foreign_records,
            )
        return own

    def _progress_of(self, record: dict[str, Any]) -> PhaseProgress | None:
        def same(phase: Phase) -> bool:
            return (phase.target, phase.tier_index, phase.attempt, phase.repeat) == (
                record["target"],
                record["tier_index"],
                record.get("attempt") or 0,
                record.get("repeat") or 0,
            )

        current = self.current
        if current is not None and same(current.phase):
            return current
        return next((p for p in self.progress.values() if same(p.phase)), None)

    def refuse(self, worker: str, reason: str) -> None:
        """A worker cannot run the scenario (it lacks a secret): the campaign ends here, saying why in the
        log, in the tier's phases.csv note and in the exit code, rather than measuring with fewer load
        generators than planned or with none."""
        note = f"worker {worker} refused the campaign: {reason}"
        if note in self.refusals:
            return
        self.refusals.append(note)
        log.error(note)
        self.environment.process_exit_code = exit_codes.REFUSED
        if self.current is None:
            if self._next_index >= len(self.phases):
                return
            if self.walk.state is HOLDING:  # the refusal ends the campaign: no engine to wait for
                self._engine_wait = None
                self.walk.move(PAUSING, self.walk.until)
            self._start_phase(self.phases[self._next_index])  # its row carries the note
        self._end_phase(complete=False, note=note)
        self._stop_walking()
        self._changed.set()

    def on_telemetry(self, samples: list[dict[str, Any]]) -> None:
        for sink in self.sinks:
            sink.write_telemetry(samples)

    # -- the shape --------------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        """The shape walked every tier (or the engine was gone): Locust stops the test."""
        return self.walk.state is DONE

    def tick(self) -> tuple[int, float] | None:
        """Users and spawn rate for now; None when the campaign is over. Waits up to TICK_WAIT_S for news."""
        self._changed.wait(TICK_WAIT_S)
        self._changed.clear()
        now = time.monotonic()
        self._watch_disk()
        walk = self.walk
        if walk.state is RUNNING:
            users = self._tick_running(now)
            if users is not None:
                return users
        if walk.state in (PAUSING, HOLDING) and walk.waiting(now):
            return 0, PAUSE_SPAWN_RATE
        if walk.state is HOLDING:
            if self._engine_gone(now):
                walk.move(DONE)
                return None
            if walk.state is HOLDING:
                return 0, PAUSE_SPAWN_RATE
        if walk.state is SETTLING:
            runner = self.environment.runner
            assert self._probe_to_judge is not None
            ended = self._probe_to_judge.ended_monotonic
            if (runner is not None and runner.user_count > 0) or now < ended + FINAL_RECORDS_WAIT_S:
                return 0, PAUSE_SPAWN_RATE  # its users' last records are on their way
            self._judge_probe()
        if walk.state is PAUSING and self._next_index >= len(self.phases):
            self._start_draining(now)
        if walk.state is DRAINING:
            if self._draining(now) or (self.results.held_record_count and not self.gave_up_on_disk):
                return 0, PAUSE_SPAWN_RATE
            walk.move(DONE)
            return None
        if walk.state is not PAUSING:
            return 0, PAUSE_SPAWN_RATE
        runner = self.environment.runner
        if runner is not None and runner.user_count > 0 and walk.after_tier:
            return 0, PAUSE_SPAWN_RATE  # wait for the previous tier's users to be gone
        self._start_phase(self.phases[self._next_index])
        self._next_index += 1
        assert self.current is not None
        return self.current.phase.users, self._spawn_rate(self.current.phase)

    def _tick_running(self, now: float) -> tuple[int, float] | None:
        """The tier running: its users and spawn rate, or None once it ended (done, or its time cap)."""
        current = self.current
        assert current is not None
        phase = current.phase
        self._watch_workers(current)
        held, _ = self.results.unwritten_of(phase.target, phase.tier_index)
        if phase.tier_rate is not None:  # it sends for duration_s: done once every send is recorded
            done = self._all_sent(current) and current.iterations_done >= current.iterations_target
        elif phase.duration_s is not None:  # a search's probe of users: done when its time is up
            done = now - current.started >= phase.duration_s
        else:
            done = current.iterations_done >= current.iterations_target
        if done and held and not self.gave_up_on_disk:
            return phase.users, self._spawn_rate(phase)  # its users are idle; its records wait for space
        if done:
            self._end_phase(complete=True, note="")
        elif now - current.started > self._time_cap_s(phase):
            self._end_phase(complete=False, note=f"time cap {self._time_cap_s(phase):g} s reached")
        else:
            return phase.users, self._spawn_rate(phase)
        return None

    def _stop_walking(self) -> None:
        """No further tier starts (a worker refused the campaign, the disk is full): drain and stop."""
        self._next_index = len(self.phases)
        if self.walk.state in (PAUSING, HOLDING):
            self._start_draining(time.monotonic())

    def _start_draining(self, now: float) -> None:
        """The last tier ended: hold at 0 users while the workers stop theirs (--stop-timeout and a margin)."""
        stop_timeout = float(getattr(self.environment.parsed_options, "stop_timeout", 0) or 0)
        self._engine_wait = None
        self.walk.move(DRAINING, until=now + stop_timeout + DRAIN_MARGIN_S)

    def _time_cap_s(self, phase: Phase) -> float:
        """How long a tier may run: tier_timeout_s; a trace replay, as long as its trace and then that."""
        cap_s = self.scenario.load.tier_timeout_s
        return cap_s + (phase.duration_s or 0.0) if replays_trace(self.targets[phase.target]) else cap_s

    def _all_sent(self, progress: PhaseProgress) -> bool:
        """Every dispatcher still present sent its share of a rate tier (always, in a tier of users)."""
        pending = set(progress.phase.dispatchers) - set(progress.dispatched) - self._gone
        return not pending

    def _watch_disk(self) -> None:
        """Write what the results folder refused before; when it has refused every write for longer than
        the give-up bound, stop the run (its tier incomplete) rather than hold records without end."""
        results = self.results
        results.retry_unwritten()
        if self.gave_up_on_disk or results.unwritable_for_s() <= self.disk_full_give_up_s:
            return
        self.gave_up_on_disk = True
        log.error(
            "%s for %.0f s: stopping the run; %d records not written",
            results.unwritable_reason,
            results.unwritable_for_s(),
            results.unwritten_record_count,
        )
        if self.current is not None:
            self._end_phase(complete=False, note="run stopped: results folder not writable")
        self._stop_walking()
        if not self.phases:  # a plain run: no shape to end it
            gevent.spawn(runner_of(self.environment).quit)

    def _draining(self, now: float) -> bool:
        """After the last tier: whether to hold at 0 users while the workers stop theirs, so that the
        records of requests still in flight reach the results folder before the master quits."""
        runner = self.environment.runner
        if not isinstance(runner, MasterRunner):
            return False  # a local runner's records arrive in this process as its users stop
        walk = self.walk
        if runner.user_count > 0 and walk.waiting(now):
            return True
        if walk.records_until is None:
            walk.records_until = now + FINAL_RECORDS_WAIT_S
        return now < walk.records_until

    def _watch_workers(self, current: PhaseProgress) -> None:
        """A worker that went missing or quit mid-tier: log it and count what it lost; its users are
        spread over the remaining workers (a tier of users), or its share of the sends (a rate tier)."""
        runner = self.environment.runner
        if not isinstance(runner, MasterRunner):
            return
        present = {c.id: c for c in runner.clients.all if c.state != STATE_MISSING}
        for client_id, client in present.items():
            self._users_seen[client_id] = max(self._users_seen.get(client_id, 0), client.user_count)
        lost_now = [cid for cid in self._users_seen if cid not in present and cid not in self._gone]
        self._gone.update(lost_now)
        if lost_now and current.phase.tier_rate is not None:
            self._resplit(current, lost_now)
            return
        for client_id in lost_now:
            phase = current.phase
            quota = self._users_seen[client_id] * phase.iterations_per_user
            lost = max(0, quota - current.by_worker[client_id])
            name = self.worker_names.get(client_id, client_id)
            current.lost_by_worker[name] = lost
            current.developers.release_client(client_id)
            log.warning(
                "worker %s lost during tier %d (%s at %d users): %d of its %d iterations not done; "
                "its users are spread over the remaining workers",
                name,
                phase.phase_id + 1,
                phase.target,
                phase.tier_users,
                lost,
                quota,
            )
            if present and runner.state in (STATE_RUNNING, STATE_SPAWNING):
                # Locust re-spreads users itself when a worker quits, but for a missing one only
                # with --enable-rebalancing: ask for the tier's users again either way.
                runner.start(phase.tier_users, self._spawn_rate(phase))

    def _resplit(self, current: PhaseProgress, lost: list[str]) -> None:
        """Workers lost mid rate tier: RESPLIT_LEAD_S from now, the remaining dispatchers split the tier's
        sends among them (Phase.resplits, broadcast), so that their sum keeps the tier's rate. What a lost
        worker had not sent or shipped by then is gone: the tier's note says from when to when."""
        phase = current.phase
        tier_s = time.time() - current.started_wall
        dispatchers = phase.splits[-1][1]
        remaining = tuple(d for d in dispatchers if d not in self._gone)
        cut_s = tier_s + RESPLIT_LEAD_S
        resplit = bool(remaining) and cut_s < (phase.duration_s or 0.0)
        target = self.targets[phase.target]
        assert phase.tier_rate is not None
        share = (
            "its rows"
            if replays_trace(target)
            else f"its share ({phase.tier_rate / len(dispatchers):.4g} {rate_unit(target.kind_label)})"
        )
        for client_id in lost:
            name = self.worker_names.get(client_id, client_id)
            if client_id not in dispatchers:
                log.warning(
                    "worker %s lost during tier %d: it had no share of its sends", name, phase.phase_id + 1
                )
                continue
            last_s = current.last_records_wall.get(client_id, current.started_wall) - current.started_wall
            if resplit:
                taken_up = (
                    f"to {cut_s:.1f} s, then sent by the {len(remaining)} remaining workers"
                    f"{' (its rows from then dealt to them)' if replays_trace(target) else ''}"
                )
            else:
                why = "its sending time was over" if remaining else "no worker remained to take it up"
                taken_up = f"to the end of the tier's sends ({why})"
            loss = (
                f"worker {name} lost at {tier_s:.1f} s: {share} unsent or unrecorded from {last_s:.1f} s "
                f"(its last records) {taken_up}"
            )
            current.losses.append(loss)
            log.warning(
                "tier %s (%s at %s): %s", self.tier_label(phase), phase.target, self.load_label(phase), loss
            )
        if resplit and remaining != dispatchers:
            current.phase = dataclasses.replace(phase, resplits=(*phase.resplits, (cut_s, remaining)))
            self.broadcast()

    def _engine_gone(self, now: float) -> bool:
        """Probe the backend the campaign waits for (every ENGINE_PROBE_INTERVAL_S); True once the wait
        is over without an answer (the campaign stops, exit code ENGINE_GONE)."""
        wait = self._engine_wait
        assert wait is not None
        if now < wait.next_probe:
            return False
        if engine_answers(wait.backend):
            log.info(
                "backend %s answers again after %.0f s",
                wait.backend.name,
                now - wait.since,
            )
            self._engine_wait = None
            self.walk.move(PAUSING, self.walk.until)
            return False
        wait.next_probe = time.monotonic() + ENGINE_PROBE_INTERVAL_S
        if now < wait.deadline:
            return False
        waited_s = self.scenario.load.engine_wait_s
        log.error(
            "backend %s (%s) did not answer for %g s (load.engine_wait_s) after tier %d/%d: "
            "the campaign stops",
            wait.backend.name,
            wait.backend.url,
            waited_s,
            wait.after.phase_id + 1,
            self.tier_count,
        )
        self.environment.process_exit_code = exit_codes.ENGINE_GONE
        return True

    def _spawn_rate(self, phase: Phase) -> float:
        if phase.tier_rate is not None:  # one dispatcher per worker, at once
            return PAUSE_SPAWN_RATE
        rate = self.scenario.load.spawn_rate_for(phase.tier_users)
        return float(rate) if rate else max(1.0, min(MAX_DEFAULT_SPAWN_RATE, float(phase.tier_users)))

    def _start_phase(self, phase: Phase) -> None:
        progress = self.progress[phase.key]
        if phase.tier_rate is not None:  # the workers here now split the rate
            phase = progress.phase = dataclasses.replace(phase, dispatchers=self._dispatchers())
            progress.max_in_flight = self.scenario.load.max_in_flight
        progress.started, progress.started_wall = time.monotonic(), time.time()
        progress.warmup_requests = self.scenario.load.warmup_requests or 0
        self.current = progress
        self.walk.move(RUNNING)
        self.broadcast()
        self._write_phase("start", progress)
        if phase.tier_rate is None:
            log.info(
                "tier %s start: %s at %d users, %d iterations to do",
                self.tier_label(phase),
                phase.target,
                phase.tier_users,
                phase.iterations_target,
            )
        else:
            log.info(
                "tier %s start: %s at %s for %g s, over %d workers",
                self.tier_label(phase),
                phase.target,
                self.load_label(phase),
                phase.duration_s,
                len(phase.dispatchers),
            )

    def _dispatchers(self) -> tuple[str, ...]:
        """The workers that split a rate tier starting now: every one connected and not missing."""
        runner = self.environment.runner
        if not isinstance(runner, MasterRunner):
            return (LOCAL_CLIENT_ID,)
        return tuple(sorted(c.id for c in runner.clients.all if c.state != STATE_MISSING))

    def load_label(self, phase: Phase) -> str:
        """`10 users`, or a rate tier's `5 req/s` (`5 sessions/s` for kinds whose iteration is a session)."""
        if phase.tier_rate is None:
            return f"{phase.tier_users} users"
        target = self.targets[phase.target]
        unit = rate_unit(target.kind_label)
        if replays_trace(target):
            return f"the trace's times (mean {phase.tier_rate:.4g} {unit})"
        return f"{phase.tier_rate:g} {unit}"

    def _end_phase(self, complete: bool, note: str) -> None:
        progress = self.current
        assert progress is not None
        progress.ended_wall, progress.ended_monotonic = time.time(), time.monotonic()
        stopped = note == STOPPED_NOTE
        held, lost_records = self.results.unwritten_of(progress.phase.target, progress.phase.tier_index)
        unwritten = (
            f"{held + lost_records} records not written ({self.results.unwritable_reason})"
            if held + lost_records
            else ""
        )
        outage, refusal = self._judge_failures(progress) if not stopped else ("", "")
        progress.refusal = refusal
        refused = f"refused: {refusal}" if refusal else ""
        progress.complete = complete and not outage and not refusal and not unwritten
        progress.end_reason = "; ".join(part for part in (refused, outage, note, unwritten) if part)
        progress.note = note = progress.compose_note()
        self.current = None
        self.broadcast()
        self._write_phase("end", progress)
        pause_until = time.monotonic() + self.scenario.load.pause_s
        self._users_seen = {cid: 0 for cid in self._users_seen if cid not in self._gone}
        phase = progress.phase
        log.info(
            "tier %s %s: %s at %s, %d/%d iterations, %d requests, %d errors%s",
            self.tier_label(phase),
            "done" if progress.complete else "INCOMPLETE",
            phase.target,
            self.load_label(phase),
            progress.iterations_done,
            progress.iterations_target,
            progress.records,
            progress.errors,
            f" ({note})" if note else "",
        )
        for warning in (progress.saturation, progress.open_loop_flags, progress.all_warmup):
            if warning:
                log.warning("tier %s: %s", self.tier_label(phase), warning)
        if self._live:
            self._write_tier_row(progress)
        if refusal:
            self._skip_refused_target(progress)
        elif outage:
            self._wait_for_engine(phase)
        run_again = (
            self._next_index < len(self.phases) and self.phases[self._next_index].attempt > phase.attempt
        )
        self.walk.after_tier = True
        if self.searches and not stopped and not run_again:
            self._probe_to_judge = progress
            self.walk.move(SETTLING)  # the judge pauses before the probe it adds
            return
        progress.tier_records = []
        if self._next_index >= len(self.phases):
            self._start_draining(time.monotonic())  # no pause: no tier follows
        else:
            self.walk.move(HOLDING if self._engine_wait is not None else PAUSING, pause_until)

    def _judge_probe(self) -> None:
        """Judge the probe that ended by the run's SLO (as `grill report` judges tiers), keep its verdict
        in run.json, and add the next probe: this target's, else the next target's first."""
        from grill_locust.report.capacity import conversation_slos_of_run, slo_of_run

        progress, self._probe_to_judge = self._probe_to_judge, None
        assert progress is not None
        phase = progress.phase
        if not progress.refusal:  # a refused probe measured nothing: its target's search ends there
            slo = slo_of_run(self.results.meta)
            misses = tier_misses(
                self._tier_summary(progress), slo, conversation_slos_of_run(self.results.meta, slo)
            )
            load = float(phase.tier_users) if phase.tier_rate is None else phase.tier_rate
            persona, metric = misses[0] if misses else ("", "")
            self.searches[phase.target].record(Probe(load, not misses, metric, persona))
            log.info(
                "probe %s: %s at %s %s",
                self.tier_label(phase),
                phase.target,
                self.load_label(phase),
                f"misses the SLO on {metric}{f' ({persona})' if persona else ''}"
                if misses
                else "meets the SLO",
            )
        progress.tier_records = []
        self.results.meta["search"] = self.search_summary()
        self.results.write_meta()
        if self.refusals or self.gave_up_on_disk or self.ended:
            self._start_draining(time.monotonic())
            return
        names = list(self.searches)
        for target in names[names.index(phase.target) :]:
            if target in self.refused_targets:
                continue
            next_load = self.searches[target].next_load()
            if next_load is not None:
                tier_index = len(self.searches[target].probes)
                probe = probe_phase(
                    self.scenario, self.run_id, self.session, len(self.phases), target, tier_index, next_load
                )
                self.phases.append(probe)
                self.progress[probe.key] = PhaseProgress(probe)
                self.tier_count += 1
                pause_until = progress.ended_monotonic + self.scenario.load.pause_s
                self.walk.move(HOLDING if self._engine_wait is not None else PAUSING, pause_until)
                return
        self._start_draining(time.monotonic())

    def search_summary(self) -> dict[str, Any]:
        """run.json's `search`: what was searched, and per target the bracket found and every probe."""
        search = self.scenario.load.search
        assert search is not None
        return {
            "by": search.by,
            "bracket": search.users if search.users is not None else search.rate,
            "probe_s": search.probe_s,
            "precision": search.stop_precision,
            "targets": [
                {**bisection.as_json(target), "unit": self._search_unit(search.by, target)}
                for target, bisection in self.searches.items()
            ],
        }

    def _search_unit(self, by: str, target: str) -> str:
        """What a search's loads count: users, or the rate's unit for the target's kind."""
        return "users" if by == "users" else rate_unit(self.targets[target].kind_label)

    def _judge_failures(self, progress: PhaseProgress) -> tuple[str, str]:
        """(why the tier measured an outage, the engine's message if it refused the tier's requests), each
        "" when not, by verdicts.judge_failures (progress.remark says why failures were no outage)."""
        backend = self.targets[progress.phase.target].backend
        verdict = judge_failures(progress.failures, backend.name, lambda: engine_answers(backend))
        progress.remark = verdict.remark
        return verdict.outage, verdict.refusal

    def _skip_refused_target(self, progress: PhaseProgress) -> None:
        """The engine refused the tier's requests: the target's tiers still to run are skipped (another
        attempt would be refused the same way), the run will exit ENGINE_REFUSED, and its last line and
        run.json's `refused` name the backend, the message and what to change."""
        phase = progress.phase
        backend = self.targets[phase.target].backend
        ahead = self.phases[self._next_index :]
        skipped = [p for p in ahead if p.target == phase.target]
        self.phases[self._next_index :] = [p for p in ahead if p.target != phase.target]
        for skipped_phase in skipped:
            del self.progress[skipped_phase.key]
        self.refused_targets[phase.target] = progress.refusal
        (status, _), _ = progress.failed_replies.most_common(1)[0]
        advice = refusal_advice(progress.refusal, status)
        failed, sent = progress.failed_and_sent
        self.results.meta.setdefault("refused", []).append(
            {
                "target": phase.target,
                "backend": backend.name,
                "tier_index": phase.tier_index,
                "repeat": phase.repeat,
                "status": status,
                "message": progress.refusal,
                "failed": failed,
                "sent": sent,
                "advice": advice,
                "skipped_tiers": [p.tier_index for p in skipped],
            }
        )
        self.results.write_meta()
        if skipped:
            log.warning(
                "target %s: %d more tiers skipped: the engine refused tier %s",
                phase.target,
                len(skipped),
                self.tier_label(phase),
            )
        line = (
            f"backend {backend.name}: the engine refused {failed} of {sent} requests of tier "
            f"{self.tier_label(phase)} ({phase.target}): {progress.refusal!r} — {advice}"
        )
        log.error(line)
        self.final_lines.append(line)
        self.environment.process_exit_code = exit_codes.ENGINE_REFUSED

    def _wait_for_engine(self, phase: Phase) -> None:
        """After an outage: hold before the next tier until the backend answers, then run this tier once
        more (a tier is run again once only). engine_wait_s 0: go on at once, no re-run."""
        wait_s = self.scenario.load.engine_wait_s
        if wait_s <= 0:
            return
        backend = self.targets[phase.target].backend
        if phase.attempt == 0:
            rerun = dataclasses.replace(phase, attempt=phase.attempt + 1)
            self.phases.insert(self._next_index, rerun)
            self.progress[rerun.key] = PhaseProgress(rerun)
        now = time.monotonic()
        self._engine_wait = EngineWait(backend, phase, since=now, deadline=now + wait_s)
        log.warning(
            "tier %s: backend %s had an outage; holding at 0 users, probing it every %g s for up to %g s%s",
            self.tier_label(phase),
            backend.name,
            ENGINE_PROBE_INTERVAL_S,
            wait_s,
            ", then the tier runs again" if phase.attempt == 0 else "",
        )

    def tier_label(self, phase: Phase) -> str:
        """`3/8` (the tier's place in the whole campaign), `3/8, attempt 2` for a tier run again; a
        search's probes are not known ahead: `3/?`."""
        label = f"{phase.phase_id + 1}/{'?' if self.searches else self.tier_count}"
        if self.repeats > 1:
            label += f", repeat {phase.repeat + 1}/{self.repeats}"
        return f"{label}, attempt {phase.attempt + 1}" if phase.attempt else label

    def _write_tier_row(self, progress: PhaseProgress) -> None:
        """The finished tier's summary row, from the records it received, to the sinks read live."""
        for row in self._tier_summary(progress).to_dict("records"):
            for sink in self.sinks:
                sink.write_tier(row)

    def _tier_summary(self, progress: PhaseProgress) -> pd.DataFrame:
        """The tier's summary rows (a mix's personas beside its whole tier) from the records it received."""
        import pandas as pd

        from grill_locust.record import RECORD_COLUMNS
        from grill_locust.report import summarize
        from grill_locust.report.load import RunData

        records = pd.DataFrame(progress.tier_records, columns=list(RECORD_COLUMNS))
        phases = pd.DataFrame([self._phase_row(progress)])
        judged_by = {c.name: self.scenario.slo_of(c.name) for c in self.scenario.conversations}
        meta = {"run_id": self.run_id, "warmup_requests": self.scenario.load.warmup_requests}
        run = RunData(records, phases, None, meta)
        return summarize(run, self.scenario.slo, judged_by, intervals=False)

    def _phase_row(self, progress: PhaseProgress) -> dict[str, Any]:
        phase = progress.phase
        target = self.targets[phase.target]
        return {
            **phase.labels(target),
            "start_wall": progress.started_wall,
            "end_wall": progress.ended_wall if progress.ended_wall is not None else "",
            "iterations_target": progress.iterations_target,
            "iterations_done": progress.iterations_done,
            # a rate tier's limit and the sends that waited for it (the report's "not served on schedule")
            "max_in_flight": progress.max_in_flight if phase.tier_rate is not None else "",
            "waited_for_max_in_flight": progress.sends_waited if phase.tier_rate is not None else "",
            "complete": progress.complete,
            "note": progress.note,
        }

    def _write_phase(self, event: PhaseEvent, progress: PhaseProgress) -> None:
        row = self._phase_row(progress)
        for sink in self.sinks:
            sink.write_phase(event, row)

    # -- messages to workers ----------------------------------------------------------------------
    def phase_message(self, with_scenario: bool) -> dict[str, Any]:
        current = self.current
        return {
            "run_id": self.run_id,
            "session": self.session,
            "scenario": self.scenario.to_wire() if with_scenario else None,
            "phase": current.phase.to_wire() if current is not None else None,
            # one tier start for every worker: a request's warmup is judged from it (Load.warmup)
            "phase_started_wall": current.started_wall if current is not None else None,
        }

    def broadcast(self) -> None:
        """Tell every worker the current phase (before the shape spawns its users)."""
        runner_of(self.environment).send_message(MSG_PHASE, self.phase_message(with_scenario=True))

    # -- progress and end -------------------------------------------------------------------------
    def progress_line(self) -> str:
        current = self.current
        if current is None:
            if self.walk.state is HOLDING and self._engine_wait is not None:
                wait = self._engine_wait
                return (
                    f"waiting for backend {wait.backend.name} ({time.monotonic() - wait.since:.0f} of "
                    f"{self.scenario.load.engine_wait_s:g} s), {self.results.record_count} records"
                )
            skipped = self.tier_count - sum(1 for p in self.phases if p.attempt == 0)
            done = skipped + sum(
                1 for p in self.progress.values() if p.ended_wall is not None and p.phase.attempt == 0
            )
            return f"between tiers: {done}/{self.tier_count} tiers done, {self.results.record_count} records"
        phase = current.phase
        elapsed = time.monotonic() - current.started
        if phase.tier_rate is not None:
            line = (
                f"tier {self.tier_label(phase)} {phase.target} @ {self.load_label(phase)}: "
                f"{elapsed:.0f}/{phase.duration_s or 0:g} s, {current.iterations_done} sends done, "
                f"{current.records} requests, {current.errors} errors"
            )
            flags = "; ".join(f for f in (current.saturation, current.open_loop_flags) if f)
            return f"{line} | {flags}" if flags else line
        if phase.duration_s is not None:
            return (
                f"tier {self.tier_label(phase)} {phase.target} @ {phase.tier_users} users: "
                f"{elapsed:.0f}/{phase.duration_s:g} s, {current.records} requests, {current.errors} errors"
            )
        rate = current.iterations_done / elapsed if elapsed > 0 else 0.0
        remaining = phase.iterations_target - current.iterations_done
        eta = f"{remaining / rate:.0f} s" if rate > 0 else "?"
        line = (
            f"tier {self.tier_label(phase)} {phase.target} @ {phase.tier_users} users: "
            f"{current.iterations_done}/{phase.iterations_target} iterations, {current.errors} errors, ETA {eta}"
        )
        return f"{line} | {current.saturation}" if current.saturation else line

    def end(self) -> None:
        """Locust stopped the test: mark a tier cut short by the stop as incomplete."""
        self.ended = True
        if self.current is not None:
            self._end_phase(complete=False, note=STOPPED_NOTE)

    def incomplete_tiers(self) -> list[PhaseProgress]:
        """The tiers whose last attempt ended incomplete (a time cap, an outage not run again, a
        refusal...), but for those the run's own stop cut."""
        last: dict[tuple[str, int, int], PhaseProgress] = {}
        for progress in self.progress.values():
            phase = progress.phase
            key = (phase.target, phase.tier_index, phase.repeat)
            if progress.ended_wall is not None and (
                key not in last or phase.attempt > last[key].phase.attempt
            ):
                last[key] = progress
        return [p for p in last.values() if not p.complete and not p.end_reason.startswith(STOPPED_NOTE)]

    def close(self) -> None:
        """The run is over: a tier cut short is marked, every sink writes what it holds. A tier left
        incomplete makes the exit code TIER_INCOMPLETE where no other code says more."""
        self.closed = True
        self.end()
        if self.walk.state is SETTLING:  # the run stopped in the pause after a probe
            self._judge_probe()
        incomplete = self.incomplete_tiers()
        if incomplete:
            log.warning(
                "%d tiers incomplete: %s",
                len(incomplete),
                "; ".join(f"{self.tier_label(p.phase)} {p.phase.target}: {p.end_reason}" for p in incomplete),
            )
            if self.environment.process_exit_code is None:
                self.environment.process_exit_code = exit_codes.TIER_INCOMPLETE
        for sink in self.sinks:
            sink.close()


def engine_answers(backend: Backend) -> bool:
    """Whether the backend answers its model listing (every engine has one) without a server error."""
    from grill_locust.client.backend_http import NoReply, auth_headers, list_models

    try:
        listing = list_models(
            backend.url or "", backend.engine, headers=auth_headers(backend), timeout_s=ENGINE_PROBE_TIMEOUT_S
        )
    except (NoReply, ValueError):
        return False
    return listing.status < 500


def progress_printer(campaign: Campaign) -> None:
    while not campaign.finished:
        gevent.sleep(PROGRESS_INTERVAL_S)
        log.info(campaign.progress_line())


def run_dir_for(results_dir: str, run_id: str) -> Path:
    return Path(results_dir) / run_id

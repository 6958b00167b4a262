"""Master side of a run: the campaign's wiring (what workers send, to the tiers' progress and the sinks)
and its walk through the tiers its planner (run/plan.py) yields.

The load shape asks `Campaign.tick()` for the user count. A tier ends when its variant says it is done
(run/phase.py: a tier of users once the master has *received* records for N x k iterations, as Locust's
own stats reach the master late and overshoot; a rate tier once every send is recorded), or when its
time cap passes (then it is marked incomplete). Between tiers the shape holds 0 users for the pause.

A capacity search's probe ends by time; once its users are gone and their last records in, the master
judges its tier row by the SLO and the planner picks the next probe (run/search.py).

A tier that measured an engine outage (connections refused, or most requests failed) is incomplete:
the campaign holds at 0 users, probing the backend, until it answers (then the tier runs once more) or
`engine_wait_s` passes (then the campaign stops, exit code ENGINE_GONE). A tier whose failures are the
engine refusing the request as sent (errors.is_refusal, or one server error message on every failed
request while the engine answers its probe) is no outage: it is marked `refused: <message>`, not run
again, the target's other tiers are skipped, and the run exits ENGINE_REFUSED, saying what to change.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent
import gevent.event
from locust.runners import STATE_MISSING, STATE_RUNNING, STATE_SPAWNING, MasterRunner

from grill_locust.errors import refusal_advice
from grill_locust.record import RequestRecord
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
from grill_locust.run.messages import Claim, Developer, PhaseMessage, RecordsBatch, Refused, Release, send
from grill_locust.run.phase import Phase, Tier
from grill_locust.run.plan import Hold, Outcome, Plan, Step, search_summary
from grill_locust.run.progress import PhaseProgress, TierBook
from grill_locust.run.search import Probe
from grill_locust.run.worker import LOCAL_CLIENT_ID, runner_of
from grill_locust.samples import Sample
from grill_locust.sinks import PhaseEvent
from grill_locust.sinks.results import ResultsWriter

if TYPE_CHECKING:
    import pandas as pd
    from locust.env import Environment

    from grill_locust.config import Backend
    from grill_locust.scenario import Scenario, Target
    from grill_locust.sinks import Sink

log = logging.getLogger("grill")

PROGRESS_INTERVAL_S = 5.0
# Locust asks the shape again what is left of 1 s after each answer. The shape answers once its answer
# changes (at most TICK_WAIT_S after the ask), looking every TICK_POLL_S (a tier done, a pause's end, the
# last users of a tier gone, a record's arrival), so a tier ends and the next starts without waiting for
# Locust's next ask; the results folder's refused writes are retried every DISK_RETRY_S.
TICK_WAIT_S = 5.0
TICK_POLL_S = 0.05
DISK_RETRY_S = 1.0
PAUSE_SPAWN_RATE = 100.0
IDLE = (0, PAUSE_SPAWN_RATE)  # the shape's answer between tiers
# after the last tier a master holds at 0 users until the workers' users are gone (they have
# --stop-timeout to end their requests, plus this margin), then FINAL_RECORDS_WAIT_S for their last batch
DRAIN_MARGIN_S = 5.0
FINAL_RECORDS_WAIT_S = 1.0
# how long the results folder may refuse every write (a full disk) before the run stops (--disk-full-give-up)
DISK_FULL_GIVE_UP_S = 60.0
ENGINE_PROBE_INTERVAL_S = 2.0
ENGINE_PROBE_TIMEOUT_S = 2.0
STOPPED_NOTE = "run stopped"


class Campaign:
    """The campaign of one run: its plan, its tiers' progress, and its sinks (the results folder first).

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
        self.run_id = run_id
        # this run, or this resumption of it: in every user's prompt keys, so that no run sends the
        # prompts of an earlier one, which the engine's prefix cache may still hold
        self.session = f"{run_id}.{len(results.meta.get('resumed_wall') or [])}"
        self.targets = {t.name: t for t in scenario.targets}
        self.rows = TierRows(scenario, run_id, results, [results, *sinks])
        self.walks_tiers = walk_tiers
        self.plan = Plan.of(scenario, run_id, self.session, repeats, skip) if walk_tiers else Plan((), 0)
        self.book = TierBook(keep_records=self.rows.live or bool(self.plan.searches))
        self.workers = WorkerWatch(self)
        self._changed = gevent.event.Event()
        self._answered: tuple[int, float] | None | str = "nothing yet"  # the shape's last answer to Locust
        self._disk_watched = -math.inf  # when the tick last retried the results folder's refused writes
        self.ended = False  # Locust stopped the test (after the last tier, or a stop): Start begins anew
        self.closed = False  # the sinks are closed: the run is over
        self.disk_full_give_up_s = disk_full_give_up_s
        self.gave_up_on_disk = False  # the results folder refused writes too long: the run was stopped
        self.refusals: list[str] = []  # workers that could not run the scenario, and why
        # what the run's last lines say (a refusal: the backend and what to change)
        self.final_lines: list[str] = []
        # records of another session (workers of a killed master, still sending): neither written nor counted
        self.foreign_records = 0
        self.walk = TierWalk(self)

    # -- what workers send ------------------------------------------------------------------------
    def on_records(self, batch: RecordsBatch, client_id: str = LOCAL_CLIENT_ID) -> None:
        worker, iterations, dispatched = batch.worker, batch.iterations, batch.dispatched
        fresh = self.results.unseen(self._own_session(worker, batch.records))
        self.results.write_records(fresh)
        for progress in self.book.count(fresh, iterations, dispatched, client_id, worker):
            # iterations in flight when the tier ended (its time cap, a stop) finish after its row was
            # written: phases.csv counts them as records.jsonl holds them (live sinks had their "end")
            progress.note = progress.compose_note()
            self.results.write_phase("end", self.rows.row(progress))
        self.workers.names[client_id] = worker
        if iterations or dispatched:
            self._changed.set()
        if not self.walks_tiers:  # a plain run has no shape ticking: watch the disk here
            self._watch_disk()

    def on_developer_claim(self, client_id: str, claim: Claim) -> None:
        """A worker's user asks its developer index in a phase's tier: the tier's lowest free one, or
        None for a phase of another session."""
        progress = self.book.progress.get(claim.phase)
        developer = progress.developers.claim((client_id, claim.user)) if progress is not None else None
        send(runner_of(self.environment), Developer(claim.phase, claim.user, developer), client_id=client_id)

    def on_developer_release(self, client_id: str, release: Release) -> None:
        """A user stopped: a user started in its place takes its index."""
        progress = self.book.progress.get(release.phase)
        if progress is not None:
            progress.developers.release((client_id, release.user))

    def _own_session(self, worker: str, records: list[RequestRecord]) -> list[RequestRecord]:
        """The records sent in this session; the others (a killed master's workers, still running when
        this resumption began) are counted and logged, never written."""
        own = [record for record in records if record.session == self.session]
        if len(own) < len(records):
            refused = len(records) - len(own)
            self.foreign_records += refused
            sessions = sorted({r.session or "none" for r in records} - {self.session})
            log.warning(
                "%d records from worker %s refused: sent in session %s, not this one (%s); %d refused so far",
                refused,
                worker,
                ", ".join(sessions),
                self.session,
                self.foreign_records,
            )
        return own

    def refuse(self, refused: Refused) -> None:
        """A worker cannot run the scenario (it lacks a secret): the campaign ends here, saying why in the
        log, in the tier's phases.csv note and in the exit code, rather than measuring with fewer load
        generators than planned or with none."""
        note = f"worker {refused.worker} refused the campaign: {refused.reason}"
        if note in self.refusals:
            return
        self.refusals.append(note)
        log.error(note)
        self.environment.process_exit_code = exit_codes.REFUSED
        self.walk.stop(note, mark_next=True)
        self._changed.set()

    def on_telemetry(self, samples: list[Sample]) -> None:
        for sink in self.rows.sinks:
            sink.write_telemetry(samples)

    # -- the shape --------------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        """The shape walked every tier (or the engine was gone): Locust stops the test."""
        return self.walk.machine.state is DONE

    @property
    def stopping(self) -> bool:
        """The run stops (a stop, a worker's refusal, a full disk): no further tier starts."""
        return bool(self.refusals) or self.gave_up_on_disk or self.ended

    @property
    def current(self) -> PhaseProgress | None:
        """The tier running."""
        return self.book.current

    def tick(self) -> tuple[int, float] | None:
        """Users and spawn rate for now; None when the campaign is over. Answers once they differ from
        the last answer, or after TICK_WAIT_S."""
        asked = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= self._disk_watched + DISK_RETRY_S:
                self._disk_watched = now
                self._watch_disk()
            answer = self.walk.tick(now)
            if answer != self._answered or now - asked >= TICK_WAIT_S:
                self._answered = answer
                return answer
            self._changed.wait(TICK_POLL_S)
            self._changed.clear()

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
        self.walk.stop("run stopped: results folder not writable")
        if not self.walks_tiers:  # a plain run: no shape to end it
            gevent.spawn(runner_of(self.environment).quit)

    # -- what the campaign shows ------------------------------------------------------------------
    def tiers(self) -> list[PhaseProgress]:
        """Every tier's progress in order: those run or running, then those still to run."""
        return [*self.book.progress.values(), *(PhaseProgress(tier) for tier in self.walk.waiting())]

    @property
    def phases(self) -> list[Phase]:
        """The phases run, running and planned (a search plans one probe at a time)."""
        return [progress.phase for progress in self.tiers()]

    def phase_message(self, with_scenario: bool) -> PhaseMessage:
        current = self.book.current
        return PhaseMessage(
            run_id=self.run_id,
            session=self.session,
            scenario=self.scenario.to_wire() if with_scenario else None,
            phase=current.phase if current is not None else None,
            # one tier start for every worker: a request's warmup is judged from it (Load.warmup)
            phase_started_wall=current.started_wall if current is not None else None,
        )

    def broadcast(self) -> None:
        """Tell every worker the current phase (before the shape spawns its users)."""
        send(runner_of(self.environment), self.phase_message(with_scenario=True))

    def progress_line(self) -> str:
        current = self.book.current
        if current is None:
            wait = self.walk.engine_wait
            if self.walk.machine.state is HOLDING and wait is not None:
                return f"{wait.line(time.monotonic())}, {self.results.record_count} records"
            to_run = sum(1 for tier in self.walk.waiting() if tier.phase.attempt == 0)
            done = self.plan.tier_count - to_run
            return f"between tiers: {done}/{self.plan.tier_count} tiers done, {self.results.record_count} records"
        tier, phase = current.tier, current.phase
        elapsed = time.monotonic() - current.started
        return (
            f"tier {self.plan.label(phase)} {phase.target} @ {tier.load_label}: "
            f"{tier.progress_text(current, elapsed)}"
        )

    # -- the end ----------------------------------------------------------------------------------
    def end(self) -> None:
        """Locust stopped the test: mark a tier cut short by the stop as incomplete."""
        self.ended = True
        if self.book.current is not None:
            self.walk.end_tier(complete=False, note=STOPPED_NOTE)

    def close(self) -> None:
        """The run is over: a tier cut short is marked, every sink writes what it holds. A tier left
        incomplete makes the exit code TIER_INCOMPLETE where no other code says more."""
        self.closed = True
        self.end()
        if self.walk.machine.state is SETTLING:  # the run stopped in the pause after a probe
            self.walk.settle()
        incomplete = self.book.incomplete(STOPPED_NOTE)
        if incomplete:
            log.warning(
                "%d tiers incomplete: %s",
                len(incomplete),
                "; ".join(f"{self.plan.label(p.phase)} {p.phase.target}: {p.end_reason}" for p in incomplete),
            )
            if self.environment.process_exit_code is None:
                self.environment.process_exit_code = exit_codes.TIER_INCOMPLETE
        for sink in self.rows.sinks:
            sink.close()


class TierWalk:
    """What the load shape sees of a campaign: its state (run/campaign_state.py), moved by the tier
    running and by the planner's steps (run/plan.py), which it sends each ended tier's Outcome."""

    def __init__(self, campaign: Campaign) -> None:
        self.campaign = campaign
        self.book = campaign.book
        self.machine = CampaignStateMachine()
        self._steps = campaign.plan.steps()
        self.engine_wait: EngineWait | None = None
        self._outcome = Outcome()  # the ended probe's, until it is judged
        first = self._advance(None)
        assert not isinstance(first, Hold), "a plan holds only after a tier"
        self.next: Tier | None = first  # the tier that starts once the pause is over

    def tick(self, now: float) -> tuple[int, float] | None:
        """The users and spawn rate for now, None once the campaign is over."""
        machine = self.machine
        if machine.state is RUNNING:
            users = self._tick_running(now)
            if users is not None:
                return users
        if machine.state in (PAUSING, HOLDING) and machine.waiting(now):
            return IDLE
        if machine.state is HOLDING:
            if self._engine_gone(now):
                machine.move(DONE)
                return None
            if machine.state is HOLDING:
                return IDLE
        if machine.state is SETTLING:
            runner = self.campaign.environment.runner
            ended = self.book.judging.ended_monotonic if self.book.judging is not None else 0.0
            if (runner is not None and runner.user_count > 0) or now < ended + FINAL_RECORDS_WAIT_S:
                return IDLE  # its users' last records are on their way
            self.settle()
        if machine.state is PAUSING and self.next is None:
            self._start_draining(now)
        if machine.state is DRAINING:
            results = self.campaign.results
            if self._draining(now) or (results.held_record_count and not self.campaign.gave_up_on_disk):
                return IDLE
            machine.move(DONE)
            return None
        if machine.state is not PAUSING:
            return IDLE
        runner = self.campaign.environment.runner
        if (runner is not None and runner.user_count > 0 and machine.after_tier) or self.next is None:
            return IDLE  # wait for the previous tier's users to be gone
        progress = self.start(self.next)
        return progress.tier.users, progress.tier.spawn_rate

    def waiting(self) -> list[Tier]:
        """The tiers still to run, as planned now."""
        return [*([self.next] if self.next is not None else []), *self.campaign.plan.ahead()]

    def _tick_running(self, now: float) -> tuple[int, float] | None:
        """The tier running: its users and spawn rate, or None once it ended (done, or its time cap)."""
        current = self.book.current
        assert current is not None
        self.campaign.workers.watch(current)
        tier = current.tier
        held, _ = self.campaign.results.unwritten_of(tier.phase.target, tier.phase.tier_index)
        done = tier.done(current, now, self.campaign.workers.gone)
        if done and held and not self.campaign.gave_up_on_disk:
            return tier.users, tier.spawn_rate  # its users are idle; its records wait for space
        if done:
            self.end_tier(complete=True, note="")
        elif now - current.started > tier.time_cap_s:
            self.end_tier(complete=False, note=f"time cap {tier.time_cap_s:g} s reached")
        else:
            return tier.users, tier.spawn_rate
        return None

    def start(self, tier: Tier) -> PhaseProgress:
        campaign = self.campaign
        self.next = None
        started = tier.started(campaign.workers.dispatchers())
        progress = self.book.start(started, campaign.scenario.load.warmup_requests or 0)
        self.machine.move(RUNNING)
        campaign.broadcast()
        campaign.rows.write_phase("start", progress)
        log.info("tier %s start: %s", campaign.plan.label(started.phase), started.start_text())
        return progress

    def end_tier(self, complete: bool, note: str) -> None:
        """The tier running ends: judged for an outage or a refusal, its rows written; then the next step."""
        campaign, progress = self.campaign, self.book.current
        assert progress is not None
        progress.ended_wall, progress.ended_monotonic = time.time(), time.monotonic()
        phase = progress.phase
        stopped = note == STOPPED_NOTE
        results = campaign.results
        held, lost_records = results.unwritten_of(phase.target, phase.tier_index)
        unwritten = (
            f"{held + lost_records} records not written ({results.unwritable_reason})"
            if held + lost_records
            else ""
        )
        backend = campaign.targets[phase.target].backend
        outage, refusal = (
            ("", "") if stopped else progress.judge_failures(backend.name, lambda: engine_answers(backend))
        )
        progress.refusal = refusal
        refused = f"refused: {refusal}" if refusal else ""
        progress.complete = complete and not outage and not refusal and not unwritten
        progress.end_reason = "; ".join(part for part in (refused, outage, note, unwritten) if part)
        progress.note = progress.compose_note()
        self.book.current = None
        campaign.broadcast()
        campaign.rows.write_phase("end", progress)
        campaign.workers.tier_ended()
        self._log_end(progress)
        if campaign.rows.live:
            campaign.rows.write_tier_summary(progress)
        if refusal:
            self._refused_target(progress, backend)
        self.machine.after_tier = True
        self._outcome = Outcome(outage=bool(outage), refused=bool(refusal), stopped=campaign.stopping)
        if progress.tier.judged and not stopped:
            self.book.judging = progress
            self.machine.move(SETTLING)  # judged once its last records are in
            return
        progress.tier_records = []
        self._follow(self._outcome, progress)

    def _log_end(self, progress: PhaseProgress) -> None:
        phase, label = progress.phase, self.campaign.plan.label(progress.phase)
        log.info(
            "tier %s %s: %s at %s, %d/%d iterations, %d requests, %d errors%s",
            label,
            "done" if progress.complete else "INCOMPLETE",
            phase.target,
            progress.tier.load_label,
            progress.iterations_done,
            progress.iterations_target,
            progress.records,
            progress.errors,
            f" ({progress.note})" if progress.note else "",
        )
        for warning in (progress.saturation, progress.tier.flags(progress), progress.all_warmup):
            if warning:
                log.warning("tier %s: %s", label, warning)

    def settle(self) -> None:
        """The probe that ended has its last records: the planner takes its verdict and plans what follows;
        run.json keeps the search so far."""
        campaign, progress = self.campaign, self.book.judging
        assert progress is not None
        label = campaign.plan.label(progress.phase)
        outcome = replace(
            self._outcome, stopped=campaign.stopping, verdict=lambda: campaign.rows.verdict(progress, label)
        )
        self._follow(outcome, progress)
        self.book.judging = None
        progress.tier_records = []
        search = campaign.scenario.load.search
        assert search is not None
        kinds = {name: target.kind_label for name, target in campaign.targets.items()}
        campaign.results.meta["search"] = search_summary(search, campaign.plan, kinds)
        campaign.results.write_meta()

    def _advance(self, outcome: Outcome | None) -> Step | None:
        try:
            return self._steps.send(outcome)
        except StopIteration:
            return None

    def _follow(self, outcome: Outcome, progress: PhaseProgress) -> None:
        """Send the planner how the tier ended and go where it says: pause before the next tier, hold for
        the engine, or drain (no pause: no tier follows)."""
        pause_until = progress.ended_monotonic + self.campaign.scenario.load.pause_s
        step = self._advance(outcome)
        if isinstance(step, Hold):
            target = self.campaign.targets[step.after.phase.target]
            self.engine_wait = EngineWait.start(step.after, target, progress.ended_monotonic, self.campaign)
            self.next = step.then  # not started before the engine answers: it shows among the tiers waiting
            self.machine.move(HOLDING, pause_until)
        elif step is None:
            self._start_draining(time.monotonic())
        else:
            self.next = step
            self.machine.move(PAUSING, pause_until)

    def _engine_gone(self, now: float) -> bool:
        """Probe the backend held for; once it answers, the plan goes on. True once the wait is over
        without an answer (the campaign stops, exit code ENGINE_GONE)."""
        wait = self.engine_wait
        assert wait is not None
        answered = wait.poll(now)
        if answered:
            self.engine_wait = None
            step = self._advance(None)
            assert not isinstance(step, Hold)
            self.next = step
            self.machine.move(PAUSING, self.machine.until)
            return False
        if answered is None:
            return False
        self.campaign.environment.process_exit_code = exit_codes.ENGINE_GONE
        return True

    def _refused_target(self, progress: PhaseProgress, backend: Backend) -> None:
        """The engine refused the tier's requests: the target's tiers still to run are skipped (another
        attempt would be refused the same way), the run will exit ENGINE_REFUSED, and its last line and
        run.json's `refused` name the backend, the message and what to change."""
        campaign, phase = self.campaign, progress.phase
        skipped = [t.phase for t in campaign.plan.ahead() if t.phase.target == phase.target]
        (status, _), _ = progress.failed_replies.most_common(1)[0]
        advice = refusal_advice(progress.refusal, status)
        failed, sent = progress.failed_and_sent
        campaign.results.meta.setdefault("refused", []).append(
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
        campaign.results.write_meta()
        label = campaign.plan.label(phase)
        if skipped:
            log.warning(
                "target %s: %d more tiers skipped: the engine refused tier %s",
                phase.target,
                len(skipped),
                label,
            )
        line = (
            f"backend {backend.name}: the engine refused {failed} of {sent} requests of tier "
            f"{label} ({phase.target}): {progress.refusal!r} — {advice}"
        )
        log.error(line)
        campaign.final_lines.append(line)
        campaign.environment.process_exit_code = exit_codes.ENGINE_REFUSED

    def stop(self, note: str, mark_next: bool = False) -> None:
        """No further tier starts (a worker refused the campaign, the disk is full): the tier running ends
        incomplete with `note` (`mark_next`: between tiers, the next starts so that its row carries the
        note), then drain and stop."""
        if self.book.current is None and mark_next:
            if self.machine.state is HOLDING:  # the stop ends the campaign: no engine to wait for
                self.engine_wait = None
                step = self._advance(None)
                assert not isinstance(step, Hold)
                self.next = step
                self.machine.move(PAUSING, self.machine.until)
            if self.machine.state is not PAUSING or self.next is None:
                return
            self.start(self.next)
        if self.book.current is not None:
            self.end_tier(complete=False, note=note)
        self.next = None
        if self.machine.state in (PAUSING, HOLDING):
            self._start_draining(time.monotonic())

    def _start_draining(self, now: float) -> None:
        """The last tier ended: hold at 0 users while the workers stop theirs (--stop-timeout and a margin)."""
        options = self.campaign.environment.parsed_options
        stop_timeout = float(getattr(options, "stop_timeout", 0) or 0)
        self.engine_wait = None
        self.next = None
        self.machine.move(DRAINING, until=now + stop_timeout + DRAIN_MARGIN_S)

    def _draining(self, now: float) -> bool:
        """After the last tier: whether to hold at 0 users while the workers stop theirs, so that the
        records of requests still in flight reach the results folder before the master quits."""
        runner = self.campaign.environment.runner
        if not isinstance(runner, MasterRunner):
            return False  # a local runner's records arrive in this process as its users stop
        machine = self.machine
        if runner.user_count > 0 and machine.waiting(now):
            return True
        if machine.records_until is None:
            machine.records_until = now + FINAL_RECORDS_WAIT_S
        return now < machine.records_until


@dataclass
class EngineWait:
    """After a tier that measured an outage: the backend the campaign waits for, until when (monotonic)."""

    backend: Backend
    after: Phase
    since: float
    deadline: float
    wait_s: float
    tier_count: int
    next_probe: float = 0.0

    @classmethod
    def start(cls, tier: Tier, target: Target, since: float, campaign: Campaign) -> EngineWait:
        """Hold before the next tier until the backend answers (the tier runs once more if it was its
        first attempt)."""
        wait_s = campaign.scenario.load.engine_wait_s
        phase = tier.phase
        log.warning(
            "tier %s: backend %s had an outage; holding at 0 users, probing it every %g s for up to %g s%s",
            campaign.plan.label(phase),
            target.backend.name,
            ENGINE_PROBE_INTERVAL_S,
            wait_s,
            ", then the tier runs again" if phase.attempt == 0 else "",
        )
        return cls(target.backend, phase, since, since + wait_s, wait_s, campaign.plan.tier_count)

    def poll(self, now: float) -> bool | None:
        """Probe the backend (every ENGINE_PROBE_INTERVAL_S): True once it answers, False once the wait
        is over without an answer, None while waiting."""
        if now < self.next_probe:
            return None
        backend = self.backend
        if engine_answers(backend):
            log.info("backend %s answers again after %.0f s", backend.name, now - self.since)
            return True
        self.next_probe = time.monotonic() + ENGINE_PROBE_INTERVAL_S
        if now < self.deadline:
            return None
        log.error(
            "backend %s (%s) did not answer for %g s (load.engine_wait_s) after tier %d/%d: the campaign stops",
            backend.name,
            backend.url,
            self.wait_s,
            self.after.phase_id + 1,
            self.tier_count,
        )
        return False

    def line(self, now: float) -> str:
        return f"waiting for backend {self.backend.name} ({now - self.since:.0f} of {self.wait_s:g} s)"


class WorkerWatch:
    """The workers as the master sees them mid-tier: those lost (missing heartbeat, or quit during the
    run); the tier running counts what they took and takes up their part (Tier.workers_lost)."""

    def __init__(self, campaign: Campaign) -> None:
        self.campaign = campaign
        self.names: dict[str, str] = {}  # Locust client id -> our worker id
        self._users_seen: dict[str, int] = {}  # client id -> most users it ran in the current phase
        self.gone: set[str] = set()  # workers lost (missing heartbeat) or quit during the run

    def watch(self, current: PhaseProgress) -> None:
        runner = self.campaign.environment.runner
        if not isinstance(runner, MasterRunner):
            return
        present = {c.id: c for c in runner.clients.all if c.state != STATE_MISSING}
        for client_id, client in present.items():
            self._users_seen[client_id] = max(self._users_seen.get(client_id, 0), client.user_count)
        lost_now = [cid for cid in self._users_seen if cid not in present and cid not in self.gone]
        self.gone.update(lost_now)
        if lost_now:
            current.tier.workers_lost(current, lost_now, self)

    def name(self, client_id: str) -> str:
        return self.names.get(client_id, client_id)

    def users_seen(self, client_id: str) -> int:
        return self._users_seen[client_id]

    def label(self, phase: Phase) -> str:
        return self.campaign.plan.label(phase)

    def respawn(self, tier: Tier) -> None:
        runner = self.campaign.environment.runner
        assert isinstance(runner, MasterRunner)
        present = [c for c in runner.clients.all if c.state != STATE_MISSING]
        if present and runner.state in (STATE_RUNNING, STATE_SPAWNING):
            # Locust re-spreads users itself when a worker quits, but for a missing one only
            # with --enable-rebalancing: ask for the tier's users again either way.
            runner.start(tier.users, tier.spawn_rate)

    def broadcast(self) -> None:
        self.campaign.broadcast()

    def tier_ended(self) -> None:
        self._users_seen = {cid: 0 for cid in self._users_seen if cid not in self.gone}

    def dispatchers(self) -> tuple[str, ...]:
        """The workers that would split a rate tier starting now: every one connected and not missing."""
        runner = self.campaign.environment.runner
        if not isinstance(runner, MasterRunner):
            return (LOCAL_CLIENT_ID,)
        return tuple(sorted(c.id for c in runner.clients.all if c.state != STATE_MISSING))


class TierRows:
    """What the sinks hear of each tier: its phases.csv row at its start and end, its summary row (to
    the sinks read live), and a probe's verdict from that summary."""

    def __init__(self, scenario: Scenario, run_id: str, results: ResultsWriter, sinks: list[Sink]) -> None:
        self.scenario = scenario
        self.run_id = run_id
        self.results = results
        self.sinks = sinks
        self.live = any(sink.live for sink in sinks)  # someone wants a summary row per tier
        self.targets = {t.name: t for t in scenario.targets}

    def row(self, progress: PhaseProgress) -> dict[str, Any]:
        phase = progress.phase
        return {
            **phase.labels(self.targets[phase.target]).as_row(),
            "start_wall": progress.started_wall,
            "end_wall": progress.ended_wall if progress.ended_wall is not None else "",
            "iterations_target": progress.iterations_target,
            "iterations_done": progress.iterations_done,
            **progress.tier.row(progress),
            "complete": progress.complete,
            "note": progress.note,
        }

    def write_phase(self, event: PhaseEvent, progress: PhaseProgress) -> None:
        row = self.row(progress)
        for sink in self.sinks:
            sink.write_phase(event, row)

    def write_tier_summary(self, progress: PhaseProgress) -> None:
        """The finished tier's summary row, from the records it received, to the sinks read live."""
        for row in self.summary(progress).to_dict("records"):
            for sink in self.sinks:
                sink.write_tier(row)

    def summary(self, progress: PhaseProgress) -> pd.DataFrame:
        """The tier's summary rows (a mix's personas beside its whole tier) from the records it received."""
        import pandas as pd

        from grill_locust.record import RECORD_COLUMNS
        from grill_locust.report import summarize
        from grill_locust.report.load import RunData

        records = pd.DataFrame(progress.tier_records, columns=list(RECORD_COLUMNS))
        phases = pd.DataFrame([self.row(progress)])
        judged_by = {c.name: self.scenario.slo_of(c.name) for c in self.scenario.conversations}
        meta = {"run_id": self.run_id, "warmup_requests": self.scenario.load.warmup_requests}
        run = RunData(records, phases, None, meta)
        return summarize(run, self.scenario.slo, judged_by, intervals=False)

    def verdict(self, progress: PhaseProgress, label: str) -> Probe:
        """A probe's verdict by the run's SLO, as `grill report` judges tiers."""
        from grill_locust.report.capacity import conversation_slos_of_run, slo_of_run
        from grill_locust.verdicts import tier_misses

        slo = slo_of_run(self.results.meta)
        misses = tier_misses(self.summary(progress), slo, conversation_slos_of_run(self.results.meta, slo))
        persona, metric = misses[0] if misses else ("", "")
        tier = progress.tier
        log.info(
            "probe %s: %s at %s %s",
            label,
            tier.phase.target,
            tier.load_label,
            f"misses the SLO on {metric}{f' ({persona})' if persona else ''}" if misses else "meets the SLO",
        )
        return Probe(tier.load, not misses, metric, persona)


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

"""The open-loop dispatcher: one Locust user per worker sends that worker's share of a rate tier, or of
a trace replay.

Sends leave at the times of a schedule (run/arrivals.py: an arrival process; or a trace's rows, row i
on dispatcher i mod the dispatchers; re-split over the remaining dispatchers when a worker is lost
mid-tier), whatever the engine's answers do; each plays one iteration of the target's
conversation in a greenlet of its own (a session's turns closed-loop inside it), with GrillUser's send
and record code. At most `max_in_flight` (this worker's part) play at once: a send past it waits for a
free slot, late, and is counted, never dropped.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import gevent
import gevent.lock
import gevent.pool
from locust import task

from grill_locust.client import EngineClient
from grill_locust.record import ScheduledSend
from grill_locust.run.arrivals import Send, arrival_share, trace_share
from grill_locust.run.phase import Phase, replays_trace
from grill_locust.run.user import IDLE_POLL_S, GrillUser
from grill_locust.scenario import Scenario, Target
from grill_locust.workload.trace import conversation_trace

# how often a dispatcher waiting for its next send looks for a re-split of its tier (a worker lost): well
# within the lead the master gives a re-split (campaign.RESPLIT_LEAD_S), so no send of it leaves late
RESPLIT_POLL_S = 0.05


class OpenLoopUser(GrillUser):
    """One per worker in an open-loop tier: dispatches this worker's share of the tier's sends."""

    def on_start(self) -> None:
        super().on_start()
        self._idle_clients: list[EngineClient] = []  # connections of sends that ended, for the next ones

    def on_stop(self) -> None:
        while self._idle_clients:
            self._idle_clients.pop().close()
        super().on_stop()

    @task
    def dispatch_tier(self) -> None:
        worker = self.worker_state
        phase, scenario = worker.phase, worker.scenario
        if (
            phase is None
            or scenario is None
            or worker.client_id not in phase.dispatchers
            or phase.key == worker.dispatched_phase_key  # a user Locust starts here after a worker quit
        ):
            gevent.sleep(IDLE_POLL_S)
            return
        worker.dispatched_phase_key = phase.key
        target = worker.target(phase.target)
        max_in_flight = max(1, scenario.load.max_in_flight // len(phase.dispatchers))
        self.dispatch(target, scenario, phase, max_in_flight)

    def schedule(self, target: Target, scenario: Scenario, phase: Phase) -> Iterable[Send]:
        """This worker's sends in the phase as its splits now stand (run/arrivals.py)."""
        client_id = self.worker_state.client_id
        if replays_trace(target):
            return trace_share(conversation_trace(target.conversation), client_id, phase.splits)
        assert phase.tier_rate is not None and phase.duration_s is not None
        load = scenario.load
        # the same arrivals at every run of the scenario, each worker's its own
        seed_key = f"{phase.target}/{phase.tier_index}/{phase.attempt}"
        return arrival_share(
            load.arrival,
            phase.tier_rate,
            phase.duration_s,
            load.burstiness,
            seed_key,
            client_id,
            phase.splits,
        )

    def dispatch(self, target: Target, scenario: Scenario, phase: Phase, max_in_flight: int) -> None:
        """Send at each scheduled time up to the phase's `duration_s`, then let the sends still playing
        finish (their requests are cooldown) and tell the master how many there were. A re-split (a
        worker lost) is heard within RESPLIT_POLL_S: the sends of the new schedule not made yet follow
        (heard after its time, those already due leave at once, late, as their lag shows)."""
        duration_s = phase.duration_s
        assert duration_s is not None, "a rate tier sends for a time"
        start, start_wall = time.perf_counter(), time.time()
        end_wall = start_wall + duration_s
        slots = gevent.lock.BoundedSemaphore(max_in_flight)
        playing = gevent.pool.Group()
        made: set[int] = set()  # the iterations sent: a new schedule skips them
        waited = 0
        schedule = iter(self.schedule(target, scenario, phase))
        try:
            send = next(schedule, None)
            while send is not None and send.at_s <= duration_s:  # a trace's last row leaves at duration_s
                heard = self.worker_state.phase
                if heard is not None and heard.key == phase.key and heard.resplits != phase.resplits:
                    phase = heard
                    schedule = (s for s in self.schedule(target, scenario, phase) if s.iteration not in made)
                    send = next(schedule, None)
                    continue
                wait_s = start + send.at_s - time.perf_counter()
                if wait_s > 0:
                    gevent.sleep(min(wait_s, RESPLIT_POLL_S))
                    continue
                if not slots.acquire(blocking=False):
                    waited += 1
                    slots.acquire()
                scheduled = ScheduledSend(start_wall + send.at_s, end_wall)
                playing.spawn(self._play, target, phase, send.iteration, scheduled, slots)
                made.add(send.iteration)
                send = next(schedule, None)
            gevent.sleep(max(0.0, start + duration_s - time.perf_counter()))
            playing.join()
        except BaseException:  # the user stopped (GreenletExit): no send outlives it
            playing.kill()
            raise
        finally:
            self.worker_state.dispatch_done(phase.key, len(made), waited)

    def _play(
        self,
        target: Target,
        phase: Phase,
        iteration: int,
        send: ScheduledSend,
        slots: gevent.lock.BoundedSemaphore,
    ) -> None:
        sent = target.for_developer(iteration) if target.mix else target  # a mix's persona, by send
        # each send on a connection of its own, as many as play at once (one target per tier)
        client = self._idle_clients.pop() if self._idle_clients else EngineClient(target.backend)
        try:
            self.run_conversation(sent, phase, iteration, send, client)
        except BaseException:
            client.close()
            raise
        else:
            self._idle_clients.append(client)
        finally:
            slots.release()
            self.worker_state.iteration_done(phase.key)

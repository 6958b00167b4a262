"""The open-loop dispatcher: one Locust user per worker sends that worker's share of a rate tier, or of
a trace replay.

Sends leave at the times of a schedule (run/arrivals.py: an arrival process; or a trace's rows, row i
on dispatcher i mod the dispatchers), whatever the engine's answers do; each plays one iteration of the target's
conversation in a greenlet of its own (a session's turns closed-loop inside it), with GrillUser's send
and record code. At most `max_in_flight` (this worker's part) play at once: a send past it waits for a
free slot, late, and is counted, never dropped.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterable

import gevent
import gevent.lock
import gevent.pool
from locust import task

from grill_locust.client import EngineClient
from grill_locust.config import Target
from grill_locust.run.arrivals import ScheduledSend, Send, arrival_schedule, trace_share
from grill_locust.run.phase import Phase, replays_trace
from grill_locust.run.user import IDLE_POLL_S, GrillUser
from grill_locust.workload.trace import conversation_trace


class OpenLoopUser(GrillUser):
    """One per worker in an open-loop tier: dispatches this worker's share of the tier's sends."""

    def on_start(self) -> None:
        super().on_start()
        self._dispatched_key: str | None = None  # the phase whose share this user has sent
        self._idle_clients: list[EngineClient] = []  # connections of sends that ended, for the next ones

    def on_stop(self) -> None:
        while self._idle_clients:
            self._idle_clients.pop().close()
        super().on_stop()

    @task
    def dispatch_tier(self) -> None:
        grill = self.grill
        phase, scenario = grill.phase, grill.scenario
        share = phase.rate_share(grill.client_id) if phase is not None else None
        if phase is None or scenario is None or share is None or phase.key == self._dispatched_key:
            gevent.sleep(IDLE_POLL_S)
            return
        self._dispatched_key = phase.key
        rate, place = share
        target, load, dispatchers = grill.target(phase.target), scenario.load, len(phase.dispatchers)
        duration_s = phase.duration_s
        assert duration_s is not None, "a rate tier sends for a time"
        schedule: Iterable[Send]
        if replays_trace(target):
            schedule = trace_share(conversation_trace(target.conversation), place, dispatchers)
        else:
            # the same arrivals at every run of the scenario, each worker's its own
            seed = zlib.crc32(f"{phase.target}/{phase.tier_index}/{phase.attempt}/{place}".encode())
            schedule = arrival_schedule(load.arrival, rate, duration_s, load.burstiness, seed)
        max_in_flight = max(1, load.max_in_flight // dispatchers)
        self.dispatch(target, phase, schedule, duration_s, max_in_flight)

    def dispatch(
        self, target: Target, phase: Phase, schedule: Iterable[Send], duration_s: float, max_in_flight: int
    ) -> None:
        """Send at each scheduled time up to `duration_s`, then let the sends still playing finish (their
        requests are cooldown) and tell the master how many there were."""
        start, start_wall = time.perf_counter(), time.time()
        end_wall = start_wall + duration_s
        slots = gevent.lock.BoundedSemaphore(max_in_flight)
        playing = gevent.pool.Group()
        sends = waited = 0
        try:
            for send in schedule:
                if send.at_s > duration_s:  # a trace's last row leaves at duration_s
                    break
                wait_s = start + send.at_s - time.perf_counter()
                if wait_s > 0:
                    gevent.sleep(wait_s)
                if not slots.acquire(blocking=False):
                    waited += 1
                    slots.acquire()
                scheduled = ScheduledSend(start_wall + send.at_s, end_wall)
                playing.spawn(self._play, target, phase, send.iteration, scheduled, slots)
                sends += 1
            gevent.sleep(max(0.0, start + duration_s - time.perf_counter()))
            playing.join()
        except BaseException:  # the user stopped (GreenletExit): no send outlives it
            playing.kill()
            raise
        finally:
            self.grill.dispatch_done(phase.key, sends, waited)

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
            self.grill.iteration_done(phase.key)

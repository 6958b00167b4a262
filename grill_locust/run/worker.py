"""Worker side of a run: the current phase, and records shipped to the master in batches.

Runs in every process that runs users (a worker, or the local runner, which is master and worker at
once). Records are never sent one message per record: ZeroMQ's send queue would fill and stall the
users. A batch leaves at least every FLUSH_INTERVAL_S and on stop.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import time
import uuid
from collections import Counter
from typing import TYPE_CHECKING, Any

import gevent
import gevent.event
import gevent.lock
from locust.runners import Runner, WorkerRunner

from grill_locust.run import exit_codes
from grill_locust.run.phase import Phase
from grill_locust.run.selfcheck import SelfCheck
from grill_locust.workload import Workload, backend_token_counter, build_workload
from grill_locust.workload.corpus import stdlib_corpus

if TYPE_CHECKING:
    from locust.env import Environment

    from grill_locust.scenario import Scenario, Target
    from grill_locust.sinks import Sink

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.5
# worker -> master: {"worker", "records", "iterations": {Phase.key: n}, "dispatched": {Phase.key: Dispatched}}
MSG_RECORDS = "grill_records"
# master -> workers: {"run_id", "scenario": wire dict or None, "phase": wire dict or None,
# "phase_started_wall": the master's time.time() at the phase's start, or None}
MSG_PHASE = "grill_phase"
MSG_HELLO = "grill_hello"  # worker -> master: ask for the scenario and current phase
MSG_REFUSED = "grill_refused"  # worker -> master: {"worker", "reason"}: it cannot run the scenario
# A user's developer index in its tier is the master's to give (DeveloperSeats), whatever worker runs it:
MSG_CLAIM = "grill_claim"  # worker -> master: {"phase": Phase.key, "user"}: its developer index, please
MSG_DEVELOPER = "grill_developer"  # master -> worker: {"phase", "user", "developer": int, or None}
MSG_RELEASE = "grill_release"  # worker -> master: {"phase", "user"}: the user stopped
LOCAL_CLIENT_ID = "local"  # a local runner's name among an open-loop phase's dispatchers
CLAIM_RETRY_S = 5.0  # a claim unanswered this long is sent again (claims are idempotent)
# A worker that hears no heartbeat from its master for this long (killed, or cut off) stops its users
# and quits, as Locust's own check does after its MASTER_HEARTBEAT_TIMEOUT of 60 s: load sent for a
# master that is gone is measured by nobody, and would skew a resumed run's engine. Longer than a short
# network cut (the master counts a worker missing after ~4 s and takes what it sends when it returns).
MASTER_SILENCE_S = 20.0


class WorkerState:
    """What the users of this process share: scenario, phase, the outgoing record buffer, self-check."""

    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        runner = environment.runner
        # this process's name in an open-loop phase's dispatchers
        self.client_id = runner.client_id if isinstance(runner, WorkerRunner) else LOCAL_CLIENT_ID
        if isinstance(runner, WorkerRunner):
            self.worker_id = f"{socket.gethostname()}-w{runner.worker_index}-{runner.client_id[-6:]}"
        else:
            self.worker_id = f"{socket.gethostname()}-local"
        self.run_id = ""
        self.session = os.urandom(4).hex()  # the campaign's, once its first phase message arrives
        self.scenario: Scenario | None = None
        self.refusal = ""  # why this worker cannot run the master's scenario (a secret it lacks)
        self.phase: Phase | None = None
        # the master's start of each tier this worker ran (a request finishing after its tier is judged too)
        self._tier_started_wall: dict[tuple[str, str, int, int], float] = {}
        self._targets: dict[str, Target] = {}
        self._workloads: dict[tuple[str, str], Workload] = {}
        self._workload_lock = gevent.lock.Semaphore()
        self.in_flight = 0  # requests of this process's users now on the wire
        self.stopping = False  # Locust began stopping the users (test_stopping)
        self.selfcheck = SelfCheck(busy=lambda: self.in_flight > 0 and not self.stopping)
        self._records: list[dict[str, Any]] = []
        self._iterations: Counter[str] = Counter()
        self._dispatched: dict[str, dict[str, int]] = {}
        # the open-loop phase (Phase.key) whose share a user of this process took: one dispatcher a worker
        self.dispatched_phase_key: str | None = None
        self._record_seq = 0
        # unique across workers, processes and resumed runs of the same results folder
        self._record_prefix = f"{self.worker_id}-{uuid.uuid4().hex[:8]}"
        self._user_seq = 0
        self._claims: dict[tuple[str, str], gevent.event.AsyncResult] = {}
        self._flusher: gevent.Greenlet | None = None
        self.sinks: list[Sink] = []  # where this process's records go besides the master (InfluxDB)

    # -- called by users -------------------------------------------------------------------------
    def next_record_id(self) -> str:
        self._record_seq += 1
        return f"{self._record_prefix}-{self._record_seq}"

    def next_user_index(self) -> int:
        self._user_seq += 1
        return self._user_seq - 1

    def user_key(self, user_index: int) -> str:
        """A user of this process, unique in the run."""
        return f"{self._record_prefix}-u{user_index}"

    def developer_for(self, phase_key: str, user: str) -> int | None:
        """The user's 0-based developer index in this phase's tier, from the master (None: the phase is
        not the master's, e.g. a killed master's): waits for the answer, asking again when it is late."""
        pending = self._claims.setdefault((phase_key, user), gevent.event.AsyncResult())
        try:
            while True:
                runner_of(self.environment).send_message(MSG_CLAIM, {"phase": phase_key, "user": user})
                try:
                    developer: int | None = pending.get(timeout=CLAIM_RETRY_S)
                    return developer
                except gevent.Timeout:
                    log.warning("no developer index from the master after %g s: asking again", CLAIM_RETRY_S)
        finally:
            self._claims.pop((phase_key, user), None)

    def on_developer_message(self, data: dict[str, Any]) -> None:
        pending = self._claims.get((data["phase"], data["user"]))
        if pending is not None:
            pending.set(data["developer"])

    def release_developer(self, phase_key: str, user: str) -> None:
        try:
            runner_of(self.environment).send_message(MSG_RELEASE, {"phase": phase_key, "user": user})
        except Exception:  # the master is gone: nobody holds the index any more
            log.debug("could not release a developer index", exc_info=True)

    def add_record(self, record: dict[str, Any]) -> None:
        self._records.append(record)

    def iteration_done(self, phase_key: str) -> None:
        self._iterations[phase_key] += 1

    def warmup(self, labels: dict[str, Any], wall_start: float, request_ordinal: int) -> bool | None:
        """Whether a request of the tier its labels name is warmup (Load.warmup), counted from the master's
        start of the tier; None where no warmup is configured or the tier has no start (a plain run)."""
        tier = (labels["session"], labels["target"], labels["tier_index"], labels["attempt"])
        started_wall = self._tier_started_wall.get(tier)
        if self.scenario is None or started_wall is None:
            return None
        return self.scenario.load.warmup(wall_start - started_wall, request_ordinal)

    def dispatch_done(self, phase_key: str, sends: int, waited: int) -> None:
        """This worker's dispatcher sent its share of an open-loop phase: `sends` in all, `waited` of them
        held back by max_in_flight. The master counts the tier complete once every share is recorded."""
        self._dispatched[phase_key] = {"sends": sends, "waited": waited}

    def target(self, name: str) -> Target:
        return self._targets[name]

    def workload_for(self, target: Target) -> Workload:
        """One workload per target and conversation (a mix has several), calibrated once against the
        backend's tokenizer (or its usage) for the target's model."""
        key = (target.name, target.conversation.name)
        workload = self._workloads.get(key)
        if workload is None:
            with self._workload_lock:  # the first users of a tier arrive together: calibrate once
                workload = self._workloads.get(key)
                if workload is None:
                    counter = backend_token_counter(target.backend, target.model.name)
                    workload = build_workload(target.conversation, target.model, counter)
                    self._workloads[key] = workload
        return workload

    # -- phase and scenario from the master ------------------------------------------------------
    def on_phase_message(self, data: dict[str, Any]) -> None:
        from grill_locust.config import ConfigError
        from grill_locust.scenario import Scenario

        if data.get("scenario") is not None and self.scenario is None:
            try:  # its secrets come from this process's environment
                self.set_scenario(Scenario.from_wire(data["scenario"]))
            except ConfigError as error:
                self.refuse(str(error))
                return
        self.run_id = data.get("run_id") or self.run_id
        self.session = data.get("session") or self.session
        phase = Phase.from_wire(data["phase"]) if data.get("phase") is not None else None
        if phase is not None and (self.phase is None or phase.phase_id != self.phase.phase_id):
            self.selfcheck.new_window()  # a tier's lag p99 is its own
        if phase is not None and data.get("phase_started_wall") is not None:
            tier = (phase.session, phase.target, phase.tier_index, phase.attempt)
            self._tier_started_wall[tier] = data["phase_started_wall"]
        self.phase = phase

    def refuse(self, reason: str) -> None:
        """Run none of the scenario, and tell the master why (its log and phases.csv say it)."""
        if reason != self.refusal:
            log.error("this worker cannot run the campaign: %s", reason)
        self.refusal = reason
        self.environment.process_exit_code = exit_codes.REFUSED
        runner_of(self.environment).send_message(MSG_REFUSED, {"worker": self.worker_id, "reason": reason})

    def set_scenario(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self._targets = {target.name: target for target in scenario.targets}

    # -- shipping --------------------------------------------------------------------------------
    def start(self) -> None:
        # Read the prompt corpus and calibrate every target's prompt sizes before users run: done under
        # load, each would hold the gevent hub for 50-300 ms, delay every stream, and show up as a
        # saturated load generator.
        stdlib_corpus().preload()
        for target in self.scenario.targets if self.scenario is not None else ():
            for sent in target.persona_targets():
                self.workload_for(sent)
        # Everything alive now (Locust, the corpus, the scenario) lives for the whole run: move it out of
        # the garbage collector's sight, or each full collection walks it and stalls every stream ~50 ms.
        gc.collect()
        gc.freeze()
        self.stopping = False
        self.selfcheck.new_window()
        self.selfcheck.start()
        if self._flusher is None:
            self._flusher = gevent.spawn(self._flush_loop)

    def stop(self) -> None:
        if self._flusher is not None:
            self._flusher.kill(block=True)
            self._flusher = None
        self.flush()

    def _flush_loop(self) -> None:
        while True:
            gevent.sleep(FLUSH_INTERVAL_S)
            try:
                self.flush()
            except Exception:  # a failed send must not end the loop: records stay buffered
                log.exception("could not ship records to the master; will retry")

    def flush(self) -> None:
        if not self._records and not self._iterations and not self._dispatched:
            return
        records, iterations, dispatched = self._records, self._iterations, self._dispatched
        self._records, self._iterations, self._dispatched = [], Counter(), {}
        message = {
            "worker": self.worker_id,
            "records": records,
            "iterations": dict(iterations),
            "dispatched": dispatched,
        }
        try:
            runner_of(self.environment).send_message(MSG_RECORDS, message)
        except Exception:
            self._records = records + self._records
            self._iterations.update(iterations)
            self._dispatched = {**dispatched, **self._dispatched}
            raise
        if records:
            for sink in self.sinks:
                sink.write_records(records)


def watch_master(runner: WorkerRunner) -> None:
    """Quit this worker once its master has been silent for MASTER_SILENCE_S (a greenlet for the run)."""
    while True:
        gevent.sleep(1.0)
        last = runner.last_heartbeat_timestamp
        if last and last < time.time() - MASTER_SILENCE_S:
            log.error(
                "no heartbeat from the master for %g s: this worker stops its users and quits",
                MASTER_SILENCE_S,
            )
            runner.quit()
            return


_forking = {"pid": 0}  # the process about to fork (set just before each fork)


def die_with_forking_parent() -> None:
    """Every process forked from here on (Locust's --processes workers) is killed when its parent dies,
    even by `kill -9`: Locust leaves them running, still sending load, with nobody to take their records."""
    from grill_locust.sim.process import die_with_parent

    def in_child() -> None:
        die_with_parent(signal.SIGKILL)
        if os.getppid() != _forking["pid"]:  # the parent died before the request took effect
            os._exit(1)

    os.register_at_fork(before=lambda: _forking.update(pid=os.getpid()), after_in_child=in_child)


def runner_of(environment: Environment) -> Runner:
    """The runner, which exists from Locust's `init` event on."""
    assert environment.runner is not None, "used before Locust created its runner"
    return environment.runner


def options_of(environment: Environment) -> Any:
    """The parsed command line (with grill-locust's options), which a Locust run always has."""
    assert environment.parsed_options is not None, "used outside a Locust command-line run"
    return environment.parsed_options

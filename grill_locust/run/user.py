"""Locust users: each one plays coding-assistant conversations against a target and records every request.

`CampaignUser` follows the phases a scenario's load shape broadcasts (k conversations per user per
tier, then idle). Its conversation's kind plays each iteration (workload/kinds/), sending every
request through the user (`send_chat`, `send_request`), which times and records it. `MultiTurnUser`, `SharedPrefixUser`, `ShortBaselineUser` and `UniquePromptsUser` work
as plain Locust users with `--host` and `--model`, with no scenario file (`-u/-r/-t` rule then).
"""

from __future__ import annotations

from collections import Counter
from typing import ClassVar

import gevent
from gevent import GreenletExit
from locust import User, constant, task

from grill_locust.client import EngineClient, StreamResult, request_for
from grill_locust.client.payloads import ChatMessage
from grill_locust.config import Model
from grill_locust.record import (
    CANCELLED,
    STATUS_ABANDONED,
    STATUS_OK,
    Measurement,
    RequestLabels,
    ScheduledSend,
    build_record,
    measure,
)
from grill_locust.run.phase import Phase, replays_trace
from grill_locust.run.state import run_state
from grill_locust.run.worker import WorkerState
from grill_locust.scenario import Scenario, Target
from grill_locust.workload.kinds import Iteration, KindTarget
from grill_locust.workload.kinds.autocomplete import shown

IDLE_POLL_S = 0.1  # how often an idle user looks for new work
STATUS_RATE_LIMITED = "http_429"
MAX_RETRY_AFTER_S = 30.0


class GrillUser(User):
    """Base user: one conversation at a time, every request streamed, timed and recorded."""

    abstract = True
    wait_time = constant(0)  # think time is the scenario's, applied between requests below

    def on_start(self) -> None:
        worker = run_state(self.environment).worker
        assert worker is not None, "a user runs only where init made the worker state"
        self.worker_state: WorkerState = worker
        self.user_index = self.worker_state.next_user_index()
        self.developer: int | None = None  # the index in its tier a campaign user gets from the master
        self._clients: dict[str, EngineClient] = {}
        # requests this user started per tier: its first warmup_requests_per_user of each are warmup
        self._started_in_tier: Counter[tuple[str, str, int, int]] = Counter()

    def on_stop(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def client_for(self, target: Target) -> EngineClient:
        backend = target.backend
        if backend.name not in self._clients:
            self._clients[backend.name] = EngineClient(backend)
        return self._clients[backend.name]

    def run_conversation(
        self,
        target: Target,
        phase: Phase,
        iteration: int,
        send: ScheduledSend | None = None,
        client: EngineClient | None = None,
    ) -> None:
        """Send one conversation turn by turn, carrying the real replies forward. An open-loop send gives
        the arrival it plays (its records carry its columns) and a connection of its own."""
        client = client or self.client_for(target)
        workload = self.worker_state.workload_for(target)
        # a tier run again after an outage sends new prompts: the engine may hold the first attempt's; a
        # trace's rows share the blocks their hash ids name whatever worker sends them
        user_key = (
            phase.prompt_key
            if replays_trace(target)
            else f"{phase.prompt_key}-{self.worker_state.worker_id}-u{self.user_index}"
        )
        script = workload.script(user_key, iteration, self.developer)
        labels = RequestLabels(
            tier=phase.labels(target),
            iteration=iteration,
            user_id=self.user_index,
            developer=self.developer,
            worker_id=self.worker_state.worker_id,
            conversation_id=script.conversation_id,
            send=send,
        )
        iteration_played = Iteration(script, phase.think_time_s, labels, client, send)
        target.conversation.workload_kind.play(self, target, iteration_played)

    def send_chat(
        self,
        target: KindTarget,
        messages: list[ChatMessage],
        labels: RequestLabels,
        turn: int,
        client: EngineClient,
        model: Model,
        tools: list[dict[str, object]] | None = None,
    ) -> tuple[StreamResult, Measurement] | None:
        """Send one chat-shaped request with `model`'s sampling settings; its result and measurement when
        it succeeded, else None."""
        path, payload = request_for(target.backend, model, messages, tools=tools)
        result, measurement = self.send_request(target, path, payload, labels, turn, client)
        return (result, measurement) if measurement.status == STATUS_OK else None

    def send_request(
        self,
        target: KindTarget,
        path: str,
        payload: dict[str, object],
        labels: RequestLabels,
        turn: int,
        client: EngineClient,
        abandon_at: float | None = None,
        budget_s: float | None = None,
    ) -> tuple[StreamResult, Measurement]:
        """Send one request, 429s retried as the backend allows (not one to abandon at a keystroke:
        an editor sends anew after the next pause), and record every attempt; the last one's result
        and measurement. With `budget_s`, the record says whether the completion was shown within it."""
        retries = 0
        while True:
            # the record id travels as X-Request-Id: engine logs and the simulator's truth join on it
            record_id = self.worker_state.next_record_id()
            ordinal = self._start_in_tier(labels)
            self.worker_state.in_flight += 1
            try:
                result = client.stream(path, payload, request_id=record_id, abandon_at=abandon_at)
            except GreenletExit:  # the user is stopped mid-request: record it as cut, then stop
                if client.last_result is not None:
                    cut = measure(client.last_result.raw)
                    self._record(labels, turn, record_id, cut, retries, request_ordinal=ordinal)
                raise
            finally:
                self.worker_state.in_flight -= 1
            measurement = measure(result.raw)
            shown_in_budget = None
            if budget_s is not None and measurement.status == STATUS_OK:
                e2e_s = measurement.e2e_s
                shown_in_budget = (
                    shown(result, measurement, abandon_at) and e2e_s is not None and e2e_s <= budget_s
                )
            self._record(
                labels, turn, record_id, measurement, retries, shown_in_budget, request_ordinal=ordinal
            )
            if (
                measurement.status != STATUS_RATE_LIMITED
                or retries >= target.backend.retries
                or abandon_at is not None
            ):
                break
            # opt-in 429 retries: every attempt stays a record, the next one counts its retries
            retries += 1
            gevent.sleep(min(MAX_RETRY_AFTER_S, result.retry_after_s or 1.0))
        return result, measurement

    def _start_in_tier(self, labels: RequestLabels) -> int:
        """Count a request this user starts in the tier its labels name: its 0-based place among them."""
        tier = labels.tier.tier_key
        self._started_in_tier[tier] += 1
        return self._started_in_tier[tier] - 1

    def _record(
        self,
        labels: RequestLabels,
        turn: int,
        record_id: str,
        measurement: Measurement,
        retries: int,
        shown_in_budget: bool | None = None,
        *,
        request_ordinal: int,  # the user's n-th request started in the tier (0-based)
    ) -> None:
        worker = self.worker_state
        tier = labels.tier
        slo = worker.scenario.slo_of(tier.conversation) if worker.scenario is not None else None
        record = build_record(
            labels,
            turn,
            record_id,
            measurement,
            worker_lag_p99_ms=worker.selfcheck.lag_p99_ms,
            worker_read_lag_p99_ms=worker.selfcheck.read_lag_p99_ms,
            worker_cpu=worker.selfcheck.cpu_pct,
            retries=retries,
            shown_in_budget=shown_in_budget,
            warmup=worker.warmup(tier, measurement.wall_start, request_ordinal),
            slo_met=slo.judge(measurement.status, measurement.ttft_s, measurement.tpot_s, measurement.e2e_s)
            if slo is not None
            else None,
        )
        worker.add_record(record)
        fire = self.environment.events.request.fire
        name = tier.target
        if measurement.status == STATUS_OK:
            for kind, value in (
                ("TTFT", measurement.ttft_s),
                ("TPOT", measurement.tpot_s),
                ("E2E", measurement.e2e_s),
            ):
                if value is not None:
                    fire(
                        request_type=kind,
                        name=name,
                        response_time=value * 1000.0,
                        response_length=measurement.output_tokens,
                        exception=None,
                        context={},
                    )
        # neither a request cut by our own stop nor one the developer's typing abandoned is the engine's
        # failure (an abandoned one is no success either: Locust's tables leave it out)
        elif measurement.status != STATUS_ABANDONED and measurement.error != CANCELLED:
            fire(
                request_type="E2E",
                name=name,
                response_time=(measurement.e2e_s or 0.0) * 1000.0,
                response_length=measurement.output_tokens,
                exception=RequestFailed(f"{measurement.status}: {measurement.error}"),
                context={},
            )


class RequestFailed(Exception):
    """A failed request, as Locust's failure table shows it."""


class CampaignUser(GrillUser):
    """Driven by the scenario's load shape: k conversations in each phase, then idle until the next."""

    def on_start(self) -> None:
        super().on_start()
        self._phase_key: str | None = None
        self._iterations_done = 0
        self._user_key = self.worker_state.user_key(self.user_index)

    def on_stop(self) -> None:
        if self._phase_key is not None:
            self.worker_state.release_developer(self._phase_key, self._user_key)
        super().on_stop()

    @task
    def next_conversation(self) -> None:
        worker = self.worker_state
        phase, scenario = worker.phase, worker.scenario
        if phase is None or scenario is None:
            gevent.sleep(IDLE_POLL_S)
            return
        if phase.key != self._phase_key:
            if self._phase_key is not None:
                worker.release_developer(self._phase_key, self._user_key)
            self._phase_key, self._iterations_done = phase.key, 0
            self.developer = worker.developer_for(phase.key, self._user_key)
        # a mix's developer plays its persona; a phase the master does not know gives no developer
        mixed = worker.target(phase.target)
        if phase.user_done(self._iterations_done) or (mixed.mix and self.developer is None):
            gevent.sleep(IDLE_POLL_S)
            return
        iteration = self._iterations_done
        if iteration > 0:
            gevent.sleep(phase.think_time_s)
        target = mixed if self.developer is None else mixed.for_developer(self.developer)
        self._iterations_done += 1
        try:
            self.run_conversation(target, phase, iteration)
        finally:
            worker.iteration_done(phase.key)


class StandaloneUser(GrillUser):
    """A plain Locust user on `--host`/`--model`: conversations of one built-in workload, back to back."""

    abstract = True
    conversation: ClassVar[str]

    def on_start(self) -> None:
        super().on_start()
        self.iteration = 0

    @task
    def next_conversation(self) -> None:
        worker = self.worker_state
        if worker.scenario is None:  # a worker still waiting for the master's hello reply
            gevent.sleep(IDLE_POLL_S)
            return
        target = next(t for t in worker.scenario.targets if t.conversation.name == self.conversation)
        runner = self.environment.runner
        phase = Phase(
            phase_id=0,
            run_id=worker.run_id,
            target=target.name,
            tier_index=0,
            tier_users=runner.user_count if runner is not None else 1,
            iterations_per_user=0,
            think_time_s=worker.scenario.load.think_time_s,
            session=worker.session,
        )
        if self.iteration > 0:
            gevent.sleep(phase.think_time_s)
        self.run_conversation(target, phase, self.iteration)
        self.iteration += 1


def standalone_scenario(host: str, model: str | None, engine: str, think_time_s: float | None) -> Scenario:
    """The scenario of a plain run on --host: one target per built-in workload."""
    from grill_locust.config import ConfigError
    from grill_locust.scenario import parse_scenario
    from grill_locust.workload.kinds import BUILTIN_CONVERSATION_KINDS

    url = host.rstrip("/")
    model = model or first_listed_model(url)
    data: dict[str, object] = {
        "name": "standalone",
        "backends": [{"name": "host", "url": url, "engine": engine}],
        "models": [{"name": model}],
        "targets": [
            {"backend": "host", "model": model, "conversation": c} for c in BUILTIN_CONVERSATION_KINDS
        ],
    }
    if think_time_s is not None:
        data["load"] = {"think_time_s": think_time_s}
    try:
        return parse_scenario(data, source="command line")
    except ConfigError as error:  # say which flag, not the scenario path built from it
        message = str(error).removeprefix("command line: ")
        for path, flag in _FLAG_OF_PATH:
            if message.startswith(path):
                raise ConfigError(flag + message[len(path) :]) from None
        raise


_FLAG_OF_PATH = (
    ("backends[0].engine", "--engine"),
    ("backends[0].url", "--host"),
    ("models[0]", "--model"),
    ("load.think_time_s", "--think-time"),
)


def first_listed_model(url: str) -> str:
    """The first model the server at `url` lists (any OpenAI-compatible server: `--engine` may be
    a gateway's); a one-line error when it lists none."""
    from grill_locust.client.backend_http import list_models
    from grill_locust.errors import GrillError

    try:
        listing = list_models(url, "openai", timeout_s=10.0)
        why = f"HTTP {listing.status}" if listing.status != 200 else "none listed"
    except OSError as error:
        listing, why = None, str(error)
    if listing is None or not listing.ids:
        raise GrillError(f"--model not given and {url}/v1/models gave no model ({why}): pass --model")
    return listing.ids[0]


class MultiTurnUser(StandaloneUser):
    conversation = "multi-turn-session"


class SharedPrefixUser(StandaloneUser):
    conversation = "shared-prefix"


class ShortBaselineUser(StandaloneUser):
    conversation = "short-baseline"


class UniquePromptsUser(StandaloneUser):
    conversation = "unique-prompts"

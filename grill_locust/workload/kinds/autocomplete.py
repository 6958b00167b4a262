"""The `autocomplete` kind: a developer typing through a file, a FIM request at each pause, abandoned at
the next keystroke unless its completion has arrived (the typing plan: workload/autocomplete.py)."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grill_locust.record import STATUS_OK
from grill_locust.tokens import count_tokens
from grill_locust.workload.autocomplete import AutocompletePlan, AutocompleteSession, plan_autocomplete
from grill_locust.workload.kinds._kind import SESSIONS_PER_S, ChatKind

if TYPE_CHECKING:
    from grill_locust.client import StreamResult
    from grill_locust.config import Conversation, Target
    from grill_locust.record import Measurement
    from grill_locust.workload.generators import Workload
    from grill_locust.workload.kinds._kind import Iteration, Script, Sender
    from grill_locust.workload.seeding import ShapeKey


@dataclass(frozen=True)
class Autocomplete(ChatKind):
    """Typed FIM completions; an iteration lasts as long as its typing, whatever the engine's speed."""

    def requests_per_iteration(self, conversation: Conversation) -> float:
        return conversation.requests or 1

    def build_script(
        self,
        workload: Workload,
        conversation_id: str,
        user_key: str,
        iteration: int,
        rng: random.Random,
        shape: ShapeKey,
    ) -> AutocompletePlan:
        return plan_autocomplete(workload, conversation_id, rng, shape)

    def first_prompt_tokens(self, script: Script) -> int:
        assert isinstance(script, AutocompletePlan)
        return count_tokens(script.prefix) + count_tokens(script.suffix)

    def iteration_s(self, script: Script, requests: float, request_s: float, think_time_s: float) -> float:
        assert isinstance(script, AutocompletePlan)
        return script.requests[-1].next_keystroke_at_s

    def max_tokens(self, target: Target) -> tuple[int, str]:
        completion = target.conversation.max_tokens or 1
        return completion, str(completion)

    def play(self, sender: Sender, target: Target, iteration: Iteration) -> None:
        """Type through the file as planned: each request sent at its time (a sleep to that deadline,
        its body built before), abandoned at the next keystroke unless its completion has arrived; a
        completion shown and drawn as accepted is inserted at the cursor. The keystrokes in between
        change only the text."""
        import gevent

        from grill_locust.client import fim_request

        plan = iteration.script
        assert isinstance(plan, AutocompletePlan)
        session = AutocompleteSession(plan)
        start = time.perf_counter()
        if iteration.send is not None and plan.requests:
            iteration.send.plan_delay_s = plan.requests[0].send_at_s
        model = target.sent_model
        for turn, planned in enumerate(plan.requests):
            session.insert(planned.typed)
            path, payload = fim_request(
                target.backend,
                model,
                target.conversation,
                session.prefix,
                session.suffix,
                plan.extra_files,
            )
            wait_s = start + planned.send_at_s - time.perf_counter()
            if wait_s > 0:
                gevent.sleep(wait_s)
            abandon_at = start + planned.next_keystroke_at_s
            result, measurement = sender.send_request(
                target, path, payload, iteration.labels, turn, iteration.client, abandon_at, plan.budget_s
            )
            if planned.accept and shown(result, measurement, abandon_at):
                session.insert(result.text)


def shown(result: StreamResult, measurement: Measurement, abandon_at: float | None) -> bool:
    """A completion the editor showed: all of it arrived before the next keystroke."""
    end_time = result.raw.end_time
    if measurement.status != STATUS_OK or end_time is None:
        return False
    return abandon_at is None or end_time <= abandon_at


AUTOCOMPLETE = Autocomplete(
    "autocomplete",
    {
        "prefix_tokens": 1500,
        "suffix_tokens": 400,
        "requests": 20,
        "typing_cps": 6.0,
        "debounce_ms": 150.0,
        "accept_rate": 0.3,
        "budget_ms": 400.0,
        "max_tokens": 64,
    },
    rate_unit=SESSIONS_PER_S,
    typed_completions=True,
)

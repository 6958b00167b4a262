"""The `autocomplete` kind: a developer typing through a file, a FIM request at each pause, abandoned at
the next keystroke unless its completion has arrived (the typing plan: workload/autocomplete.py)."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from grill_locust.config import MAX_TOKENS_PER_MESSAGE, Count, Number
from grill_locust.record import STATUS_OK
from grill_locust.tokens import count_tokens
from grill_locust.workload.autocomplete import AutocompletePlan, AutocompleteSession, plan_autocomplete
from grill_locust.workload.kinds._conversation import ConversationBase
from grill_locust.workload.kinds._kind import SESSIONS_PER_S, ChatKind

if TYPE_CHECKING:
    from grill_locust.client import StreamResult
    from grill_locust.record import Measurement
    from grill_locust.workload.generators import Workload
    from grill_locust.workload.kinds._kind import Iteration, KindTarget, Script, Sender
    from grill_locust.workload.seeding import ShapeKey


class AutocompleteConversation(ConversationBase):
    """An `autocomplete` conversation's keys: a developer typing through a file."""

    kind: Literal["autocomplete"]
    """Typed FIM completions, each abandoned at the next keystroke unless its completion has arrived."""
    prefix_tokens: Count = Field(default=1500, ge=1, le=MAX_TOKENS_PER_MESSAGE)
    """The text before the cursor, in tokens."""
    suffix_tokens: Count = Field(default=400, ge=1, le=MAX_TOKENS_PER_MESSAGE)
    """The file after the code the developer types."""
    requests: Count = Field(default=20, ge=1, le=100_000)
    """FIM requests one iteration sends, abandoned ones included."""
    typing_cps: Number = Field(default=6.0, gt=0)
    """The developer's typing speed, characters per second."""
    debounce_ms: Number = Field(default=150.0, ge=0)
    """The pause after a keystroke before a request goes out."""
    accept_rate: Number = Field(default=0.3, ge=0, le=1)
    """The share of shown completions the developer accepts."""
    budget_ms: Number = Field(default=400.0, gt=0)
    """The time a completion must arrive within to count as shown in budget."""
    max_tokens: Count = Field(default=64, ge=1, le=MAX_TOKENS_PER_MESSAGE)
    """Each request's max_tokens, over the model's."""


@dataclass(frozen=True)
class Autocomplete(ChatKind):
    """Typed FIM completions; an iteration lasts as long as its typing, whatever the engine's speed."""

    def requests_per_iteration(self, conversation: ConversationBase) -> float:
        assert isinstance(conversation, AutocompleteConversation)
        return conversation.requests

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

    def max_tokens(self, target: KindTarget) -> tuple[int, str]:
        conversation = target.conversation
        assert isinstance(conversation, AutocompleteConversation)
        completion = conversation.max_tokens
        return completion, str(completion)

    def play(self, sender: Sender, target: KindTarget, iteration: Iteration) -> None:
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


AUTOCOMPLETE = Autocomplete(AutocompleteConversation, rate_unit=SESSIONS_PER_S, typed_completions=True)

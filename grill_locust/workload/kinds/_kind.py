"""What every workload kind answers (`WorkloadKind`), and `ChatKind`, the answers of a kind whose
iteration is a chat script sent turn by turn (the study's kinds, a dataset's rows, a trace's)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from grill_locust.tokens import count_tokens
from grill_locust.workload.kinds._conversation import ConversationBase, kind_name, kind_sizes

if TYPE_CHECKING:
    from grill_locust.client import EngineClient, StreamResult
    from grill_locust.config import Backend, Model
    from grill_locust.record import Measurement
    from grill_locust.workload.agentic import AgenticPlan
    from grill_locust.workload.autocomplete import AutocompletePlan
    from grill_locust.workload.generators import ConversationScript, Workload
    from grill_locust.workload.seeding import ShapeKey

    Script = ConversationScript | AgenticPlan | AutocompletePlan

# A size field's default: a number of tokens or turns, a rate or a time, a switch, an inclusive
# [min, max] range drawn per session, a log-normal's {median, p95} in tokens, a choice by name, or None
# for an optional feature left off (or a value the conversation must give).
SizeDefault = int | float | bool | tuple[int, int] | Mapping[str, int] | str | None

REQUESTS_PER_S = "req/s"
SESSIONS_PER_S = "sessions/s"


class KindTarget(Protocol):
    """What a kind plays against (a scenario's `Target`): where its requests go, the sampling settings
    they send, and its conversation."""

    @property
    def backend(self) -> Backend: ...
    @property
    def sent_model(self) -> Model: ...
    @property
    def conversation(self) -> ConversationBase: ...


class Sender(Protocol):
    """What a kind's iteration sends through: the Locust user, which times and records every request."""

    def send_chat(
        self,
        target: KindTarget,
        messages: list[dict[str, Any]],
        labels: dict[str, Any],
        turn: int,
        client: EngineClient,
        model: Model,
        tools: list[dict[str, Any]] | None = None,
    ) -> tuple[StreamResult, Measurement] | None:
        """One chat-shaped request; its result and measurement when it succeeded, else None."""
        ...

    def send_request(
        self,
        target: KindTarget,
        path: str,
        payload: dict[str, Any],
        labels: dict[str, Any],
        turn: int,
        client: EngineClient,
        abandon_at: float | None = None,
        budget_s: float | None = None,
    ) -> tuple[StreamResult, Measurement]:
        """One request as built (429s retried as the backend allows); the last attempt's result."""
        ...


class PlannedSend(Protocol):
    """An open-loop send as a kind sees it: the delay its own plan puts before its first request."""

    plan_delay_s: float


@dataclass(frozen=True)
class Iteration:
    """One iteration as a kind plays it: its script, the think time between its turns, the labels
    of its records and the connection it sends on; `send` is the open-loop arrival it plays, if any."""

    script: Script
    think_time_s: float
    labels: dict[str, Any]
    client: EngineClient
    send: PlannedSend | None = None


class WorkloadKind(Protocol):
    """One kind of conversation: its configuration model (sizes, defaults, checks), how many requests an
    iteration sends and how long it lasts, what a rate of it counts, its script and how one iteration is played.
    A kind is registered once (`grill_locust.workload.kinds.register`)."""

    @property
    def name(self) -> str: ...
    # its configuration model: a ConversationBase whose `kind` is Literal[name], with its sizes,
    # their defaults and its checks
    @property
    def conversation_model(self) -> type[ConversationBase]: ...
    # the fields it adds to ConversationBase (tokens, turns; a dataset's file) with their defaults, in
    # the spirit of the seed study
    @property
    def sizes(self) -> Mapping[str, SizeDefault]: ...
    # a conversation of this kind usable by name in targets without declaring it
    @property
    def builtin(self) -> str | None: ...
    # what a rate tier of it counts per second: REQUESTS_PER_S or SESSIONS_PER_S
    @property
    def rate_unit(self) -> str: ...
    # its turns are written in the scenario (`turns` implies this kind)
    @property
    def scripted_turns(self) -> bool: ...
    # sent once at its file's own times, not through the load's tiers
    @property
    def replays_at_own_times(self) -> bool: ...
    # an iteration is an agent session: a record's `turn` is its step
    @property
    def agent_steps(self) -> bool: ...
    # its requests are FIM completions a typing developer may abandon
    @property
    def typed_completions(self) -> bool: ...
    # its requests carry tool definitions
    @property
    def uses_tools(self) -> bool: ...
    # it sends a file's rows (`path`), read and checked at load
    @property
    def replays_file(self) -> bool: ...
    # why its request count is an expectation (None: an exact count)
    @property
    def expected_requests(self) -> str | None: ...

    def check_file(self, conversation: ConversationBase) -> None:
        """Read and check the file it replays (its path absolute), raising the file's own error."""
        ...

    def api_refusal(self, api: str) -> str | None:
        """Why a backend of this `api` cannot send it (the message's end), or None."""
        ...

    def requests_per_iteration(self, conversation: ConversationBase) -> float:
        """Requests one iteration sends; an expectation where `expected_requests` says why."""
        ...

    def prepare(self, workload: Workload) -> None:
        """Build once what every script of the workload shares, before the load starts."""
        ...

    def build_script(
        self,
        workload: Workload,
        conversation_id: str,
        user_key: str,
        iteration: int,
        rng: random.Random,
        shape: ShapeKey,
    ) -> Script:
        """What one user sends in one iteration."""
        ...

    def first_prompt_tokens(self, script: Script) -> int:
        """Approximate tokens of the script's first request (for `grill validate`)."""
        ...

    def iteration_s(self, script: Script, requests: float, request_s: float, think_time_s: float) -> float:
        """An iteration's length, for an estimate: `requests` of `request_s` each, and its pauses."""
        ...

    def max_tokens(self, target: KindTarget) -> tuple[int, str]:
        """max_tokens of most of its requests, and as `grill validate`'s table shows it."""
        ...

    def sent_max_tokens(self, target: KindTarget) -> dict[str, int | None]:
        """The max_tokens its requests send, by the YAML key that sets each (for `grill validate`'s
        lines on settings that differ from the model's)."""
        ...

    def play(self, sender: Sender, target: KindTarget, iteration: Iteration) -> None:
        """Send one iteration of `target` through `sender`."""
        ...


@dataclass(frozen=True)
class ChatKind:
    """A kind whose iteration is a chat script: its user turns sent one by one, each real reply carried
    forward, a think time between them. Subclasses answer where their kind differs."""

    conversation_model: type[ConversationBase]
    builtin: str | None = None
    rate_unit: str = REQUESTS_PER_S
    scripted_turns: bool = False
    replays_at_own_times: bool = False
    agent_steps: bool = False
    typed_completions: bool = False
    uses_tools: bool = False
    replays_file: bool = False
    expected_requests: str | None = None

    @property
    def name(self) -> str:
        """The literal of its model's `kind`: the one place a kind's name is written."""
        return kind_name(self.conversation_model)

    @property
    def sizes(self) -> Mapping[str, SizeDefault]:
        return kind_sizes(self.conversation_model)

    def check_file(self, conversation: ConversationBase) -> None:
        return None

    def api_refusal(self, api: str) -> str | None:
        return None

    def requests_per_iteration(self, conversation: ConversationBase) -> float:
        return 1

    def prepare(self, workload: Workload) -> None:
        return None

    def build_script(
        self,
        workload: Workload,
        conversation_id: str,
        user_key: str,
        iteration: int,
        rng: random.Random,
        shape: ShapeKey,
    ) -> Script:
        raise NotImplementedError(f"kind {self.name!r} builds no script")

    def first_prompt_tokens(self, script: Script) -> int:
        chat = _chat(script)
        return count_tokens(chat.system or "") + count_tokens(chat.user_turns[0])

    def iteration_s(self, script: Script, requests: float, request_s: float, think_time_s: float) -> float:
        return requests * request_s + max(0.0, requests - 1) * think_time_s

    def max_tokens(self, target: KindTarget) -> tuple[int, str]:
        sent = target.sent_model.max_tokens  # the conversation's where it writes one (a dataset's)
        return sent, str(sent)

    def sent_max_tokens(self, target: KindTarget) -> dict[str, int | None]:
        return {"max_tokens": target.sent_model.max_tokens}

    def play(self, sender: Sender, target: KindTarget, iteration: Iteration) -> None:
        import gevent

        script = _chat(iteration.script)
        labels = iteration.labels
        # a row's own max_tokens (a trace's output length, a dataset row's) over the conversation's
        model = target.sent_model.with_settings(max_tokens=script.max_tokens)
        messages: list[dict[str, Any]] = []
        if script.system:
            messages.append({"role": "system", "content": script.system})
        messages += script.history
        labels["trace_line"] = script.trace_line
        for turn, user_text in enumerate(script.user_turns):
            if turn > 0:
                gevent.sleep(iteration.think_time_s)
            messages.append({"role": "user", "content": user_text})
            sent = sender.send_chat(target, messages, labels, turn, iteration.client, model=model)
            if sent is None:
                return  # the conversation cannot go on without the reply
            messages.append({"role": "assistant", "content": sent[0].text})


def _chat(script: Script) -> ConversationScript:
    from grill_locust.workload.generators import ConversationScript

    assert isinstance(script, ConversationScript), f"a chat kind's script, got {type(script).__name__}"
    return script

"""The `agentic` kind: a coding agent's tool-calling loop, its steps played one after another with the
engine's real replies, its sub-agents in parallel (the plan and the session: workload/agentic.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from grill_locust.config import MAX_TOKENS_PER_MESSAGE, Count, Frozen
from grill_locust.tokens import count_tokens
from grill_locust.workload.agentic import (
    AgenticPlan,
    AgenticSession,
    AgentReply,
    expected_requests_per_session,
    plan_session,
)
from grill_locust.workload.kinds._conversation import ConversationBase
from grill_locust.workload.kinds._kind import SESSIONS_PER_S, ChatKind
from grill_locust.workload.tools import MIN_SYSTEM_TOKENS, TOOLS, TOOLS_APPROX_TOKENS

if TYPE_CHECKING:
    from grill_locust.client import EngineClient
    from grill_locust.workload.generators import Workload
    from grill_locust.workload.kinds._kind import Iteration, KindTarget, Script, Sender
    from grill_locust.workload.seeding import ShapeKey

_MAX_SUBAGENTS = 16


class LogNormalTokens(Frozen):
    """A size in tokens drawn from a log-normal with this median and 95th percentile (equal: fixed)."""

    median: Count = Field(ge=1, le=MAX_TOKENS_PER_MESSAGE)
    """The size's median, in tokens (a plain number gives a fixed size)."""
    p95: int = Field(ge=1, le=MAX_TOKENS_PER_MESSAGE)
    """The size's 95th percentile, in tokens: not below the median."""

    @model_validator(mode="before")
    @classmethod
    def _number_is_fixed(cls, data: Any) -> Any:
        return {"median": data, "p95": data} if isinstance(data, int) and not isinstance(data, bool) else data

    @model_validator(mode="after")
    def _p95_not_below_median(self) -> LogNormalTokens:
        if self.p95 < self.median:
            raise ValueError(f"p95: {self.p95} is below the median ({self.median})")
        return self


class AgenticConversation(ConversationBase):
    """An `agentic` conversation's keys: a coding agent's sessions."""

    kind: Literal["agentic"]
    """Sessions of model calls with tool definitions, the context growing by each step's tool results."""
    system_tokens: Count = Field(default=8000, ge=1, le=MAX_TOKENS_PER_MESSAGE)
    """The system prompt's size in tokens, the tools' JSON counted in it."""
    steps: tuple[Count, Count] = (10, 30)
    """Model calls per agent session as [min, max], drawn per session (a number n is [n, n])."""
    tool_result_tokens: LogNormalTokens = Field(default={"median": 600, "p95": 4000}, validate_default=True)
    """Each agent step's tool results, in all: a number, or a log-normal's {median, p95}."""
    step_max_tokens: Count = Field(default=256, ge=1, le=MAX_TOKENS_PER_MESSAGE)
    """max_tokens of an agent's steps before the last."""
    final_max_tokens: Count = Field(default=1024, ge=1, le=MAX_TOKENS_PER_MESSAGE)
    """max_tokens of an agent's final answer (and of a summary when the context is compacted)."""
    context_limit_tokens: Count | None = Field(default=None, ge=1, le=10 * MAX_TOKENS_PER_MESSAGE)
    """The agent's context limit: a request with its answer that would pass it is preceded by a summary."""
    subagents: Count | None = Field(default=None, ge=1, le=_MAX_SUBAGENTS)
    """Sub-agents one drawn step of an agent session starts, played in parallel."""

    @field_validator("steps", mode="before")
    @classmethod
    def _step_range(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value, value]
        if (
            isinstance(value, (list, tuple))
            and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        ):
            low, high = value
            if low < 1:
                raise ValueError(f"steps: expected at least 1 step, got {low}")
            if low > high:
                raise ValueError(f"steps: the minimum {low} is above the maximum {high}")
        elif value is not None:
            raise ValueError(f"steps: expected a number of steps or [min, max], got {value!r}")
        return value

    @model_validator(mode="after")
    def _room_for_the_tools(self) -> AgenticConversation:
        if self.system_tokens < MIN_SYSTEM_TOKENS:
            raise ValueError(
                f"system_tokens: {self.system_tokens} cannot hold the tool definitions and an instruction "
                f"(give at least {MIN_SYSTEM_TOKENS})"
            )
        limit = self.context_limit_tokens
        if limit is not None and self.system_tokens >= limit:
            raise ValueError(
                f"context_limit_tokens: {limit} leaves no room after the system prompt "
                f"(system_tokens: {self.system_tokens}): give a limit above it"
            )
        return self


@dataclass(frozen=True)
class Agentic(ChatKind):
    """Sessions of model calls with tool definitions; each record is a step, `turn` its number."""

    def api_refusal(self, api: str) -> str | None:
        if api == "completions":
            return "is agentic: its tool calls need a backend with api: chat or messages"
        return None

    def requests_per_iteration(self, conversation: ConversationBase) -> float:
        assert isinstance(conversation, AgenticConversation)
        return expected_requests_per_session(conversation)

    def build_script(
        self,
        workload: Workload,
        conversation_id: str,
        user_key: str,
        iteration: int,
        rng: random.Random,
        shape: ShapeKey,
    ) -> AgenticPlan:
        return plan_session(workload, conversation_id, rng, shape)

    def first_prompt_tokens(self, script: Script) -> int:
        assert isinstance(script, AgenticPlan)
        return count_tokens(script.system) + TOOLS_APPROX_TOKENS + count_tokens(script.task)

    def iteration_s(self, script: Script, requests: float, request_s: float, think_time_s: float) -> float:
        return requests * request_s  # the agent runs its tools at once: no think time between steps

    def max_tokens(self, target: KindTarget) -> tuple[int, str]:
        conversation = target.conversation
        assert isinstance(conversation, AgenticConversation)
        step, final = conversation.step_max_tokens, conversation.final_max_tokens
        return step, f"{step}/{final}"

    def sent_max_tokens(self, target: KindTarget) -> dict[str, int | None]:
        conversation = target.conversation  # each step sends its own
        return {name: getattr(conversation, name) for name in ("step_max_tokens", "final_max_tokens")}

    def play(self, sender: Sender, target: KindTarget, iteration: Iteration) -> None:
        assert isinstance(iteration.script, AgenticPlan)
        play_session(sender, target, AgenticSession(iteration.script), iteration.labels, iteration.client)


def play_session(
    sender: Sender, target: KindTarget, session: AgenticSession, labels: dict[str, Any], client: EngineClient
) -> str | None:
    """Play one agent session, step after step with no pause (the agent runs its tools at once), its
    sub-agents in parallel greenlets; the final answer, or None when a step failed (which ends it)."""
    labels = {**labels, "conversation_id": session.conversation_id}
    while (request := session.next_request()) is not None:
        model = target.sent_model.with_settings(max_tokens=request.max_tokens)
        sent = sender.send_chat(
            target, request.messages, labels, request.turn, client, model=model, tools=TOOLS
        )
        if sent is None:
            return None
        result, measurement = sent
        reply = AgentReply(result.text, result.tool_calls, measurement.prompt_tokens)
        subagent_plans = session.on_reply(reply)
        if subagent_plans:
            answers = _play_subagents(sender, target, subagent_plans, labels)
            if any(answer is None for answer in answers):
                return None  # a sub-agent's failed step ends the whole session
            session.on_subagents_done([answer or "" for answer in answers])
    return session.final_answer


def _play_subagents(
    sender: Sender, target: KindTarget, plans: list[AgenticPlan], labels: dict[str, Any]
) -> list[str | None]:
    """Each sub-agent on its own connection, all at once; their final answers in order."""
    import gevent

    from grill_locust.client import EngineClient

    clients = [EngineClient(target.backend) for _ in plans]
    greenlets = [
        gevent.spawn(play_session, sender, target, AgenticSession(plan), labels, client)
        for plan, client in zip(plans, clients, strict=True)
    ]
    try:
        gevent.joinall(greenlets, raise_error=True)
    except BaseException:  # the user stopped (GreenletExit) or a sub-agent broke: none outlives it
        gevent.killall(greenlets)
        raise
    finally:
        for client in clients:
            client.close()
    return [greenlet.value for greenlet in greenlets]


AGENTIC = Agentic(
    AgenticConversation,
    rate_unit=SESSIONS_PER_S,
    agent_steps=True,
    uses_tools=True,
    expected_requests=(
        "agentic sessions draw their steps per session; their requests per iteration are the mean "
        "of steps, plus the sub-agents' steps, plus the compactions the mean sizes lead to"
    ),
)

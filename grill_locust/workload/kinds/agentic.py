"""The `agentic` kind: a coding agent's tool-calling loop, its steps played one after another with the
engine's real replies, its sub-agents in parallel (the plan and the session: workload/agentic.py)."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grill_locust.tokens import count_tokens
from grill_locust.workload.agentic import (
    AgenticPlan,
    AgenticSession,
    AgentReply,
    expected_requests_per_session,
    plan_session,
)
from grill_locust.workload.kinds._kind import SESSIONS_PER_S, ChatKind
from grill_locust.workload.tools import MIN_SYSTEM_TOKENS, TOOLS, TOOLS_APPROX_TOKENS

if TYPE_CHECKING:
    from grill_locust.client import EngineClient
    from grill_locust.config import Conversation, Target
    from grill_locust.record import RequestLabels
    from grill_locust.workload.generators import Workload
    from grill_locust.workload.kinds._kind import Iteration, Script, Sender
    from grill_locust.workload.seeding import ShapeKey


@dataclass(frozen=True)
class Agentic(ChatKind):
    """Sessions of model calls with tool definitions; each record is a step, `turn` its number."""

    def check(self, conversation: Conversation) -> dict[str, object]:
        system_tokens = conversation.system_tokens or 1
        if system_tokens < MIN_SYSTEM_TOKENS:
            raise ValueError(
                f"system_tokens: {system_tokens} cannot hold the tool definitions and an instruction "
                f"(give at least {MIN_SYSTEM_TOKENS})"
            )
        limit = conversation.context_limit_tokens
        if limit is not None and system_tokens >= limit:
            raise ValueError(
                f"context_limit_tokens: {limit} leaves no room after the system prompt "
                f"(system_tokens: {system_tokens}): give a limit above it"
            )
        return {}

    def api_refusal(self, api: str) -> str | None:
        if api == "completions":
            return "is agentic: its tool calls need a backend with api: chat or messages"
        return None

    def requests_per_iteration(self, conversation: Conversation) -> float:
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

    def max_tokens(self, target: Target) -> tuple[int, str]:
        conversation = target.conversation
        step, final = conversation.step_max_tokens or 1, conversation.final_max_tokens or 1
        return step, f"{step}/{final}"

    def sent_max_tokens(self, target: Target) -> dict[str, int | None]:
        conversation = target.conversation  # each step sends its own
        return {name: getattr(conversation, name) for name in ("step_max_tokens", "final_max_tokens")}

    def play(self, sender: Sender, target: Target, iteration: Iteration) -> None:
        assert isinstance(iteration.script, AgenticPlan)
        play_session(sender, target, AgenticSession(iteration.script), iteration.labels, iteration.client)


def play_session(
    sender: Sender, target: Target, session: AgenticSession, labels: RequestLabels, client: EngineClient
) -> str | None:
    """Play one agent session, step after step with no pause (the agent runs its tools at once), its
    sub-agents in parallel greenlets; the final answer, or None when a step failed (which ends it)."""
    labels = dataclasses.replace(labels, conversation_id=session.conversation_id)
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
    sender: Sender, target: Target, plans: list[AgenticPlan], labels: RequestLabels
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
    "agentic",
    # system_tokens counts the tools' JSON too
    {
        "system_tokens": 8000,
        "steps": (10, 30),
        "tool_result_tokens": {"median": 600, "p95": 4000},
        "step_max_tokens": 256,
        "final_max_tokens": 1024,
        "context_limit_tokens": None,
        "subagents": None,
    },
    rate_unit=SESSIONS_PER_S,
    agent_steps=True,
    uses_tools=True,
    expected_requests=(
        "agentic sessions draw their steps per session; their requests per iteration are the mean "
        "of steps, plus the sub-agents' steps, plus the compactions the mean sizes lead to"
    ),
)

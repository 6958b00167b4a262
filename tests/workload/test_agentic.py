"""Agentic sessions (workload/agentic.py): a plan fixed by the seed, sizes exact on the simulated engine,
a context that grows by the engine's real replies and the drawn tool results, compaction, sub-agents.
One simulated engine serves the module; sessions are played step by step with the real client."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from grill_locust.client import EngineClient, request_for
from grill_locust.client.backend_http import tokenize
from grill_locust.config import Backend, Model
from grill_locust.record import STATUS_OK, measure
from grill_locust.scenario import Conversation, validate_conversation
from grill_locust.sim import SimProcess
from grill_locust.workload.agentic import (
    COMPACTED_HEAD,
    FINAL_REQUEST,
    SUMMARY_REQUEST,
    AgenticPlan,
    AgenticSession,
    AgentReply,
    AgentRequest,
)
from grill_locust.workload.generators import build_workload
from grill_locust.workload.tools import STEP_TOOLS, SUBAGENT_TOOL, TOOLS, TOOLS_APPROX_TOKENS, tools_text

REPO = Path(__file__).resolve().parents[2]
MODEL = Model(name="grill-sim", max_tokens=16, ignore_eos=True)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess.start("vllm") as process:
        yield process


@pytest.fixture(scope="module")
def backend(sim: SimProcess) -> Backend:
    return Backend(name="sim", url=sim.url, engine="sim")


def agentic(**fields: Any) -> Conversation:
    return validate_conversation({"name": "agent", "kind": "agentic", **fields})


def plan_of(conversation: Conversation, user_key: str = "u0", iteration: int = 0) -> AgenticPlan:
    plan = build_workload(conversation).script(user_key, iteration)
    assert isinstance(plan, AgenticPlan)
    return plan


def test_one_developer_gets_the_same_session_shape_on_every_target_and_text_of_its_own() -> None:
    # two targets (engines) of a run: other user keys, the same developer and iteration
    conversation = agentic(steps=[5, 40], subagents=2)
    workload = build_workload(conversation)

    def shape(plan: AgenticPlan) -> tuple[object, ...]:
        subs = [plan.subagent_plan(k) for k in range(plan.subagents)]
        return plan.steps, plan.planned, plan.subagent_step, tuple((s.steps, s.planned) for s in subs)

    on_a, on_b = (workload.script(key, 1, developer=3) for key in ("s-p1a0-w-u0", "s-p2a0-w-u7"))
    assert isinstance(on_a, AgenticPlan) and isinstance(on_b, AgenticPlan)
    assert shape(on_a) == shape(on_b)
    assert on_a.system != on_b.system and on_a.task != on_b.task  # no prefix shared across targets
    others = [workload.script("s-p1a0-w-u0", 1, developer=d) for d in range(4, 12)]
    assert len({shape(plan) for plan in others if isinstance(plan, AgenticPlan)}) > 1  # drawn per developer


def test_a_tool_call_cut_short_by_max_tokens_is_not_carried_back() -> None:
    # its arguments are no JSON object: llama-server answers the next request with HTTP 500 if it is
    # sent back, and an agent could not run it; the step's scripted call takes its place
    session = AgenticSession(plan_of(agentic(steps=3)))
    session.next_request()
    whole = SimpleNamespace(id="call-whole", name="grep", arguments='{"pattern": "def add"}')
    cut = SimpleNamespace(id="call-cut", name="read_file", arguments='{"path": "src/ma')
    session.on_reply(AgentReply("", (cut,)))
    request = session.next_request()
    assert request is not None
    carried = request.messages[-2]["tool_calls"]
    assert [call["id"] for call in carried] != ["call-cut"] and len(carried) == 1
    assert json.loads(carried[0]["function"]["arguments"]) is not None
    session.on_reply(AgentReply("", (whole, cut)))
    request = session.next_request()
    assert request is not None
    assert [call["id"] for call in request.messages[-3]["tool_calls"]] == ["call-whole"]


def sim_tokens(backend: Backend, text: str) -> int:
    return tokenize(str(backend.tokenize_url), "sim", text).count


def play_offline(plan: AgenticPlan, reply_text: str = "Looking at it.") -> list[AgentRequest]:
    """Every request of a session whose replies are all `reply_text` and call no tool."""
    session, requests = AgenticSession(plan), []
    while (request := session.next_request()) is not None:
        requests.append(request)
        subagents = session.on_reply(AgentReply(reply_text))
        if subagents:
            session.on_subagents_done([f"report {index}" for index in range(len(subagents))])
    return requests


class Played:
    """One request sent to the engine: what was sent, and what came back."""

    def __init__(self, request: AgentRequest, text: str, prompt_tokens: int, output_tokens: int) -> None:
        self.request, self.text = request, text
        self.prompt_tokens, self.output_tokens = prompt_tokens, output_tokens


def play(session: AgenticSession, backend: Backend) -> list[Played]:
    """A session against the engine (its sub-agents one after the other), as the Locust user plays it."""
    client = EngineClient(backend)
    played: list[Played] = []
    try:
        while (request := session.next_request()) is not None:
            model = MODEL.model_copy(update={"max_tokens": request.max_tokens})
            path, payload = request_for(backend, model, request.messages, tools=TOOLS)
            result = client.stream(path, payload)
            measurement = measure(result.raw)
            assert measurement.status == STATUS_OK, measurement.error
            assert measurement.prompt_tokens is not None
            played.append(Played(request, result.text, measurement.prompt_tokens, measurement.output_tokens))
            subagents = session.on_reply(
                AgentReply(result.text, result.tool_calls, measurement.prompt_tokens)
            )
            if subagents:
                answers = []
                for plan in subagents:
                    sub = AgenticSession(plan)
                    play(sub, backend)
                    answers.append(sub.final_answer or "")
                session.on_subagents_done(answers)
    finally:
        client.close()
    return played


def test_the_same_seed_user_and_iteration_give_the_same_session_in_every_process() -> None:
    conversation = agentic(steps=[4, 12], tool_result_tokens={"median": 200, "p95": 900}, system_tokens=1500)
    requests = play_offline(plan_of(conversation))
    digest = hashlib.sha256(json.dumps([r.messages for r in requests]).encode()).hexdigest()
    assert requests == play_offline(plan_of(conversation))
    assert play_offline(plan_of(conversation, "u1"))[0].messages != requests[0].messages
    assert play_offline(plan_of(conversation, iteration=1))[0].messages != requests[0].messages
    code = (
        "import hashlib, json, sys\n"
        "from tests.workload.test_agentic import agentic, plan_of, play_offline\n"
        "c = agentic(steps=[4, 12], tool_result_tokens={'median': 200, 'p95': 900}, system_tokens=1500)\n"
        "print(hashlib.sha256(json.dumps([r.messages for r in play_offline(plan_of(c))]).encode()).hexdigest())\n"
    )
    other = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    )
    assert other.stdout.strip() == digest


def test_a_plan_draws_its_steps_in_range_and_ends_with_the_final_request() -> None:
    conversation = agentic(steps=[3, 6], system_tokens=1200, tool_result_tokens=50)
    steps = {plan_of(conversation, f"u{index}").steps for index in range(40)}
    assert steps == {3, 4, 5, 6}
    requests = play_offline(plan_of(conversation))
    assert [r.turn for r in requests] == list(range(len(requests)))
    assert [r.max_tokens for r in requests] == [256] * (len(requests) - 1) + [1024]
    assert requests[-1].messages[-1] == {"role": "user", "content": FINAL_REQUEST}
    # each step's reply carries the scripted call (the model made none) and one result answers its id
    for before, after in zip(requests, requests[1:], strict=False):
        added = after.messages[len(before.messages) :]
        assistant, result = added[0], added[1]
        (call,) = assistant["tool_calls"]
        assert call["function"]["name"] in STEP_TOOLS and json.loads(call["function"]["arguments"])
        assert result == {"role": "tool", "tool_call_id": call["id"], "content": result["content"]}


def test_planning_a_long_session_is_cheap() -> None:
    conversation = agentic(steps=100, system_tokens=8000, tool_result_tokens={"median": 1200, "p95": 5000})
    workload = build_workload(conversation)
    workload.script("warm-up", 0)
    started = time.perf_counter()
    plan = workload.script("u0", 0)
    assert isinstance(plan, AgenticPlan) and len(plan.planned) == 99
    assert time.perf_counter() - started < 0.2  # ~5 ms here; results are rendered when a step needs them


def test_system_prompt_and_every_tool_result_have_their_exact_size_on_the_simulator(backend: Backend) -> None:
    conversation = agentic(steps=40, system_tokens=2500, tool_result_tokens={"median": 150, "p95": 1200})
    plan = plan_of(conversation)
    assert sim_tokens(backend, tools_text()) == TOOLS_APPROX_TOKENS
    assert sim_tokens(backend, plan.system) + TOOLS_APPROX_TOKENS == 2500
    last = play_offline(plan)[-1].messages
    results = [m for m in last if m["role"] == "tool"]
    called = [m["tool_calls"][0]["function"]["name"] for m in last if m["role"] == "assistant"]
    assert len(results) == len(plan.planned) == 39 and set(called) == set(STEP_TOOLS)
    assert [sim_tokens(backend, m["content"]) for m in results] == [s.result_tokens for s in plan.planned]


def test_the_context_grows_by_each_real_reply_and_its_drawn_results(backend: Backend) -> None:
    conversation = agentic(
        steps=5,
        system_tokens=1500,
        tool_result_tokens={"median": 300, "p95": 1000},
        step_max_tokens=16,
        final_max_tokens=16,
    )
    session = AgenticSession(plan_of(conversation))
    played = play(session, backend)
    assert len(played) == 5 and session.final_answer == played[-1].text
    for index, (before, after) in enumerate(zip(played, played[1:], strict=False)):
        # the engine's own reply goes back as the assistant message, with the step's call
        assistant = after.request.messages[len(before.request.messages)]
        assert assistant["role"] == "assistant" and assistant["content"] == (before.text or None)
        growth = after.prompt_tokens - before.prompt_tokens
        drawn = session.plan.planned[index].result_tokens
        final_request = 30 if index == 3 else 0  # the last step's request for the final answer
        assert drawn + before.output_tokens <= growth <= drawn + before.output_tokens + 100 + final_request


def test_a_session_past_its_context_limit_compacts_and_restarts_from_the_summary(backend: Backend) -> None:
    limit = 2600
    conversation = agentic(
        steps=8,
        system_tokens=1200,
        tool_result_tokens=350,
        step_max_tokens=16,
        final_max_tokens=48,
        context_limit_tokens=limit,
    )
    session = AgenticSession(plan_of(conversation))
    played = play(session, backend)
    compactions = [index for index, p in enumerate(played) if p.request.compaction]
    assert compactions and len(played) == 8 + len(compactions)
    assert [p.request.turn for p in played] == list(range(len(played)))
    for index in compactions:
        summary_request, summary, after = played[index - 1], played[index], played[index + 1]
        # the summary is asked of the context as last sent, and the context restarts from its real text
        assert summary.request.messages == [
            *summary_request.request.messages,
            {"role": "user", "content": SUMMARY_REQUEST},
        ]
        assert after.request.messages[:2] == [
            {"role": "system", "content": session.plan.system},
            {"role": "user", "content": COMPACTED_HEAD + summary.text},
        ]
        assert after.request.messages[2]["role"] == "assistant"  # then the held reply and its results
        assert after.prompt_tokens < summary.prompt_tokens
    # no request, with room for its answer, passes the limit
    assert all(p.prompt_tokens + p.request.max_tokens <= limit for p in played)


def test_subagents_share_the_system_prompt_and_answer_task_calls_of_one_step() -> None:
    conversation = agentic(steps=[4, 6], system_tokens=1200, tool_result_tokens=40, subagents=3)
    plan = plan_of(conversation)
    assert plan.subagent_step is not None
    session = AgenticSession(plan)
    while (request := session.next_request()) is not None:
        subagents = session.on_reply(AgentReply("ok"))
        if subagents:
            break
    assert [sub.conversation_id for sub in subagents] == [f"{plan.conversation_id}/sub{i}" for i in range(3)]
    assert all(sub.system == plan.system and sub.subagents == 0 for sub in subagents)
    assert len({sub.task for sub in subagents}) == 3
    with pytest.raises(RuntimeError):
        session.next_request()  # not before their answers
    session.on_subagents_done(["first report", "", "third report"])
    added = session.next_request()
    assert added is not None
    assistant, *results = added.messages[len(request.messages) :][:4]
    calls = assistant["tool_calls"]
    assert [call["function"]["name"] for call in calls] == [SUBAGENT_TOOL] * 3
    assert [r["tool_call_id"] for r in results] == [call["id"] for call in calls]
    assert [r["content"] for r in results] == ["first report", "(the sub-agent gave no text)", "third report"]

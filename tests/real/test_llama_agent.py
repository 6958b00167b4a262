"""Agent sessions against a real llama.cpp `llama-server` started with --jinja: a ten-step tool-calling
session over `api: chat` and over `api: messages` in one headless campaign, its records checked step by
step; and against the shared server started without --jinja, which refuses any request carrying tools."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import requests

from grill_locust.client import EngineClient, request_for
from grill_locust.config import Backend, Model
from grill_locust.record import STATUS_OK, measure
from grill_locust.run.exit_codes import ENGINE_REFUSED
from grill_locust.workload.agentic import tool_call, tool_result
from grill_locust.workload.tools import TOOLS, tools_text
from tests.real.campaigns import AGENT_CONVERSATION, AGENT_STEPS, agent_scenario
from tests.real.conftest import AGENT_CONTEXT_TOKENS, SERVED_MODEL, CampaignRun, ServerProcess, run_campaign
from tests.real.test_llama_server import remote_tokens

pytestmark = pytest.mark.real

TIMEOUTS = {"connect_s": 10, "first_token_s": 300, "total_s": 600}
# the chat template's markup per message (turn tags, <tool_response>): slack for what the cache holds
STEP_MARKUP_TOKENS = 4


def agent_backend(name: str, server: ServerProcess, api: str) -> dict[str, object]:
    return {"name": name, "engine": "llamacpp", "api": api, "url": server.url, "timeouts": TIMEOUTS}


@pytest.fixture(scope="module")
def campaign(llama_agent_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> CampaignRun:
    backends = [
        agent_backend("chat", llama_agent_server, "chat"),
        agent_backend("messages", llama_agent_server, "messages"),
    ]
    folder = tmp_path_factory.mktemp("llama-agent")
    run = run_campaign(agent_scenario(backends, SERVED_MODEL), folder)
    print(f"llama-server agent campaign: {run.wall_s:.1f} s")
    return run


@pytest.fixture(scope="module")
def records(campaign: CampaignRun) -> pd.DataFrame:
    records = pd.read_parquet(campaign.run_dir / "records.parquet").sort_values(["target", "turn"])
    print(
        records[
            ["target", "turn", "prompt_tokens", "cached_tokens", "output_tokens", "finish_reason", "e2e_s"]
        ]
    )
    return records


def test_the_server_gives_the_sessions_its_whole_context(llama_agent_server: ServerProcess) -> None:
    props = requests.get(f"{llama_agent_server.url}/props", timeout=10).json()
    assert props["default_generation_settings"]["n_ctx"] == AGENT_CONTEXT_TOKENS
    assert (
        props["chat_template_caps"]["supports_tools"] and props["chat_template_caps"]["supports_tool_calls"]
    )


@pytest.mark.parametrize("api", ["chat", "messages"])
def test_each_step_is_one_ok_record_on_a_growing_context_served_from_the_cache(
    records: pd.DataFrame, llama_agent_server: ServerProcess, api: str
) -> None:
    session = records[records.target == api]
    assert (session["status"] == "ok").all(), session[["turn", "status", "error"]]
    assert (session["kind"] == "agentic").all() and session["conversation_id"].nunique() == 1
    assert list(session["turn"]) == list(range(AGENT_STEPS))
    assert (session["tokens_source"] == "usage").all() and (session["output_tokens"] == 32).all()
    prompt = session["prompt_tokens"].to_numpy()
    cached = session["cached_tokens"].to_numpy()
    growth = prompt[1:] - prompt[:-1]
    # each step adds the last reply and its tool results to the context; calibrated through /tokenize,
    # listings and logs are scaled by the measured ratio, not cut token by token: within ~20 % here. The
    # reply carried back is the model's, or the scripted call where the model's was cut short (shorter
    # than its 32 output tokens), so the bound counts the tool results only
    results = AGENT_CONVERSATION["tool_result_tokens"]
    assert (growth >= 0.8 * results).all(), list(prompt)
    assert prompt[0] > remote_tokens(llama_agent_server, tools_text())  # the template renders the tools
    assert prompt[-1] >= 0.75 * AGENT_CONTEXT_TOKENS  # the session fills most of the server's context
    # the slot holds the last step's prompt: all of it is read from the cache, only the new part prefilled
    assert (cached[1:] >= prompt[:-1] - STEP_MARKUP_TOKENS).all(), list(zip(prompt, cached, strict=True))


@pytest.mark.parametrize("api", ["chat", "messages"])
def test_the_models_own_tool_calls_are_read_and_carried_into_the_next_request(
    llama_agent_server: ServerProcess, api: str
) -> None:
    """After a scripted call in its context the model writes the <tool_call> form; llama-server parses it
    into streamed tool calls, which the next request carries back with their results, as a session does."""
    backend = Backend(name=api, url=llama_agent_server.url, engine="llamacpp", api=api)
    model = Model(name=SERVED_MODEL, max_tokens=32, ignore_eos=True, temperature=0.0)
    scripted = tool_call("call_scripted", "read_file", json.dumps({"path": "stats/mean.py"}))
    messages = [
        {"role": "system", "content": "You are a coding agent: call the tools to inspect and fix code."},
        {"role": "user", "content": "`mean` in stats/mean.py fails on an empty list. Fix it."},
        {"role": "assistant", "content": None, "tool_calls": [scripted]},
        tool_result("call_scripted", "def mean(values):\n    return sum(values) / len(values)\n"),
    ]
    client = EngineClient(backend)
    try:
        first = client.stream(*request_for(backend, model, messages, tools=TOOLS))
        assert measure(first.raw).status == STATUS_OK, first.raw.error
        assert first.tool_calls, f"the model called no tool: {first.text!r}"
        calls = [tool_call(call.id, call.name, call.arguments) for call in first.tool_calls]
        messages += [{"role": "assistant", "content": first.text or None, "tool_calls": calls}]
        messages += [
            tool_result(call.id, "tests/test_mean.py:3: assert mean([]) is None") for call in first.tool_calls
        ]
        second = client.stream(*request_for(backend, model, messages, tools=TOOLS))
    finally:
        client.close()
    assert {call.name for call in first.tool_calls} <= {tool["function"]["name"] for tool in TOOLS}
    assert all(call.id for call in first.tool_calls)
    assert measure(second.raw).status == STATUS_OK, second.raw.error
    assert first.raw.prompt_tokens is not None and second.raw.prompt_tokens is not None
    assert second.raw.prompt_tokens > first.raw.prompt_tokens
    assert (
        second.raw.cached_tokens is not None
        and second.raw.cached_tokens >= first.raw.prompt_tokens - STEP_MARKUP_TOKENS
    )


def test_without_jinja_a_session_fails_at_its_first_step_naming_the_flag(
    llama_server: ServerProcess, tmp_path: Path
) -> None:
    """The shared server runs --no-jinja: llama-server refuses a request carrying tools with HTTP 500
    "tools param requires --jinja flag". Each record keeps that message, the session ends at its first
    step and counts as its tier's one (failed) iteration; the engine answering, the tier is marked refused
    (not held, not run again) and the run exits ENGINE_REFUSED naming the flag."""
    backend = {"name": "nojinja", "engine": "llamacpp", "url": llama_server.url, "timeouts": TIMEOUTS}
    scenario = agent_scenario([backend], SERVED_MODEL, tool_result_tokens=50)
    run = run_campaign(scenario, tmp_path, returncodes=(ENGINE_REFUSED,))
    records = pd.read_parquet(run.run_dir / "records.parquet")
    phases = pd.read_csv(run.run_dir / "phases.csv")
    assert list(phases["attempt"]) == [0] and list(phases["iterations_done"]) == [1]
    assert not phases["complete"].any() and phases["note"].str.contains("refused:.*--jinja").all()
    assert list(records["attempt"]) == [0] and (records["turn"] == 0).all(), records[["turn", "error"]]
    assert (records["status"] == "http_500").all()
    assert records["error"].str.contains("--jinja").all(), list(records["error"])


def test_ping_checks_tools_where_a_backend_carries_agent_sessions(
    llama_server: ServerProcess, llama_agent_server: ServerProcess
) -> None:
    """`grill ping` sends a request carrying the agent's tools to a backend with agent sessions: the
    --no-jinja server's refusal is named, the --jinja one passes."""
    from grill_locust.ping import check_backend

    for server, accepts in ((llama_server, False), (llama_agent_server, True)):
        backend = Backend.model_validate(agent_backend("b", server, "chat"))
        check = check_backend(backend, [SERVED_MODEL], tools=TOOLS)
        assert check.streams and check.tools is accepts, check.note
        assert accepts or "--jinja" in check.note
    plain = check_backend(Backend.model_validate(agent_backend("b", llama_server, "chat")), [SERVED_MODEL])
    assert plain.tools is None  # no agent sessions on it: not checked

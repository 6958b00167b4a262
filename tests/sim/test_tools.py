"""A request that offers tools gets one tool call, streamed as vLLM streams it, fixed by its seed, with
arguments valid for the tool's schema and usage that counts exactly what was streamed and prompted."""

from __future__ import annotations

import json
from collections.abc import Iterator

import jsonschema
import pytest
from sim_driver import TruthSim, chat_payload, request, truth_of

from grill_locust.client import EngineClient
from grill_locust.client import chat_payload as client_chat_payload
from grill_locust.config import Backend
from grill_locust.record import measure
from grill_locust.sim import SimProcess


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TruthSim]:
    truth = tmp_path_factory.mktemp("tools") / "truth.jsonl"
    args = ["--reasoning-tokens", "0", "--step-a-ms", "3"]  # short steps: tool calls are dozens of tokens
    with SimProcess.start("vllm", truth_log=str(truth), extra_args=args) as process:
        yield TruthSim(process, truth)


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
                "required": ["path", "limit"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "grep",
            "description": "Search the repository",
            "parameters": {
                "type": "object",
                "properties": {
                    "pattern": {"type": "string"},
                    "ignore_case": {"type": "boolean"},
                    "paths": {"type": "array", "items": {"type": "string"}},
                    "mode": {"enum": ["files", "lines"]},
                },
                "required": ["pattern", "ignore_case", "paths", "mode"],
            },
        },
    },
]
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}
# a conversation an agent carries forward: its call, the tool's answer
HISTORY = [
    {"role": "system", "content": "You are a coding agent. " * 20},
    {"role": "user", "content": "Why does the cache test fail?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "chatcmpl-tool-0123",
                "type": "function",
                "function": {
                    "name": "read_file",
                    "arguments": '{"path": "tests/test_cache.py", "limit": 40}',
                },
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "chatcmpl-tool-0123",
        "content": "def test_lru():\n    assert cache.get(1)\n",
    },
]


def tool_payload(content: str = "Find the bug", max_tokens: int = 64, **extra) -> dict:
    payload = chat_payload(content, max_tokens=max_tokens, tools=TOOLS, tool_choice="auto")
    del payload["ignore_eos"]  # an answer with a call stops by itself unless a test asks otherwise
    return {**payload, **extra}


def tool_deltas(chunks: list[dict]) -> list[dict]:
    return [d for c in chunks for ch in c["choices"] for d in ch["delta"].get("tool_calls", [])]


def test_tool_call_streams_as_vllm_and_the_client_reads_it_whole(sim: TruthSim) -> None:
    client = EngineClient(Backend.model_validate({"name": "sim", "url": sim.process.url, "engine": "vllm"}))
    model = type("Model", (), {"name": "grill-sim", "max_tokens": 64, "temperature": 0.0})()
    payload = client_chat_payload(model, HISTORY, tools=TOOLS)
    result = client.stream("/v1/chat/completions", payload)
    metrics = measure(result.raw)
    assert (metrics.status, metrics.finish_reason, metrics.tokens_source) == ("ok", "tool_calls", "usage")
    (call,) = result.tool_calls
    assert call.id.startswith("chatcmpl-tool-") and len(call.id) == len("chatcmpl-tool-") + 32
    jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
    # one output event per output token: the call's header, then one piece of its arguments each
    assert metrics.output_tokens == len(result.raw.output_times)

    chunks = request(sim.port, "/v1/chat/completions", payload).chunks()
    deltas = tool_deltas(chunks)
    header, *pieces = deltas
    assert header == {
        "index": 0,
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": ""},
    }
    assert all(list(d) == ["index", "function"] and list(d["function"]) == ["arguments"] for d in pieces)
    assert "".join(d["function"]["arguments"] for d in pieces) == call.arguments
    finals = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch["finish_reason"]]
    assert finals == ["tool_calls"] and chunks[-1]["usage"]["completion_tokens"] == metrics.output_tokens


def test_the_call_is_fixed_by_the_seed_or_else_by_the_prompt(sim: TruthSim) -> None:
    def call(**extra) -> tuple[str, str, str]:
        chunks = request(sim.port, "/v1/chat/completions", tool_payload(**extra)).chunks()
        header, *pieces = tool_deltas(chunks)
        return header["id"], header["function"]["name"], "".join(p["function"]["arguments"] for p in pieces)

    calls = [call(seed=seed) for seed in range(4)]
    assert call(seed=3) == calls[3]
    assert call(temperature=1.0) == call(temperature=1.0)  # no seed: the prompt decides, even when sampling
    assert len({c[1] for c in calls}) == 2 and len({c[2] for c in calls}) == 4
    for _, name, arguments in calls:
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])


def test_usage_counts_the_tools_and_the_tool_history_as_tokenize_does(sim: TruthSim) -> None:
    body = {"model": "grill-sim", "messages": HISTORY, "tools": TOOLS}
    with_tools = request(sim.port, "/tokenize", body).json()["count"]
    without_tools = request(sim.port, "/tokenize", {"messages": HISTORY}).json()["count"]
    without_history = request(sim.port, "/tokenize", {"messages": HISTORY[:2], "tools": TOOLS}).json()
    assert with_tools > without_tools > 0 and with_tools > without_history["count"]
    payload = {**tool_payload(seed=3), "messages": HISTORY}
    result = request(sim.port, "/v1/chat/completions", payload)
    usage = result.chunks()[-1]["usage"]
    assert usage["prompt_tokens"] == with_tools
    assert usage["completion_tokens"] == len(result.output_times()) + len(tool_deltas(result.chunks()))
    truth = truth_of(sim, result.headers["x-request-id"])
    assert (truth["prompt_tokens"], truth["output_tokens"], truth["finish_reason"]) == (
        with_tools,
        usage["completion_tokens"],
        "tool_calls",
    )


def test_ignore_eos_fills_max_tokens_with_text_then_the_call(sim: TruthSim) -> None:
    result = request(sim.port, "/v1/chat/completions", tool_payload(max_tokens=48, ignore_eos=True, seed=1))
    chunks = result.chunks()
    assert chunks[-1]["usage"]["completion_tokens"] == 48
    kinds = ["tool" if ch["delta"].get("tool_calls") else "text" for c in chunks[1:-1] for ch in c["choices"]]
    text_tokens = kinds.index("tool")
    assert text_tokens > 0 and set(kinds[text_tokens:]) == {"tool"}
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"


def test_a_call_cut_by_max_tokens_ends_with_length(sim: TruthSim) -> None:
    payload = tool_payload(max_tokens=12, ignore_eos=True, seed=1)  # the call needs more than 12 tokens
    chunks = request(sim.port, "/v1/chat/completions", payload).chunks()
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert len(tool_deltas(chunks)) == 12
    whole = request(sim.port, "/v1/chat/completions", {**payload, "stream": False}).json()
    (choice,) = whole["choices"]
    assert choice["finish_reason"] == "length" and choice["message"]["tool_calls"] == []


def test_not_streamed_the_call_is_in_the_message(sim: TruthSim) -> None:
    streamed = request(sim.port, "/v1/chat/completions", tool_payload(seed=5))
    header, *pieces = tool_deltas(streamed.chunks())
    whole = request(sim.port, "/v1/chat/completions", tool_payload(seed=5, stream=False)).json()
    (choice,) = whole["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"] == [
        {
            "id": header["id"],
            "type": "function",
            "function": {
                "name": header["function"]["name"],
                "arguments": "".join(p["function"]["arguments"] for p in pieces),
            },
        }
    ]
    assert whole["usage"]["completion_tokens"] == streamed.chunks()[-1]["usage"]["completion_tokens"]


def test_tool_choice_none_or_a_named_tool(sim: TruthSim) -> None:
    plain = request(sim.port, "/v1/chat/completions", tool_payload(tool_choice="none", max_tokens=6))
    assert not tool_deltas(plain.chunks()) and len(plain.output_times()) == 6
    named = {"type": "function", "function": {"name": "grep"}}
    for seed in range(2):
        header, *_ = tool_deltas(
            request(sim.port, "/v1/chat/completions", tool_payload(tool_choice=named, seed=seed)).chunks()
        )
        assert header["function"]["name"] == "grep"


def test_malformed_tools_are_refused(sim: TruthSim) -> None:
    for tools, tool_choice in (([{"type": "function"}], "auto"), (TOOLS, {"function": {"name": "rm"}})):
        payload = {**tool_payload(), "tools": tools, "tool_choice": tool_choice}
        result = request(sim.port, "/v1/chat/completions", payload)
        assert result.status == 400 and "tool" in result.json()["error"]["message"]
    history = [{"role": "assistant", "content": "x", "tool_calls": "read_file"}]
    result = request(sim.port, "/v1/chat/completions", {**tool_payload(), "messages": history})
    assert result.status == 400 and "tool_calls" in result.json()["error"]["message"]


def test_a_user_message_after_the_work_began_gets_text_a_task_or_a_tool_result_a_call(sim: TruthSim) -> None:
    # an agent's model calls tools to start a task and after each result, and answers its user's later
    # questions (the final answer, a summary for compaction) in text
    asked_again = [
        *HISTORY,
        {"role": "assistant", "content": "Found it."},
        {"role": "user", "content": "Sum up."},
    ]
    for messages, calls in ((HISTORY[:2], True), (HISTORY, True), (asked_again, False)):
        payload = {**tool_payload(max_tokens=40), "messages": messages}
        chunks = request(sim.port, "/v1/chat/completions", payload).chunks()
        assert bool(tool_deltas(chunks)) is calls
        text = "".join(c["delta"].get("content") or "" for ch in chunks for c in ch["choices"])
        assert calls or text

"""The simulated engine serves Anthropic's Messages API: the event stream in order (thinking, text,
tool_use), usage with cached tokens, the same prompt as the chat request with the same content, and
errors in Anthropic's shape, the injected faults included."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from sim_driver import StreamResult, TruthSim, request, truth_of

from grill_locust.sim import SimProcess

KEY = "sim-key"
REASONING_TOKENS = 3
READ_FILE_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["path", "limit"],
}
TOOLS = [{"name": "read_file", "description": "Read a file", "input_schema": READ_FILE_SCHEMA}]
SYSTEM = "You are a coding agent working in a Python repository. " * 12


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TruthSim]:
    truth = tmp_path_factory.mktemp("messages") / "truth.jsonl"
    args = ["--reasoning-tokens", str(REASONING_TOKENS), "--step-a-ms", "3"]
    with SimProcess.start("vllm", truth_log=str(truth), extra_args=args, api_key=KEY) as process:
        yield TruthSim(process, truth)


def messages_body(content: Any = "Why does the cache test fail?", max_tokens: int = 8, **extra: Any) -> dict:
    return {
        "model": "grill-sim",
        "max_tokens": max_tokens,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": content}],
        "stream": True,
        **extra,
    }


def post(sim: TruthSim, body: dict, headers: dict[str, str] | None = None, **options: Any) -> StreamResult:
    return request(sim.port, "/v1/messages", body, headers={"x-api-key": KEY, **(headers or {})}, **options)


def events(result: StreamResult) -> list[dict]:
    """Each event's data, after checking that its `event:` name is its type, as Anthropic's are."""
    data = [json.loads(payload) for payload in result.payloads]
    assert result.event_names == [d["type"] for d in data]
    return data


def deltas(data: list[dict], kind: str) -> list[dict]:
    return [d["delta"] for d in data if d["type"] == "content_block_delta" and d["delta"]["type"] == kind]


def test_stream_is_thinking_then_text_in_anthropics_event_order(sim: TruthSim) -> None:
    result = post(sim, messages_body("Explain the LRU cache, please", max_tokens=8, ignore_eos=True))
    assert result.status == 200 and result.ended_cleanly
    assert result.headers["content-type"].startswith("text/event-stream")
    data = events(result)
    assert [d["type"] for d in data] == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * REASONING_TOKENS,
        "content_block_delta",  # the thinking block's signature
        "content_block_stop",
        "content_block_start",
        *["content_block_delta"] * (8 - REASONING_TOKENS),
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    message = data[0]["message"]
    assert message["id"].startswith("msg_") and message["model"] == "grill-sim"
    assert (message["type"], message["role"], message["content"], message["stop_reason"]) == (
        "message",
        "assistant",
        [],
        None,
    )
    usage = message["usage"]
    assert set(usage) == {
        "input_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "output_tokens",
    }
    assert data[1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "thinking", "thinking": "", "signature": ""},
    }
    assert all(d["thinking"] for d in deltas(data, "thinking_delta")) and deltas(data, "signature_delta")
    text_start = data[4 + REASONING_TOKENS]
    assert text_start["index"] == 1 and text_start["content_block"] == {"type": "text", "text": ""}
    assert all(
        d["index"] == 1
        for d in data
        if d["type"] == "content_block_delta" and d["delta"]["type"] == "text_delta"
    )
    final = data[-2]
    assert final["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert (
        final["usage"]["output_tokens"]
        == 8
        == len(deltas(data, "thinking_delta") + deltas(data, "text_delta"))
    )
    truth = truth_of(sim, result.headers["x-request-id"])
    assert (truth["api"], truth["endpoint"], truth["output_tokens"]) == ("messages", "/v1/messages", 8)
    prompt_tokens = (
        usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
    )
    assert (truth["prompt_tokens"], truth["cached_tokens"]) == (
        prompt_tokens,
        usage["cache_read_input_tokens"],
    )


def test_tool_use_block_streams_input_json_deltas_that_join_to_valid_json(sim: TruthSim) -> None:
    result = post(sim, messages_body(max_tokens=64, tools=TOOLS, seed=4))
    data = events(result)
    (start,) = [
        d for d in data if d["type"] == "content_block_start" and d["content_block"]["type"] == "tool_use"
    ]
    block = start["content_block"]
    assert block["name"] == "read_file" and block["id"].startswith("toolu_") and block["input"] == {}
    pieces = [d for d in data if d["type"] == "content_block_delta" and d["index"] == start["index"]]
    assert all(d["delta"]["type"] == "input_json_delta" for d in pieces)
    assert pieces[0]["delta"]["partial_json"] == ""  # the call's header token, as Anthropic opens a tool_use
    arguments = json.loads("".join(d["delta"]["partial_json"] for d in pieces))
    jsonschema.validate(arguments, READ_FILE_SCHEMA)
    assert data[data.index(start) + len(pieces) + 1] == {
        "type": "content_block_stop",
        "index": start["index"],
    }
    final = data[-2]
    assert final["delta"]["stop_reason"] == "tool_use"
    outputs = deltas(data, "thinking_delta") + deltas(data, "text_delta") + [d["delta"] for d in pieces]
    assert final["usage"]["output_tokens"] == len(outputs)

    whole = post(sim, {**messages_body(max_tokens=64, tools=TOOLS, seed=4), "stream": False}).json()
    assert [b["type"] for b in whole["content"]][-1] == "tool_use"
    assert whole["content"][-1] == {**block, "input": arguments}
    assert whole["stop_reason"] == "tool_use" and whole["usage"]["output_tokens"] == len(outputs)


def test_a_messages_request_is_the_prompt_of_the_chat_request_with_the_same_content(sim: TruthSim) -> None:
    call = {
        "type": "tool_use",
        "id": "toolu_01",
        "name": "read_file",
        "input": {"path": "cache.py", "limit": 40},
    }
    result_block = {
        "type": "tool_result",
        "tool_use_id": "toolu_01",
        "content": [{"type": "text", "text": "class LruCache: ..."}],
    }
    anthropic_messages = [
        {"role": "user", "content": "Why does the cache test fail?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me look."}, call]},
        {"role": "user", "content": [result_block, {"type": "text", "text": "Go on."}]},
    ]
    chat_messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Why does the cache test fail?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "chatcmpl-tool-01",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "cache.py", "limit": 40}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "chatcmpl-tool-01", "content": "class LruCache: ..."},
        {"role": "user", "content": "Go on."},
    ]
    chat_tools = [
        {
            "type": "function",
            "function": {"name": "read_file", "description": "Read a file", "parameters": READ_FILE_SCHEMA},
        }
    ]
    tokenized = request(sim.port, "/tokenize", {"messages": chat_messages, "tools": chat_tools}).json()[
        "count"
    ]
    system_blocks = [{"type": "text", "text": SYSTEM}]
    body = {
        **messages_body(max_tokens=2),
        "system": system_blocks,
        "messages": anthropic_messages,
        "tools": TOOLS,
    }
    usage = events(post(sim, body))[0]["message"]["usage"]
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] == tokenized


def test_a_repeated_prefix_is_read_from_the_cache(sim: TruthSim) -> None:
    system = "Review the diff below and say what breaks. " * 30
    questions = ("First question?", "Second question?")
    first, second = (
        events(post(sim, {**messages_body(q, max_tokens=2), "system": system}))[0]["message"]["usage"]
        for q in questions
    )
    prompts = [
        request(
            sim.port,
            "/tokenize",
            {"messages": [{"role": "system", "content": system}, {"role": "user", "content": q}]},
        ).json()["tokens"]
        for q in questions
    ]
    shared = next(i for i, (a, b) in enumerate(zip(*prompts, strict=False)) if a != b)
    assert first["cache_read_input_tokens"] == 0
    assert second["cache_read_input_tokens"] == shared // 16 * 16 > 0  # the shared prefix's full KV blocks
    assert second["input_tokens"] + second["cache_read_input_tokens"] == len(prompts[1])


@pytest.mark.parametrize(
    ("change", "headers", "status", "error_type"),
    [
        ({"max_tokens": None}, {}, 400, "invalid_request_error"),
        ({}, {"x-api-key": "wrong"}, 401, "authentication_error"),
        ({"model": "claude-elsewhere"}, {}, 404, "not_found_error"),
        (
            {"max_tokens": 140_000},
            {},
            400,
            "invalid_request_error",
        ),  # past the context: 400, as vLLM and llama-server
        ({"messages": [{"role": "robot", "content": "hi"}]}, {}, 400, "invalid_request_error"),
        ({}, {"x-grill-fault": "429"}, 429, "rate_limit_error"),
        ({}, {"x-grill-fault": "503"}, 503, "overloaded_error"),
    ],
)
def test_errors_come_in_anthropics_shape(
    sim: TruthSim, change: dict, headers: dict, status: int, error_type: str
) -> None:
    body = {k: v for k, v in {**messages_body(), **change}.items() if v is not None}
    result = post(sim, body, headers)
    assert result.status == status
    answer = result.json()
    assert answer["type"] == "error" and answer["error"]["type"] == error_type and answer["error"]["message"]


def test_the_key_may_come_as_bearer_and_none_is_refused(sim: TruthSim) -> None:
    bearer = request(
        sim.port, "/v1/messages", messages_body(max_tokens=1), headers={"authorization": f"Bearer {KEY}"}
    )
    assert bearer.status == 200
    assert request(sim.port, "/v1/messages", messages_body(max_tokens=1)).status == 401


def test_a_fault_mid_stream_ends_it_with_an_error_event(sim: TruthSim) -> None:
    result = post(sim, messages_body(max_tokens=8, ignore_eos=True), {"x-grill-fault": "error_mid"})
    assert result.status == 200 and result.ended_cleanly
    data = events(result)
    assert data[0]["type"] == "message_start" and data[-1]["type"] == "error"
    assert data[-1]["error"]["type"] == "api_error" and "message_stop" not in result.event_names
    written = len(deltas(data, "thinking_delta") + deltas(data, "text_delta"))
    assert 1 <= written < 8
    truth = truth_of(sim, result.headers["x-request-id"])
    assert (truth["fault"], truth["outcome"], truth["output_tokens"]) == ("error_mid", "error_mid", written)


def test_a_cut_stream_has_no_message_stop(sim: TruthSim) -> None:
    result = post(sim, messages_body(max_tokens=8, ignore_eos=True), {"x-grill-fault": "cut"})
    assert result.status == 200 and not result.ended_cleanly
    assert "message_stop" not in result.event_names and result.event_names[0] == "message_start"

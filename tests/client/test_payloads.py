"""Request bodies: the ignore-EOS setting goes out under the engine's own parameter name, or not at all;
a conversation in OpenAI's form becomes the body of the backend's API (chat, or Anthropic's messages)."""

from __future__ import annotations

from typing import Any

import pytest

from grill_locust.client import CHAT_PATH, MESSAGES_PATH, chat_payload, completions_payload, request_for
from grill_locust.client.payloads import MESSAGES_DEFAULT_MAX_TOKENS
from grill_locust.config import Backend, Model
from grill_locust.engines import ENGINE_NAMES, engine_facts

MODEL = Model(name="devstral", max_tokens=16, ignore_eos=True)
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_ignore_eos_is_sent_as_the_engines_parameter(engine: str) -> None:
    parameter = engine_facts(engine).ignore_eos_param
    for body in (
        chat_payload(MODEL, MESSAGES, engine=engine),
        completions_payload(MODEL, "x", engine=engine),
    ):
        flags = {key for key, value in body.items() if value is True and key != "stream"}
        assert flags == ({parameter} if parameter else set())


def test_engines_without_the_parameter_get_none_and_a_model_without_ignore_eos_sends_none() -> None:
    assert "ignore_eos" in chat_payload(MODEL, MESSAGES, engine="vllm")
    assert "ignore_eos" not in chat_payload(MODEL, MESSAGES, engine="tgi")
    assert "ignore_eos" not in chat_payload(MODEL, MESSAGES, engine="ollama")
    plain = Model(name="devstral", max_tokens=16)
    assert "ignore_eos" not in chat_payload(plain, MESSAGES, engine="vllm")
    assert chat_payload(MODEL, MESSAGES)["ignore_eos"] is True  # any OpenAI-compatible server by default


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]
AGENT_TURNS = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing test."},
    {
        "role": "assistant",
        "content": "Reading both.",
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
            },
            {
                "id": "call_b",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "b.py"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_a", "content": "def a(): ..."},
    {"role": "tool", "tool_call_id": "call_b", "content": "def b(): ..."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_c",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "c.py", "li'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_c", "content": "def c(): ..."},
]


def messages_backend(engine: str = "vllm", **extra: Any) -> Backend:
    return Backend(name="b", engine=engine, url="http://127.0.0.1:8000", api="messages", **extra)


def test_a_messages_backend_gets_anthropics_route_and_body() -> None:
    path, body = request_for(messages_backend(), MODEL, AGENT_TURNS, tools=TOOLS)
    assert path == MESSAGES_PATH == "/v1/messages"
    assert body["system"] == "You are a coding agent."  # apart, not among the messages
    assert body["messages"] == [
        {"role": "user", "content": "Fix the failing test."},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading both."},
                {"type": "tool_use", "id": "call_a", "name": "read_file", "input": {"path": "a.py"}},
                {"type": "tool_use", "id": "call_b", "name": "read_file", "input": {"path": "b.py"}},
            ],
        },
        # consecutive tool results: one user message of tool_result blocks
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_a", "content": "def a(): ..."},
                {"type": "tool_result", "tool_use_id": "call_b", "content": "def b(): ..."},
            ],
        },
        # arguments cut short are kept whole, not dropped to {}
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "call_c",
                    "name": "read_file",
                    "input": {"raw_arguments": '{"path": "c.py", "li'},
                }
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "call_c", "content": "def c(): ..."}],
        },
    ]
    assert body["tools"] == [
        {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "input_schema": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        }
    ]
    assert body["tool_choice"] == {"type": "auto"}
    assert (body["max_tokens"], body["stream"], body["ignore_eos"]) == (16, True, True)
    assert "stream_options" not in body  # OpenAI's; Anthropic streams carry usage anyway


def test_a_messages_body_always_has_max_tokens_and_the_sampling_and_extra_body() -> None:
    sampled = Model(name="devstral", max_tokens=64, temperature=0.2, top_p=0.9, top_k=20)
    _, body = request_for(messages_backend(extra_body={"metadata": {"user_id": "grill"}}), sampled, MESSAGES)
    assert {k: body[k] for k in ("max_tokens", "temperature", "top_p", "top_k")} == {
        "max_tokens": 64,
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 20,
    }
    assert body["metadata"] == {"user_id": "grill"}
    assert "system" not in body and "tools" not in body
    _, named_only = request_for(messages_backend(), "devstral", MESSAGES)  # a model given by name only
    assert named_only["max_tokens"] == MESSAGES_DEFAULT_MAX_TOKENS


def test_chat_and_completions_backends_keep_their_bodies() -> None:
    chat = Backend(name="b", engine="vllm", url="http://127.0.0.1:8000")
    assert request_for(chat, MODEL, AGENT_TURNS[:2], tools=TOOLS) == (
        CHAT_PATH,
        chat_payload(MODEL, AGENT_TURNS[:2], engine="vllm", tools=TOOLS),
    )

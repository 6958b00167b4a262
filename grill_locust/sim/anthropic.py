"""Anthropic's Messages wire format (`POST /v1/messages`): the request read into the chat form the
engine serves, the streamed events, the whole message and the error bodies.

As vLLM does, a Messages request is turned into the OpenAI chat request with the same content, so it
renders to the same prompt tokens and meets the same engine; only what goes on the wire differs.
"""

from __future__ import annotations

import json
from typing import Any

from grill_locust.sim.tools import ToolCall

MESSAGES_PATH = "/v1/messages"
MESSAGES = "messages"  # the API, as the truth log names it beside chat and completions
TOOL_USE_ID_PREFIX = "toolu_"
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
}
THINKING = "thinking"
TEXT = "text"
TOOL_USE = "tool_use"
# fields a Messages request shares with a chat request (sampling, seed, and the engines' extensions)
_SHARED_FIELDS = ("model", "stream", "temperature", "top_p", "top_k", "seed", "ignore_eos", "min_tokens")


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def error_body(status: int, message: str, param: str | None = None) -> bytes:
    """Anthropic's error JSON (it names no parameter: `param` is there to match the OpenAI form's call)."""
    error = {"type": ERROR_TYPES.get(status, "api_error"), "message": message}
    return _dumps({"type": "error", "error": error}).encode()


def event(name: str, data: bytes) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + data + b"\n\n"


def error_event(status: int, message: str) -> bytes:
    """An error after the stream began: Anthropic's `event: error`."""
    return event("error", error_body(status, message))


def usage_body(prompt_tokens: int, cached_tokens: int, output_tokens: int) -> dict[str, int]:
    """Anthropic's usage: `input_tokens` are the prompt tokens not read from the cache, so the prompt is
    input + cache_read + cache_creation (an engine's prefix cache writes nothing billed: 0)."""
    return {
        "input_tokens": prompt_tokens - cached_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached_tokens,
        "output_tokens": output_tokens,
    }


# -- the request
def chat_request(body: dict[str, object]) -> dict[str, Any]:
    """The chat completion request with the same content as the Messages request `body` (OpenAI
    messages, tools and tool_choice, and the shared fields); ValueError names a bad field."""
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise ValueError("max_tokens: Field required")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError("max_tokens: expected an integer of at least 1")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages: Field required (a non-empty list)")
    chat_messages: list[dict[str, object]] = []
    system = _text_of(body.get("system"), "system")
    if system:
        chat_messages.append({"role": "system", "content": system})
    for index, message in enumerate(messages):
        _add_message(chat_messages, message, f"messages.{index}")
    request: dict[str, object] = {k: body[k] for k in _SHARED_FIELDS if k in body}
    request.update(messages=chat_messages, max_tokens=max_tokens)
    tools = body.get("tools")
    if tools is not None:
        request["tools"] = _chat_tools(tools)
    request["tool_choice"] = _chat_tool_choice(body.get("tool_choice"))
    return request


def _add_message(chat_messages: list[dict[str, object]], message: object, place: str) -> None:
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        raise ValueError(f"{place}.role: expected user or assistant")
    role = message["role"]
    content = message.get("content")
    if isinstance(content, str):
        chat_messages.append({"role": role, "content": content})
        return
    if not isinstance(content, list):
        raise ValueError(f"{place}.content: expected a string or a list of content blocks")
    texts: list[str] = []
    calls: list[dict[str, object]] = []
    for number, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input") or {}, ensure_ascii=False)
            function = {"name": str(block.get("name", "")), "arguments": arguments}
            calls.append({"id": str(block.get("id", "")), "type": "function", "function": function})
        elif kind == "tool_result":  # a tool message of its own, before the user's text (as vLLM orders them)
            result = _text_of(block.get("content"), f"{place}.content.{number}.content")
            chat_messages.append(
                {"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": result}
            )
        elif kind not in ("thinking", "redacted_thinking", "image"):
            raise ValueError(
                f"{place}.content.{number}.type: expected text, tool_use, tool_result, thinking or image"
            )
    if role == "user" and not texts:
        return
    chat_message: dict[str, Any] = {"role": role, "content": "".join(texts) if texts or not calls else None}
    if calls:
        chat_message["tool_calls"] = calls
    chat_messages.append(chat_message)


def _text_of(content: object, place: str) -> str:
    """A string, or the text of a list of text blocks (system prompts, tool results)."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise ValueError(f"{place}: expected a string or a list of text blocks")
    return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")


def _chat_tools(tools: object) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise ValueError("tools: expected a list of tools")
    chat_tools = []
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or not tool["name"]:
            raise ValueError(f"tools.{index}: expected {{name, description, input_schema}}")
        function = {
            "name": tool["name"],
            "description": tool.get("description", ""),
            "parameters": tool.get("input_schema") or {},
        }
        chat_tools.append({"type": "function", "function": function})
    return chat_tools


def _chat_tool_choice(choice: object) -> object:
    if choice is None:
        return None
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind in ("auto", "none"):
        return kind
    if kind == "any":
        return "required"
    if kind == "tool" and isinstance(choice, dict):
        return {"type": "function", "function": {"name": choice.get("name")}}
    raise ValueError("tool_choice: expected {type: auto | any | tool | none}")


# -- the answer
class MessageStream:
    """The events of one streamed answer, token by token: reasoning tokens in a thinking block, then
    text, then the tool call in a tool_use block (its header token opens the block with an empty
    input_json_delta, as Anthropic sends it). Each token is one content_block_delta."""

    __slots__ = ("message_id", "model", "reasoning_tokens", "call_at", "call", "block", "kind", "delta_open")

    def __init__(
        self, message_id: str, model: str, reasoning_tokens: int, call_at: int, call: ToolCall | None
    ) -> None:
        self.message_id = message_id
        self.model = model
        self.reasoning_tokens = reasoning_tokens
        self.call_at = call_at  # index of the call's header token
        self.call = call
        self.block = -1  # index of the open content block
        self.kind: str | None = None  # its type
        self.delta_open = b""

    def token(self, index: int, token_json: bytes, usage: dict[str, int]) -> bytes:
        """The events the output token `index` adds; `token_json` is its text as a JSON string (text and
        thinking tokens); `usage` goes in message_start, with the first token."""
        out = []
        if index == 0:
            out.append(self._message_start(usage))
        kind = THINKING if index < self.reasoning_tokens else TEXT if index < self.call_at else TOOL_USE
        if kind != self.kind:
            out.append(self._open(kind))
        if kind == TOOL_USE:
            assert self.call is not None
            piece = index - self.call_at
            token_json = _dumps(self.call.argument_pieces[piece - 1] if piece else "").encode()
        out.append(self.delta_open + token_json + b"}}\n\n")
        return b"".join(out)

    def end(self, finish_reason: str, usage: dict[str, int]) -> bytes:
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": STOP_REASONS[finish_reason], "stop_sequence": None},
        }
        delta["usage"] = usage
        return (
            self._close()
            + event("message_delta", _dumps(delta).encode())
            + event("message_stop", b'{"type":"message_stop"}')
        )

    def broken_event(self) -> bytes:
        """A malformed JSON event (the `bad_json` fault): the object is cut off."""
        return b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"text":"\\u00\n\n'

    def _message_start(self, usage: dict[str, int]) -> bytes:
        message: dict[str, object] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        return event("message_start", _dumps({"type": "message_start", "message": message}).encode())

    def _open(self, kind: str) -> bytes:
        closing = self._close()
        self.block += 1
        self.kind = kind
        block: dict[str, object]
        if kind == THINKING:
            block, delta_head = (
                {"type": THINKING, "thinking": "", "signature": ""},
                '"thinking_delta","thinking"',
            )
        elif kind == TEXT:
            block, delta_head = {"type": TEXT, "text": ""}, '"text_delta","text"'
        else:
            assert self.call is not None
            call_id = TOOL_USE_ID_PREFIX + self.call.call_hex
            block = {"type": TOOL_USE, "id": call_id, "name": self.call.name, "input": {}}
            delta_head = '"input_json_delta","partial_json"'
        self.delta_open = (
            f'event: content_block_delta\ndata: {{"type":"content_block_delta","index":{self.block},'
            f'"delta":{{"type":{delta_head}:'
        ).encode()
        start = {"type": "content_block_start", "index": self.block, "content_block": block}
        return closing + event("content_block_start", _dumps(start).encode())

    def _close(self) -> bytes:
        if self.kind is None:
            return b""
        out = b""
        if self.kind == THINKING:  # Anthropic closes a thinking block with its signature
            signature = {"type": "signature_delta", "signature": self.message_id}
            out = event(
                "content_block_delta",
                _dumps({"type": "content_block_delta", "index": self.block, "delta": signature}).encode(),
            )
        self.kind = None
        return out + event(
            "content_block_stop", _dumps({"type": "content_block_stop", "index": self.block}).encode()
        )


def message_body(
    message_id: str,
    model: str,
    reasoning: str | None,
    text: str,
    call: ToolCall | None,
    finish_reason: str,
    usage: dict[str, int],
) -> bytes:
    """A whole (non-streamed) answer: its content blocks in the order the stream would give them."""
    content: list[dict[str, object]] = []
    if reasoning:
        content.append({"type": THINKING, "thinking": reasoning, "signature": message_id})
    if text:
        content.append({"type": TEXT, "text": text})
    if call is not None:
        call_id = TOOL_USE_ID_PREFIX + call.call_hex
        content.append(
            {"type": TOOL_USE, "id": call_id, "name": call.name, "input": json.loads(call.arguments)}
        )
    body = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": STOP_REASONS[finish_reason],
        "stop_sequence": None,
        "usage": usage,
    }
    return _dumps(body).encode()

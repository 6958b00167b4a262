"""vLLM's OpenAI-server wire format: streamed chunks, full responses, usage and error bodies.

Chunks are rendered from byte templates made once per request; only the token text changes per
event, and its JSON form is pre-rendered (see `text.OUTPUT_JSON`). Field order and presence follow
vLLM's `model_dump_json(exclude_unset=True)` output.
"""

from __future__ import annotations

import json

from grill_locust.sim.tools import ToolCall

CHAT = "chat"
COMPLETIONS = "completions"
DONE_EVENT = b"data: [DONE]\n\n"
TOOL_CALL_ID_PREFIX = "chatcmpl-tool-"  # vLLM's


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def usage_body(
    prompt_tokens: int, completion_tokens: int, cached_tokens: int, reasoning_tokens: int | None = None
) -> dict[str, object]:
    """vLLM's usage object; `reasoning_tokens` is None unless the engine acts as a reasoning model
    (vLLM fills `completion_tokens_details` only when a reasoning parser is set)."""
    usage: dict[str, object] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }
    if reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return usage


class ChunkTemplates:
    """Byte templates for one streamed response; `event(json_token)` is the hot path."""

    __slots__ = (
        "kind",
        "response_id",
        "head",
        "content_open",
        "reasoning_open",
        "close_running",
        "close_final",
    )

    def __init__(self, kind: str, response_id: str, created: int, model: str) -> None:
        self.kind = kind
        self.response_id = response_id
        obj = "chat.completion.chunk" if kind == CHAT else "text_completion"
        self.head = f'data: {{"id":{_dumps(response_id)},"object":"{obj}","created":{created},"model":{_dumps(model)},'.encode()
        if kind == CHAT:
            self.content_open = self.head + b'"choices":[{"index":0,"delta":{"content":'
            self.reasoning_open = self.head + b'"choices":[{"index":0,"delta":{"reasoning_content":'
            self.close_running = b'},"logprobs":null,"finish_reason":null}]}\n\n'
            self.close_final = b'},"logprobs":null,"finish_reason":"%s","stop_reason":null}]}\n\n'
        else:
            self.content_open = self.head + b'"choices":[{"index":0,"text":'
            self.reasoning_open = self.content_open
            self.close_running = b',"logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'
            self.close_final = b',"logprobs":null,"finish_reason":"%s","stop_reason":null}]}\n\n'

    def role_event(self) -> bytes:
        """vLLM's first chat chunk: the role only, with empty content."""
        return (
            self.head
            + b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
        )

    def usage_event(
        self, prompt_tokens: int, completion_tokens: int, cached_tokens: int, reasoning_tokens: int | None
    ) -> bytes:
        usage = _dumps(usage_body(prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens)).encode()
        return self.head + b'"choices":[],"usage":' + usage + b"}\n\n"

    def broken_event(self) -> bytes:
        """A malformed JSON event (the `bad_json` fault): the object is cut off."""
        return self.content_open + b'"\\u00\n\n'

    def tool_call_openings(self, call: ToolCall) -> list[bytes]:
        """vLLM's streamed tool call, one chunk per output token (each still to be closed like a content
        chunk): the header (id, name, empty arguments), then one piece of the arguments text each."""
        start = self.head + b'"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,'
        header = (
            f'"id":{_dumps(TOOL_CALL_ID_PREFIX + call.call_hex)},"type":"function",'
            f'"function":{{"name":{_dumps(call.name)},"arguments":""}}}}]'
        )
        pieces = [f'"function":{{"arguments":{_dumps(piece)}}}}}]' for piece in call.argument_pieces]
        return [start + header.encode(), *(start + piece.encode() for piece in pieces)]


def message_tool_call(call: ToolCall) -> dict[str, object]:
    """A whole tool call, as a non-streamed chat answer's message carries it."""
    function = {"name": call.name, "arguments": call.arguments}
    return {"id": TOOL_CALL_ID_PREFIX + call.call_hex, "type": "function", "function": function}


def chat_response(
    response_id: str,
    created: int,
    model: str,
    content: str,
    reasoning: str | None,
    finish_reason: str,
    usage: dict[str, object],
    tool_calls: list[dict[str, object]] | None = None,
) -> bytes:
    body = {
        "id": response_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "reasoning_content": reasoning,
                    "content": content,
                    "tool_calls": tool_calls or [],
                },
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
        ],
        "usage": usage,
        "prompt_logprobs": None,
    }
    return _dumps(body).encode()


def completion_response(
    response_id: str, created: int, model: str, text: str, finish_reason: str, usage: dict[str, object]
) -> bytes:
    body = {
        "id": response_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
                "prompt_logprobs": None,
            }
        ],
        "usage": usage,
    }
    return _dumps(body).encode()


ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


def error_body(status: int, message: str, param: str | None = None) -> bytes:
    """OpenAI's error JSON, as vLLM sends it."""
    error = {"message": message, "type": ERROR_TYPES.get(status, "Error"), "param": param, "code": status}
    return _dumps({"error": error}).encode()


def error_event(status: int, message: str) -> bytes:
    """An error inside a 200 stream, then `[DONE]`, as vLLM ends a stream whose request failed."""
    return b"data: " + error_body(status, message) + b"\n\n" + DONE_EVENT


def json_body(value: object) -> bytes:
    return _dumps(value).encode()

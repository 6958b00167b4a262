"""llama.cpp's `llama-server` wire format: streamed chunks, whole responses, `timings`, errors, `/slots`,
`/v1/models` and `/tokenize` bodies.

Field order and presence follow what llama-server (b11434) writes: its JSON keeps insertion order, so
`choices` comes first and a chat chunk's `id` sits between `created` and `model`, a completion's at
the end. Chunks are rendered from byte templates made once per request, as in `wire`.
"""

from __future__ import annotations

import json

from grill_locust.sim.tools import ToolCall
from grill_locust.sim.wire import CHAT

INFILL = "infill"  # the wire kind of /infill: llama.cpp's own chunks (`content`, `stop`), not OpenAI's
SYSTEM_FINGERPRINT = "b0-grill-sim"  # llama-server's `b<build>-<commit>`; a build without git info says b0
RESPONSE_ID_PREFIX = "chatcmpl-"  # llama-server gives completions the chat prefix too
OWNED_BY = "llamacpp"
# llama-server advertises keep-alive on every reply, streams included, and closes after a stream anyway
HEADERS = [("server", "llama.cpp"), ("keep-alive", "timeout=5, max=100")]

INVALID_REQUEST = "invalid_request_error"
EXCEED_CONTEXT = "exceed_context_size_error"
ERROR_TYPES = {
    400: INVALID_REQUEST,
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    500: "server_error",
    501: "not_supported_error",
    503: "unavailable_error",
}


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def timings(
    cache_n: int, prompt_n: int, prompt_ms: float, predicted_n: int, predicted_ms: float
) -> dict[str, object]:
    """The `timings` object of a final chunk: `prompt_n` counts the prompt tokens computed (the cached
    `cache_n` are not), `predicted_ms` runs from the first output token to the last."""
    return {
        "cache_n": cache_n,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": 1e3 / prompt_ms * prompt_n if prompt_ms > 0 else 0.0,
        "predicted_n": predicted_n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / predicted_n if predicted_n else 0.0,
        "predicted_per_second": 1e3 / predicted_ms * predicted_n if predicted_ms > 0 else 0.0,
    }


def usage_body(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, object]:
    return {
        "completion_tokens": completion_tokens,
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


class ChunkTemplates:
    """Byte templates for one streamed response. The hot path (`content_open` + token + `close_running`)
    is shared with `wire.ChunkTemplates`; the end of a stream is llama.cpp's own: a chunk with the
    finish reason and an empty delta, `timings` on it, or on a usage chunk after it when usage was asked
    (chat). A completion's last chunk always carries usage and timings."""

    __slots__ = ("kind", "response_id", "content_open", "reasoning_open", "close_running", "_tail", "_fields")

    def __init__(self, kind: str, response_id: str, created: int, model: str) -> None:
        self.kind = kind
        self.response_id = response_id
        rid, name = _dumps(response_id), _dumps(model)
        obj = "chat.completion.chunk" if kind == CHAT else "text_completion"
        self._fields = {
            "created": created,
            "model": model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "object": obj,
        }
        if kind == CHAT:
            self._tail = f'"created":{created},"id":{rid},"model":{name},"system_fingerprint":"{SYSTEM_FINGERPRINT}","object":"{obj}"'
            self.content_open = b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":'
            self.reasoning_open = (
                b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"reasoning_content":'
            )
            self.close_running = b"}}]," + self._tail.encode() + b"}\n\n"
        else:
            self._tail = f'"created":{created},"model":{name},"system_fingerprint":"{SYSTEM_FINGERPRINT}","object":"{obj}"'
            self.content_open = b'data: {"choices":[{"text":'
            self.reasoning_open = self.content_open
            self.close_running = (
                b',"index":0,"logprobs":null,"finish_reason":null}],'
                + self._tail.encode()
                + b',"id":'
                + rid.encode()
                + b"}\n\n"
            )

    def role_event(self) -> bytes:
        """The first chat chunk: the role, content null; llama-server sends it with the first token."""
        return (
            b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],'
            + self._tail.encode()
            + b"}\n\n"
        )

    def broken_event(self) -> bytes:
        """A malformed JSON event (the `bad_json` fault): the object is cut off."""
        return self.content_open + b'"\\u00\n\n'

    def tool_call_openings(self, call: ToolCall) -> list[bytes]:
        """llama-server's streamed tool call (chat), one chunk per output token, each closed like a
        content chunk: the header (id, name, empty arguments), then one piece of the arguments each."""
        start = b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"tool_calls":[{"index":0,'
        header = (
            f'"id":{_dumps(call.call_hex)},"type":"function",'
            f'"function":{{"name":{_dumps(call.name)},"arguments":""}}}}]'
        )
        pieces = [f'"function":{{"arguments":{_dumps(piece)}}}}}]' for piece in call.argument_pieces]
        return [start + header.encode(), *(start + piece.encode() for piece in pieces)]

    def end_events(
        self, finish_reason: str, usage: dict[str, object], timing: dict[str, object], include_usage: bool
    ) -> bytes:
        """The chunks after the last token, `[DONE]` included."""
        if self.kind == CHAT:
            finish = f'data: {{"choices":[{{"finish_reason":{_dumps(finish_reason)},"index":0,"delta":{{}}}}],{self._tail}'
            if not include_usage:
                return f'{finish},"timings":{_dumps(timing)}}}\n\ndata: [DONE]\n\n'.encode()
            usage_chunk = (
                f'data: {{"choices":[],{self._tail},"usage":{_dumps(usage)},"timings":{_dumps(timing)}}}'
            )
            return f"{finish}}}\n\n{usage_chunk}\n\ndata: [DONE]\n\n".encode()
        last = {
            "choices": [{"text": "", "index": 0, "logprobs": None, "finish_reason": finish_reason}],
            **self._fields,
            "usage": usage,
            "id": self.response_id,
            "timings": timing,
        }
        return f"data: {_dumps(last)}\n\ndata: [DONE]\n\n".encode()


def chat_response(
    response_id: str,
    created: int,
    model: str,
    content: str,
    reasoning: str | None,
    finish_reason: str,
    usage: dict[str, object],
    timing: dict[str, object],
) -> bytes:
    message: dict[str, object] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    body = {
        "choices": [{"finish_reason": finish_reason, "index": 0, "message": message}],
        "created": created,
        "model": model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "object": "chat.completion",
        "usage": usage,
        "id": response_id,
        "timings": timing,
    }
    return _dumps(body).encode()


def completion_response(
    response_id: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str,
    usage: dict[str, object],
    timing: dict[str, object],
) -> bytes:
    body = {
        "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish_reason}],
        "created": created,
        "model": model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "object": "text_completion",
        "usage": usage,
        "id": response_id,
        "timings": timing,
    }
    return _dumps(body).encode()


def infill_token_event(token_json: bytes, token_id: int, predicted: int, evaluated: int) -> bytes:
    """One /infill output chunk: the token's text and id, the counts so far, no slot yet (-1)."""
    return (
        b'data: {"index":0,"content":%b,"tokens":[%d],"stop":false,"id_slot":-1,"tokens_predicted":%d,'
        b'"tokens_evaluated":%d}\n\n' % (token_json, token_id, predicted, evaluated)
    )


def infill_final(
    content: str,
    slot: int,
    model: str,
    predicted: int,
    evaluated: int,
    has_new_line: bool,
    stop_type: str,
    timing: dict[str, object],
) -> dict[str, object]:
    """The last /infill chunk (streamed: `content` empty) or the whole answer, in llama-server's field
    order; the echoes of the request it also sends (`generation_settings`, `prompt`) are left out."""
    return {
        "index": 0,
        "content": content,
        "tokens": [],
        "id_slot": slot,
        "stop": True,
        "model": model,
        "tokens_predicted": predicted,
        "tokens_evaluated": evaluated,
        "has_new_line": has_new_line,  # of the whole answer, also when streamed
        "truncated": False,
        "stop_type": stop_type,
        "stopping_word": "",
        "tokens_cached": evaluated + predicted - 1,  # the slot's position after the last token
        "timings": timing,
    }


def error_body(status: int, message: str) -> bytes:
    """llama-server's error JSON for a request it refuses."""
    error = {"code": status, "message": message, "type": ERROR_TYPES.get(status, "server_error")}
    return _dumps({"error": error}).encode()


def exceed_context_body(prompt_tokens: int, slot_context: int) -> bytes:
    """HTTP 400 for a prompt that does not fit a slot's context (prompt tokens >= n_ctx)."""
    error = {
        "code": 400,
        "message": f"request ({prompt_tokens} tokens) exceeds the available context size "
        f"({slot_context} tokens), try increasing it",
        "type": EXCEED_CONTEXT,
        "n_prompt_tokens": prompt_tokens,
        "n_ctx": slot_context,
    }
    return _dumps({"error": error}).encode()


def http_error_body(status: int, message: str) -> bytes:
    """The error JSON of llama-server's HTTP layer (no such route, a bad API key): `code` comes last."""
    return _dumps(
        {"error": {"message": message, "type": ERROR_TYPES.get(status, "server_error"), "code": status}}
    ).encode()


def models_body(model: str, created: int, slot_context: int, train_context: int, vocab_size: int) -> bytes:
    """`/v1/models`: llama-server lists its one model twice, in Ollama's shape (`models`) and OpenAI's (`data`)."""
    ollama = {
        "name": model,
        "model": model,
        "modified_at": "",
        "size": "",
        "digest": "",
        "type": "model",
        "description": "",
        "tags": [""],
        "capabilities": ["completion"],
        "parameters": "",
        "details": {
            "parent_model": "",
            "format": "gguf",
            "family": "",
            "families": [""],
            "parameter_size": "",
            "quantization_level": "",
        },
    }
    openai = {
        "id": model,
        "aliases": [model],
        "tags": [],
        "object": "model",
        "architecture": {"input_modalities": ["text"], "output_modalities": ["text"]},
        "created": created,
        "owned_by": OWNED_BY,
        "meta": {"vocab_type": 1, "n_vocab": vocab_size, "n_ctx": slot_context, "n_ctx_train": train_context},
    }
    return _dumps({"models": [ollama], "object": "list", "data": [openai]}).encode()


def tokenize_body(ids: list[int], pieces: list[str] | None) -> bytes:
    """`/tokenize`: `{"tokens": [ids]}`, or `{"tokens": [{"id", "piece"}]}` when `with_pieces` was asked."""
    if pieces is None:
        return _dumps({"tokens": ids}).encode()
    return _dumps({"tokens": [{"id": i, "piece": p} for i, p in zip(ids, pieces, strict=True)]}).encode()


def slot_body(
    slot: int,
    slot_context: int,
    processing: bool,
    task_id: int | None,
    tokens_held: int,
    tokens_computed: int,
    tokens_cached: int,
    tokens_decoded: int,
    tokens_remaining: int,
) -> dict[str, object]:
    """One slot of `/slots`. A slot that never served has only its first four fields; `n_prompt_tokens`
    is what the slot holds (prompt and output so far), the live KV figure llama-server still gives."""
    body: dict[str, object] = {
        "id": slot,
        "n_ctx": slot_context,
        "speculative": False,
        "is_processing": processing,
    }
    if task_id is None:
        return body
    body.update(
        id_task=task_id,
        n_prompt_tokens=tokens_held,
        n_prompt_tokens_processed=tokens_computed,
        n_prompt_tokens_cache=tokens_cached,
        next_token=[
            {
                "has_next_token": processing and tokens_decoded > 0,
                "has_new_line": False,
                "n_remain": tokens_remaining if processing else -1,
                "n_decoded": tokens_decoded if processing else 0,
            }
        ],
    )
    return body


def json_body(value: object) -> bytes:
    return _dumps(value).encode()

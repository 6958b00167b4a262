"""What grill-locust relies on in llama.cpp's `llama-server`, as assertions that run against the
simulated engine's `llamacpp` flavor (tests/client/test_client_llamacpp.py) and against the real server
(tests/real/test_llama_server.py) alike, so that the simulator cannot drift from the engine.

Each check (`SERVER_CHECKS`) takes the server's base URL (no /v1) and the served model's name; the server must have
4 slots of 1024 tokens (`-c 4096 -np 4`, or the simulator's `--max-num-seqs 4 --kv-blocks 256`).
"""

from __future__ import annotations

import http.client
import json
import select
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from grill_locust.client import CHAT_PATH, COMPLETIONS_PATH, EngineClient, chat_payload
from grill_locust.client.backend_http import tokenize
from grill_locust.config import Backend, Model
from grill_locust.record import STATUS_OK, measure
from grill_locust.telemetry.engine_metrics import dialect_for, parse_samples, read_fields

SLOTS = 4
SLOT_CONTEXT_TOKENS = 1024
TIMINGS_KEYS = [
    "cache_n",
    "prompt_n",
    "prompt_ms",
    "prompt_per_token_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_token_ms",
    "predicted_per_second",
]
# every name llama-server b11434 exports with --metrics
METRIC_NAMES = {
    "llamacpp:prompt_tokens_total",
    "llamacpp:prompt_tokens_cached_total",
    "llamacpp:prompt_seconds_total",
    "llamacpp:tokens_predicted_total",
    "llamacpp:tokens_predicted_seconds_total",
    "llamacpp:n_decode_total",
    "llamacpp:n_tokens_max",
    "llamacpp:spec_decode_num_draft_tokens_total",
    "llamacpp:spec_decode_num_accepted_tokens_total",
    "llamacpp:spec_decode_num_drafts_total",
    "llamacpp:prompt_tokens_seconds",
    "llamacpp:predicted_tokens_seconds",
    "llamacpp:requests_processing",
    "llamacpp:requests_deferred",
    "llamacpp:n_busy_slots_per_decode",
}
TOO_LARGE_PROMPT = "word " * (SLOT_CONTEXT_TOKENS + 200)  # over a slot on any tokenizer
REPLY_TIMEOUT_S = 180.0  # a full slot's prefill on a loaded 2-core CI machine
CLOSE_WAIT_S = 2.0  # the server closes right after a stream: this is ample on loopback
KEPT_OPEN_WAIT_S = 0.3  # long enough to see a close that would follow a whole reply


@dataclass
class Exchange:
    """One request as the wire carried it: status, headers, body (SSE payloads when streamed), and
    whether the server closed the connection once the reply was over."""

    status: int
    headers: dict[str, str]
    body: bytes
    payloads: list[str]
    closed_after: bool

    def chunks(self) -> list[dict[str, Any]]:
        return [json.loads(p) for p in self.payloads if p != "[DONE]"]


def exchange(url: str, path: str, payload: dict[str, Any] | None = None, method: str = "POST") -> Exchange:
    """Send one request on a fresh keep-alive connection, read the whole reply, then watch the socket."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=REPLY_TIMEOUT_S)
    headers = {"Content-Type": "application/json", "Connection": "keep-alive"}
    conn.request(method, path, body=None if payload is None else json.dumps(payload), headers=headers)
    response = conn.getresponse()
    body = response.read()
    payloads = [line[6:] for line in body.decode().split("\n") if line.startswith("data: ")]
    sock = conn.sock
    streamed = response.getheader("content-type", "").startswith("text/event-stream")
    closed = sock is None or _closes(sock, CLOSE_WAIT_S if streamed else KEPT_OPEN_WAIT_S)
    conn.close()
    return Exchange(response.status, {k.lower(): v for k, v in response.getheaders()}, body, payloads, closed)


def _closes(sock: socket.socket, wait_s: float) -> bool:
    readable, _, _ = select.select([sock], [], [], wait_s)
    if not readable:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except ConnectionError:
        return True


def chat_body(model: str, content: str, max_tokens: int = 3, **extra: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": content}]
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
    }
    return {**body, **extra}


def llama_backend(url: str, name: str = "llamacpp") -> Backend:
    return Backend(name=name, url=url, engine="llamacpp")


# ---- the wire ----------------------------------------------------------------------------------


def check_chat_stream_without_usage(url: str, model: str) -> None:
    """Role chunk first (content null), the finish reason in a chunk of its own with an empty delta and
    `timings`, no usage anywhere, `[DONE]` last, the connection closed despite keep-alive."""
    reply = exchange(url, CHAT_PATH, chat_body(model, "Write a Python function that adds two numbers."))
    assert reply.status == 200 and reply.headers["keep-alive"]
    assert reply.payloads[-1] == "[DONE]"
    chunks = reply.chunks()
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    assert chunks[0]["id"].startswith("chatcmpl-")
    assert list(chunks[0]) == ["choices", "created", "id", "model", "system_fingerprint", "object"]
    final = chunks[-1]
    assert final["choices"] == [{"finish_reason": "length", "index": 0, "delta": {}}]
    assert list(final["timings"]) == TIMINGS_KEYS and final["timings"]["predicted_n"] == 3
    assert not any("usage" in c for c in chunks)
    assert [c["choices"][0]["delta"].get("content") for c in chunks[1:-1]].count(None) == 0
    assert reply.closed_after


def check_chat_stream_with_usage(url: str, model: str) -> None:
    """With `include_usage`, the finish chunk has no timings; a usage chunk (no choices) carries both."""
    body = chat_body(model, "Explain a Python list comprehension.", stream_options={"include_usage": True})
    reply = exchange(url, CHAT_PATH, body)
    chunks = reply.chunks()
    finish, last = chunks[-2], chunks[-1]
    assert finish["choices"][0]["finish_reason"] == "length" and "timings" not in finish
    assert last["choices"] == [] and list(last)[-2:] == ["usage", "timings"]
    usage, timings = last["usage"], last["timings"]
    assert list(usage) == ["completion_tokens", "prompt_tokens", "total_tokens", "prompt_tokens_details"]
    assert usage["completion_tokens"] == timings["predicted_n"] == 3
    assert usage["prompt_tokens"] == timings["prompt_n"] + timings["cache_n"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == timings["cache_n"]
    assert reply.payloads[-1] == "[DONE]" and reply.closed_after


def check_completion_stream(url: str, model: str) -> None:
    """A completion's last chunk always carries usage and timings; its id has the chat prefix too."""
    reply = exchange(
        url,
        COMPLETIONS_PATH,
        {"model": model, "prompt": "def add(a, b):", "max_tokens": 2, "stream": True, "ignore_eos": True},
    )
    chunks = reply.chunks()
    assert all(c["object"] == "text_completion" and c["id"].startswith("chatcmpl-") for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, "length"]
    assert chunks[-1]["choices"][0]["text"] == "" and chunks[-1]["usage"]["completion_tokens"] == 2
    assert list(chunks[-1]["timings"]) == TIMINGS_KEYS
    assert reply.payloads[-1] == "[DONE]" and reply.closed_after


def check_whole_reply_keeps_the_connection(url: str, model: str) -> None:
    body = {**chat_body(model, "Say hello."), "stream": False}
    reply = exchange(url, CHAT_PATH, body)
    answer = json.loads(reply.body)
    assert reply.status == 200 and answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"]["role"] == "assistant"
    assert answer["usage"]["completion_tokens"] == 3 and list(answer["timings"]) == TIMINGS_KEYS
    assert not reply.closed_after


def check_too_large_prompt_is_refused(url: str, model: str) -> None:
    """HTTP 400 with llama-server's body, and the connection closed."""
    reply = exchange(url, CHAT_PATH, chat_body(model, TOO_LARGE_PROMPT))
    error = json.loads(reply.body)["error"]
    assert reply.status == 400 and reply.closed_after
    assert error["code"] == 400 and error["type"] == "exceed_context_size_error"
    assert error["n_ctx"] == SLOT_CONTEXT_TOKENS and error["n_prompt_tokens"] >= SLOT_CONTEXT_TOKENS
    assert error["message"] == (
        f"request ({error['n_prompt_tokens']} tokens) exceeds the available context size "
        f"({SLOT_CONTEXT_TOKENS} tokens), try increasing it"
    )


def check_generation_stops_when_the_slot_is_full(url: str, model: str) -> None:
    """A prompt that fits, with max_tokens beyond the slot: accepted, cut at the slot's end (`length`)."""
    prompt = list(range(1000, 1000 + SLOT_CONTEXT_TOKENS - 4))  # token ids: exact on any vocabulary
    body = {"model": model, "prompt": prompt, "max_tokens": 50, "stream": False}
    answer = json.loads(exchange(url, COMPLETIONS_PATH, body).body)
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"]["total_tokens"] == SLOT_CONTEXT_TOKENS


# ---- the other routes -------------------------------------------------------------------------


def check_health_models_and_slots(url: str, model: str) -> None:
    assert (
        exchange(url, CHAT_PATH, {**chat_body(model, "Hello."), "stream": False}).status == 200
    )  # a slot served
    assert json.loads(exchange(url, "/health", method="GET").body) == {"status": "ok"}
    models = json.loads(exchange(url, "/v1/models", method="GET").body)
    assert [card["id"] for card in models["data"]] == [model] and models["data"][0]["owned_by"] == "llamacpp"
    assert models["data"][0]["meta"]["n_ctx"] == SLOT_CONTEXT_TOKENS
    slots = json.loads(exchange(url, "/slots", method="GET").body)
    assert [slot["id"] for slot in slots] == list(range(SLOTS))
    for slot in slots:
        assert slot["n_ctx"] == SLOT_CONTEXT_TOKENS and slot["is_processing"] is False
    served = [slot for slot in slots if "id_task" in slot]
    assert served and all(slot["n_prompt_tokens"] > 0 for slot in served)  # what each slot still holds


def check_metrics_names(url: str, model: str) -> None:
    """The names llama-server exports, read through the engine table as the scraper reads them."""
    text = exchange(url, "/metrics", method="GET").body.decode()
    assert {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")} == METRIC_NAMES
    values = parse_samples(text)
    dialect = dialect_for("llamacpp", values)
    assert dialect is not None and dialect.family == "llamacpp"
    fields = read_fields(values, dialect)
    assert fields["requests_running"] == 0 and fields["requests_waiting"] == 0
    assert fields["prompt_tokens_total"] and fields["generation_tokens_total"]
    assert fields["cached_tokens_total"] is not None and fields["kv_cache_usage"] is None


def check_tokenize(url: str, model: str) -> None:
    """`/tokenize` takes `content` and answers `{"tokens": [...]}`; the client's call reads both shapes."""
    text = "def add(a, b):\n    return a + b\n"
    answer = json.loads(exchange(url, "/tokenize", {"content": text}).body)
    assert list(answer) == ["tokens"] and all(isinstance(token, int) for token in answer["tokens"])
    counted = tokenize(f"{url}/tokenize", "llamacpp", text, pieces=True)
    assert counted.count == len(answer["tokens"]) >= 5
    assert counted.pieces is not None and "".join(counted.pieces) == text


# ---- the client's llama.cpp paths --------------------------------------------------------------


def check_client_reconnects_for_each_stream(url: str, model: str) -> None:
    """Every streamed request gets a fresh connection and succeeds with usage (include_usage asked)."""
    client = EngineClient(llama_backend(url))
    messages = [{"role": "user", "content": "Write a Python function that reverses a string."}]
    try:
        payload = chat_payload(Model(name=model, max_tokens=8, ignore_eos=True), messages, engine="llamacpp")
        results = [client.stream(CHAT_PATH, payload) for _ in range(3)]
    finally:
        client.close()
    for result in results:
        metrics = measure(result.raw)
        assert metrics.status == STATUS_OK, result.raw.error
        assert metrics.output_tokens == 8 and metrics.finish_reason == "length"
        assert metrics.tokens_source == "usage"  # include_usage was asked, so usage came
        assert metrics.prompt_tokens is not None and metrics.prompt_tokens > 10
        assert metrics.ttft_s is not None and metrics.e2e_s is not None and 0 < metrics.ttft_s < metrics.e2e_s
    assert results[-1].raw.cached_tokens  # the same prompt again: served from the slot's cache
    assert client.connections_opened == 3


def check_client_reads_cached_tokens_from_timings(url: str, model: str) -> None:
    """Without include_usage the stream has no usage: prompt, cached and output tokens come from timings."""
    client = EngineClient(llama_backend(url))
    messages = [{"role": "user", "content": "Sort a list in Python."}]
    payload = chat_payload(Model(name=model, max_tokens=4, ignore_eos=True), messages, engine="llamacpp")
    payload.pop("stream_options")
    try:
        first, second = (client.stream(CHAT_PATH, payload) for _ in range(2))
    finally:
        client.close()
    for result in (first, second):
        assert result.raw.status == STATUS_OK, result.raw.error
        assert result.raw.completion_tokens == 4 and result.raw.prompt_tokens
    assert first.raw.prompt_tokens == second.raw.prompt_tokens
    assert second.raw.cached_tokens  # the same prompt again: a slot kept it


def check_client_records_the_too_large_prompt(url: str, model: str) -> None:
    client = EngineClient(llama_backend(url))
    messages = [{"role": "user", "content": TOO_LARGE_PROMPT}]
    payload = chat_payload(Model(name=model, max_tokens=4), messages, engine="llamacpp")
    try:
        result = client.stream(CHAT_PATH, payload)
    finally:
        client.close()
    assert result.raw.status == "http_400" and result.raw.http_status == 400
    assert "exceeds the available context size" in result.raw.error


Check = Callable[[str, str], None]


# every check, in an order that leaves the server idle for the metrics one
SERVER_CHECKS: tuple[Check, ...] = (
    check_chat_stream_without_usage,
    check_chat_stream_with_usage,
    check_completion_stream,
    check_whole_reply_keeps_the_connection,
    check_too_large_prompt_is_refused,
    check_generation_stops_when_the_slot_is_full,
    check_health_models_and_slots,
    check_tokenize,
    check_client_reconnects_for_each_stream,
    check_client_reads_cached_tokens_from_timings,
    check_client_records_the_too_large_prompt,
    check_metrics_names,
)

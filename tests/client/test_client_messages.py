"""Anthropic's Messages API (`api: messages`): what goes out (route, headers) and how its replies
become records — events out of order, errors in Anthropic's shape — sans-IO and over loopback."""

from __future__ import annotations

import json
import socket

import pytest
from client_replay import load, piece_time, replay
from client_servers import Request, Server, backend

from grill_locust.client import EngineClient, MessagesTimer, request_for
from grill_locust.config import Model
from grill_locust.record import measure

SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"
KEY = "grillMessagesKey7f3a9c"


def event(name: str, data: dict[str, object]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


START = event(
    "message_start", {"type": "message_start", "message": {"usage": {"input_tokens": 9, "output_tokens": 1}}}
)
TEXT_START = event(
    "content_block_start",
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
)
STOP = event("message_stop", {"type": "message_stop"})


def text_delta(text: str, index: int = 0) -> bytes:
    data = {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}
    return event("content_block_delta", data)


def replay_messages(*pieces: bytes) -> MessagesTimer:
    timer, _ = replay([SSE_HEAD, *pieces], timer_class=MessagesTimer)
    assert isinstance(timer, MessagesTimer)
    return timer


def test_a_delta_before_message_start_is_bad_event_and_keeps_what_came() -> None:
    timer = replay_messages(text_delta("def"), START, TEXT_START, text_delta(" f"), STOP)
    m = measure(timer.raw)
    assert (m.status, timer.raw.error) == (
        "bad_event",
        "events out of order: content_block_delta before message_start",
    )
    assert timer.text == "def f"
    assert timer.raw.output_times == [piece_time(1), piece_time(4)]
    assert m.e2e_s == pytest.approx(piece_time(1))  # the request failed there


def test_message_stop_before_any_message_start_is_bad_event_not_an_empty_success() -> None:
    timer = replay_messages(STOP)
    assert measure(timer.raw).status == "bad_event"
    assert timer.raw.error == "events out of order: message_stop before message_start"


def test_an_openai_chunk_on_the_messages_route_is_bad_event() -> None:
    chunk = b'data: {"choices": [{"index": 0, "delta": {"content": "x"}}]}\n\n'
    timer = replay_messages(chunk)
    assert measure(timer.raw).status == "bad_event"
    assert "event without a type" in timer.raw.error


def test_a_tool_use_block_without_input_pieces_has_empty_object_arguments() -> None:
    tool = event(
        "content_block_start",
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "list_dir", "input": {}},
        },
    )
    stop_block = event("content_block_stop", {"type": "content_block_stop", "index": 0})
    timer = replay_messages(START, tool, stop_block, STOP)
    assert measure(timer.raw).status == "ok"
    assert [(c.id, c.name, c.arguments) for c in timer.tool_calls] == [("toolu_1", "list_dir", "{}")]
    assert timer.raw.first_visible_time == piece_time(2)


def test_the_message_start_output_placeholder_is_not_taken_for_a_count() -> None:
    # a stream cut before message_delta: output tokens are counted from the events, not usage's "1"
    timer = replay_messages(START, TEXT_START, text_delta("a"), text_delta("b"))
    m = measure(timer.raw)
    assert (m.status, m.output_tokens, m.tokens_source, m.prompt_tokens) == ("stream_cut", 2, "events", 9)


def anthropic_error(status_line: str, error_type: str, message: str) -> bytes:
    body = json.dumps({"type": "error", "error": {"type": error_type, "message": message}}).encode()
    head = f"HTTP/1.1 {status_line}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


@pytest.mark.parametrize(
    ("status_line", "error_type", "status"),
    [
        ("400 Bad Request", "invalid_request_error", "http_400"),
        ("401 Unauthorized", "authentication_error", "http_401"),
        ("429 Too Many Requests", "rate_limit_error", "http_429"),
        ("529 Overloaded", "overloaded_error", "http_529"),
    ],
)
def test_an_error_body_in_anthropics_shape_is_its_http_kind_with_the_message(
    status_line: str, error_type: str, status: str
) -> None:
    timer, _ = replay(
        [anthropic_error(status_line, error_type, f"{error_type} said so")], timer_class=MessagesTimer
    )
    assert (measure(timer.raw).status, timer.raw.error) == (status, f"{error_type} said so")


@pytest.mark.parametrize(
    ("error_type", "status"),
    [
        ("invalid_request_error", "http_400"),
        ("permission_error", "http_403"),
        ("not_found_error", "http_404"),
        ("request_too_large", "http_413"),
        ("api_error", "http_500"),
        ("overloaded_error", "http_529"),
        ("internal_error", "stream_cut"),  # vLLM's own type names no status: a cut stream, as today
    ],
)
def test_an_error_event_mid_stream_maps_its_type_to_the_http_status(error_type: str, status: str) -> None:
    error = event("error", {"type": "error", "error": {"type": error_type, "message": "went wrong"}})
    timer = replay_messages(START, TEXT_START, text_delta("x"), error)
    assert (measure(timer.raw).status, timer.raw.error) == (status, "error event: went wrong")
    assert timer.text == "x"


def test_a_messages_backend_sends_anthropics_route_and_headers_and_reads_its_events() -> None:
    wire = load("llamacpp_messages")

    def answer(conn: socket.socket, request: Request, server: Server) -> bool:
        conn.sendall(wire)
        return True

    server = Server(answer)
    try:
        target = backend(server.url, engine="llamacpp", api="messages", api_key=KEY)
        client = EngineClient(target)
        path, payload = request_for(
            target, Model(name="devstral", max_tokens=8), [{"role": "user", "content": "hi"}]
        )
        result = client.stream(path, payload)
        client.close()
    finally:
        server.close()
    sent = server.requests[0]
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert json.loads(sent.body)["max_tokens"] == 8
    m = measure(result.raw)
    assert (m.status, m.prompt_tokens, m.cached_tokens, m.output_tokens) == ("ok", 1085, 1024, 3)
    assert result.text == "for i in"


def test_the_key_never_reaches_the_error_of_a_messages_record() -> None:
    # an error body that echoes the x-api-key it was sent (some gateways do) keeps it out of the record
    wire = anthropic_error("401 Unauthorized", "authentication_error", f"invalid x-api-key: {KEY}")

    def answer(conn: socket.socket, request: Request, server: Server) -> bool:
        conn.sendall(wire)
        return True

    server = Server(answer)
    try:
        target = backend(server.url, engine="vllm", api="messages", api_key=KEY)
        client = EngineClient(target)
        result = client.stream(*request_for(target, "m", [{"role": "user", "content": "hi"}]))
        client.close()
    finally:
        server.close()
    assert measure(result.raw).status == "http_401"
    assert KEY not in result.raw.error and "invalid x-api-key" in result.raw.error

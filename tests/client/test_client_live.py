"""EngineClient against real loopback servers: per-event timestamps, keep-alive, reconnects,
refused connections, stalls, headers and the tokenizer fallback."""

from __future__ import annotations

import gzip
import json
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from client_replay import load, split_pieces
from client_servers import Request, Server, backend, send_slowly

from grill_locust.client import EngineClient, chat_payload
from grill_locust.record import measure

PAYLOAD = chat_payload("devstral", [{"role": "user", "content": "hi"}])
PATH = "/v1/chat/completions"
REPO = Path(__file__).resolve().parents[2]


def replaying(name: str, delay_s: float = 0.0, *, keep_alive: bool = True):
    pieces = split_pieces(load(name))

    def handler(conn: socket.socket, request: Request, server: Server) -> bool:
        if delay_s:
            send_slowly(conn, pieces, delay_s, server)
        else:
            conn.sendall(b"".join(pieces))
        return keep_alive

    return handler


def test_each_event_is_timestamped_when_its_bytes_arrive() -> None:
    delay_s = 0.1  # generous: the lag bound below must hold on a loaded 2-core machine
    server = Server(replaying("vllm_chat", delay_s))
    client = EngineClient(backend(server.url))
    result = client.stream(PATH, PAYLOAD)
    m = measure(result.raw)
    assert m.status == "ok" and result.text == "def add(a, b):"
    # pieces 2..6 carry the output events (see split_pieces); each is far below 1024 bytes
    sent = server.sent_at[2:7]
    lags = [arrived - sent_at for arrived, sent_at in zip(result.raw.output_times, sent, strict=True)]
    # measured at arrival (before the next piece is even sent), not when a buffer filled
    assert all(0 <= lag < 0.9 * delay_s for lag in lags), lags
    assert m.ttft_s >= 2 * delay_s
    assert m.e2e_s == pytest.approx(server.sent_at[9] - result.raw.t0, abs=0.9 * delay_s)  # the [DONE] piece
    server.close()


def test_keep_alive_reuses_one_connection() -> None:
    server = Server(replaying("vllm_chat"))
    client = EngineClient(backend(server.url))
    for _ in range(3):
        assert client.stream(PATH, PAYLOAD).raw.status == "ok"
    assert client.connections_opened == 1 and server.connections == 1
    assert [r.index_on_connection for r in server.requests] == [0, 1, 2]
    server.close()


def test_server_closing_after_each_stream_is_reconnected_cleanly() -> None:
    # llama.cpp advertises keep-alive but closes the connection after each streamed response
    server = Server(replaying("llamacpp_chat", keep_alive=False))
    client = EngineClient(backend(server.url))
    for _ in range(3):
        time.sleep(0.05)
        result = client.stream(PATH, PAYLOAD)
        assert result.raw.status == "ok", result.raw.error
    assert server.connections == 3 and len(server.requests) == 3
    server.close()


def test_an_engine_that_closes_after_each_stream_gets_a_fresh_connection_each_time() -> None:
    # the engine table says llama.cpp closes after a stream: the client does not wait to find out
    server = Server(replaying("llamacpp_chat"))  # this server would keep the connection
    client = EngineClient(backend(server.url, engine="llamacpp"))
    for _ in range(3):
        assert client.stream(PATH, PAYLOAD).raw.status == "ok"
    assert client.connections_opened == server.connections == 3
    assert [r.index_on_connection for r in server.requests] == [0, 0, 0]
    server.close()


def test_stale_connection_closed_as_the_request_arrives_is_resent_once_not_retried() -> None:
    def handler(conn: socket.socket, request: Request, server: Server) -> bool:
        if request.index_on_connection == 1:
            return False  # idle timeout fired: close without a byte of reply
        conn.sendall(load("vllm_chat"))
        return True

    server = Server(handler)
    client = EngineClient(backend(server.url))
    first = client.stream(PATH, PAYLOAD)
    second = client.stream(PATH, PAYLOAD)
    assert (first.raw.status, second.raw.status) == ("ok", "ok")
    assert client.connections_opened == 2
    assert [(r.connection_index, r.index_on_connection) for r in server.requests] == [(1, 0), (1, 1), (2, 0)]
    server.close()


def test_refused_connection_is_connect() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    result = EngineClient(backend(f"http://127.0.0.1:{port}")).stream(PATH, PAYLOAD)
    m = measure(result.raw)
    assert (m.status, m.error, m.http_status) == ("connect", "connection refused", None)
    assert m.e2e_s is not None and m.e2e_s < 1.0


def stalling(after_pieces: int):
    pieces = split_pieces(load("vllm_chat"))

    def handler(conn: socket.socket, request: Request, server: Server) -> bool:
        conn.sendall(b"".join(pieces[:after_pieces]))
        time.sleep(2.0)
        return False

    return handler


def test_stall_before_first_token_is_timeout() -> None:
    server = Server(stalling(2))  # head and the role-only chunk, then nothing
    started = time.perf_counter()
    result = EngineClient(backend(server.url, first_token_s=0.3)).stream(PATH, PAYLOAD)
    m = measure(result.raw)
    assert m.status == "timeout" and "first_token_s=0.3" in m.error
    assert m.ttft_s is None and 0.3 <= m.e2e_s < 1.5
    assert time.perf_counter() - started < 1.5
    server.close()


def test_stall_mid_stream_is_timeout_with_its_timings() -> None:
    server = Server(stalling(4))  # two output events, then nothing
    result = EngineClient(backend(server.url, total_s=0.5)).stream(PATH, PAYLOAD)
    m = measure(result.raw)
    assert m.status == "timeout" and "total_s=0.5" in m.error
    assert len(result.raw.output_times) == 2 and m.ttft_s is not None
    assert 0.5 <= m.e2e_s < 1.5
    server.close()


def test_stall_after_output_began_is_timeout_after_idle_s_not_total_s() -> None:
    server = Server(stalling(4))  # two output events, then nothing for 2 s
    result = EngineClient(backend(server.url, idle_s=0.3, total_s=5.0)).stream(PATH, PAYLOAD)
    m = measure(result.raw)
    assert m.status == "timeout" and "idle_s=0.3" in m.error, m.error
    assert len(result.raw.output_times) == 2 and m.ttft_s is not None  # the timings so far are kept
    waited_s = result.raw.t0 + m.e2e_s - result.raw.output_times[-1]
    assert 0.3 <= waited_s < 1.5
    server.close()


def test_idle_s_counts_from_the_latest_output_not_the_first() -> None:
    # a piece every 0.15 s: the longest wait (after the last output: finish, usage, [DONE]) is 0.45 s,
    # within idle_s; the stream from its first output to its end (~1 s) is not
    idle_s = 0.75
    server = Server(replaying("vllm_chat", 0.15))
    result = EngineClient(backend(server.url, idle_s=idle_s, total_s=10.0)).stream(PATH, PAYLOAD)
    m = measure(result.raw)
    assert m.status == "ok", m.error
    assert result.raw.t0 + m.e2e_s - result.raw.output_times[0] > idle_s
    server.close()


def test_a_compressed_reply_is_a_clear_error_not_garbled_events() -> None:
    # a proxy that compresses although the request asked for identity: the stream's events would
    # arrive in the compressor's lumps, so the client refuses to time it and says why
    stream = (
        b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    )
    replies = {
        "/ok": ("200 OK", "text/event-stream", stream),
        "/bad": ("502 Bad Gateway", "text/html", b"<html>"),
    }

    def gzipping(conn: socket.socket, request: Request, server: Server) -> bool:
        status, content_type, body = replies[request.path.split("/v1")[0]]
        packed = gzip.compress(body)
        head = f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-encoding: gzip\r\n"
        conn.sendall(head.encode() + b"content-length: %d\r\n\r\n%s" % (len(packed), packed))
        return True

    server = Server(gzipping)
    for prefix, status in (("/ok", "bad_event"), ("/bad", "http_502")):
        m = measure(EngineClient(backend(server.url + prefix)).stream(PATH, PAYLOAD).raw)
        assert m.status == status and "gzip-encoded" in m.error and "Accept-Encoding: identity" in m.error, (
            m.error
        )
    assert {r.headers["accept-encoding"] for r in server.requests} == {"identity"}
    server.close()


def test_error_reply_is_http_status_and_keeps_the_connection() -> None:
    body = b'{"object":"error","message":"The model `x` does not exist.","type":"NotFoundError","code":404}'

    def handler(conn: socket.socket, request: Request, server: Server) -> bool:
        if request.index_on_connection == 0:
            head = b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
            conn.sendall(head % len(body) + body)
        else:
            conn.sendall(load("vllm_chat"))
        return True

    server = Server(handler)
    client = EngineClient(backend(server.url))
    failed = client.stream(PATH, PAYLOAD)
    assert (failed.raw.status, failed.raw.http_status) == ("http_404", 404)
    assert failed.raw.error == "The model `x` does not exist."
    assert client.stream(PATH, PAYLOAD).raw.status == "ok"
    assert server.connections == 1
    server.close()


def test_key_goes_only_to_its_backend_and_tokenizer_counts_missing_usage() -> None:
    # a llama-cpp-python-like stream with no usage and no timings; llama.cpp's tokenize shape
    events = [
        '{"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}',
        '{"choices":[{"index":0,"delta":{"content":"hello"},"finish_reason":null}]}',
        '{"choices":[{"index":0,"delta":{"content":" world"},"finish_reason":"stop"}]}',
        "[DONE]",
    ]
    body = "".join(f"data: {e}\n\n" for e in events).encode()

    def engine(conn: socket.socket, request: Request, server: Server) -> bool:
        if request.path.endswith("/tokenize"):
            text = json.loads(request.body)["content"]
            reply = json.dumps({"tokens": list(range(len(text.split()) + 1))}).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(reply), reply))
        else:
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n" + body
            )
            return False
        return True

    for tokenize_on_other_server in (False, True):
        server = Server(engine)
        tokenizer = Server(engine) if tokenize_on_other_server else server
        client = EngineClient(
            backend(
                server.url + "/gateway",
                api_key="sk-test-1234567890",
                headers={"X-Team": "grill"},
                tokenize_url=tokenizer.url + "/tokenize",
                engine="llamacpp",
            )
        )
        result = client.stream(PATH, PAYLOAD)
        m = measure(result.raw)
        assert (m.status, m.output_tokens, m.tokens_source) == ("ok", 3, "tokenizer")
        stream_request = server.requests[0]
        assert stream_request.path == "/gateway/v1/chat/completions"
        assert stream_request.headers["authorization"] == "Bearer sk-test-1234567890"
        assert stream_request.headers["accept-encoding"] == "identity"
        assert stream_request.headers["x-team"] == "grill"
        tokenize_request = tokenizer.requests[-1]
        assert tokenize_request.path == "/tokenize"
        assert ("authorization" in tokenize_request.headers) == (not tokenize_on_other_server)
        server.close()
        tokenizer.close()


def streams_and_tokenizes(
    events: list[str], tokenize_reply: bytes
) -> Callable[[socket.socket, Request, Server], bool]:
    """A server that answers /tokenize with `tokenize_reply` and anything else with a stream of `events`."""
    stream = "".join(f"data: {e}\n\n" for e in events).encode()

    def handle(conn: socket.socket, request: Request, server: Server) -> bool:
        if request.path.endswith("/tokenize"):
            reply = tokenize_reply
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(reply), reply))
            return True
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n" + stream
        )
        return False

    return handle


@pytest.mark.parametrize(
    ("engine", "body"),
    [
        ("llamacpp", {"content": "hello world", "add_special": False}),
        ("vllm", {"prompt": "hello world", "add_special_tokens": False, "model": "devstral"}),
        ("sim", {"prompt": "hello world", "add_special_tokens": False, "model": "devstral"}),
    ],
)
def test_the_tokenizer_gets_the_one_body_shape_of_its_engine(engine: str, body: dict[str, Any]) -> None:
    events = ['{"choices":[{"index":0,"delta":{"content":"hello world"},"finish_reason":"stop"}]}', "[DONE]"]
    server = Server(streams_and_tokenizes(events, b'{"tokens": [1, 2]}'))
    client = EngineClient(backend(server.url, tokenize_url=server.url + "/tokenize", engine=engine))
    m = measure(client.stream(PATH, PAYLOAD).raw)
    assert (m.output_tokens, m.tokens_source) == (2, "tokenizer")
    (tokenize_request,) = [r for r in server.requests if r.path == "/tokenize"]
    assert json.loads(tokenize_request.body) == body
    server.close()


def test_tool_call_output_is_counted_by_events_not_by_tokenizing_empty_text() -> None:
    events = [
        '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f"}}]}}]}',
        '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"a\\""}}]}}]}',
        '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]}}]}',
        '{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}',
        "[DONE]",
    ]
    server = Server(streams_and_tokenizes(events, b'{"count": 99}'))
    client = EngineClient(backend(server.url, tokenize_url=server.url + "/tokenize"))
    m = measure(client.stream(PATH, PAYLOAD).raw)
    assert (m.status, m.output_tokens, m.tokens_source) == ("ok", 3, "events")
    assert not any(r.path.endswith("/tokenize") for r in server.requests)
    server.close()


def test_secrets_in_extra_body_and_password_headers_are_scrubbed_from_echoed_errors() -> None:
    body_secret, header_secret = "Qm9vZ2llV29vZ2llMTIz", "hdr-pass-77aa99"

    def engine(conn: socket.socket, request: Request, server: Server) -> bool:
        sent = json.loads(request.body)
        detail = [{"type": "extra_forbidden", "input": sent["guard"]["guard_password"]}]
        detail.append({"type": "header", "input": request.headers["x-password"]})
        reply = json.dumps({"detail": detail}).encode()
        conn.sendall(
            b"HTTP/1.1 422 Unprocessable Entity\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(reply), reply)
        )
        return True

    server = Server(engine)
    client = EngineClient(
        backend(
            server.url,
            headers={"X-Password": header_secret},
            extra_body={"guard": {"guard_password": body_secret}},
        )
    )
    payload = chat_payload(
        "m", [{"role": "user", "content": "hi"}], {"guard": {"guard_password": body_secret}}
    )
    m = measure(client.stream(PATH, payload).raw)
    assert m.status == "http_422" and "extra_forbidden" in m.error
    assert body_secret not in m.error and header_secret not in m.error
    server.close()


def test_greenlet_kill_mid_stream_is_stream_cut_cancelled_and_reraised() -> None:
    # gevent must patch the socket module before anything uses it: a fresh interpreter
    script = textwrap.dedent(
        """
        from gevent import monkey; monkey.patch_all()
        import gevent, socket, sys, time
        sys.path[:0] = [sys.argv[1], sys.argv[2]]
        from client_replay import load, split_pieces
        from client_servers import Server, backend
        from grill_locust.client import EngineClient, chat_payload

        pieces = split_pieces(load("vllm_chat"))
        def handler(conn, request, server):
            conn.sendall(b"".join(pieces[:4]))
            time.sleep(5)
            return False
        server = Server(handler)
        client = EngineClient(backend(server.url))
        greenlet = gevent.spawn(client.stream, "/v1/chat/completions", chat_payload("m", []))
        gevent.sleep(0.5)
        greenlet.kill(block=True, timeout=2)
        raw = client.last_result.raw
        print(type(greenlet.value).__name__, raw.status, raw.error, len(raw.output_times), raw.end_time is not None)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(Path(__file__).parent), str(REPO)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # GreenletExit re-raised: gevent stores it as the greenlet's value
    assert done.stdout.split() == ["GreenletExit", "stream_cut", "cancelled", "2", "True"]

"""Every way a reply can go wrong becomes a status kind, keeping its timings so far (sans-IO)."""

from __future__ import annotations

import json

import pytest
from client_replay import load, piece_time, replay, split_pieces

from grill_locust.record import measure

SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"


def reply(status_line: bytes, content_type: bytes, body: bytes) -> bytes:
    return b"%s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (
        status_line,
        content_type,
        len(body),
        body,
    )


def chunk(text: str) -> bytes:
    data = text.encode()
    return b"%x\r\n%s\r\n" % (len(data), data)


def delta(content: str) -> str:
    event = {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}
    return f"data: {json.dumps(event)}\n\n"


CHUNKED_SSE_HEAD = SSE_HEAD + b"transfer-encoding: chunked\r\n\r\n"


@pytest.mark.parametrize(
    ("wire", "status", "error_part"),
    [
        (
            reply(
                b"HTTP/1.1 429 Too Many Requests",
                b"application/json",
                b'{"error":{"message":"Rate limit reached","type":"rate_limit","code":429}}',
            ),
            "http_429",
            "Rate limit reached",
        ),
        (
            reply(
                b"HTTP/1.1 503 Service Unavailable",
                b"text/html",
                b"<html><head><title>503 Service Temporarily Unavailable</title></head><body>nginx</body></html>",
            ),
            "http_503",
            "HTML page: 503 Service Temporarily Unavailable",
        ),
        (
            reply(
                b"HTTP/1.1 400 Bad Request",
                b"application/json",
                b'{"object":"error","message":"This model\'s maximum context length is 8192 tokens","code":400}',
            ),
            "http_400",
            "maximum context length",
        ),
        (
            reply(
                b"HTTP/1.1 422 Unprocessable Entity",
                b"application/json",
                b'{"detail":[{"loc":["body","messages"],"msg":"field required"}]}',
            ),
            "http_422",
            "field required",
        ),
        (reply(b"HTTP/1.1 200 OK", b"application/json", b""), "empty", "empty response body"),
        (reply(b"HTTP/1.1 200 OK", b"text/event-stream", b""), "stream_cut", "without finish_reason"),
        (
            reply(
                b"HTTP/1.1 200 OK",
                b"application/json",
                b'{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant",'
                b'"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1}}',
            ),
            "bad_event",
            "non-streaming JSON reply",
        ),
        (
            reply(b"HTTP/1.1 200 OK", b"application/json", b'{"object":"list","data":[]}'),
            "bad_event",
            "JSON reply without choices (keys: object, data)",
        ),
        (
            reply(b"HTTP/1.1 200 OK", b"text/html", b"<!doctype html><title>Login</title><p>sign in</p>"),
            "bad_event",
            "HTML page: Login",
        ),
    ],
)
def test_non_openai_replies_become_records_with_a_kind(wire: bytes, status: str, error_part: str) -> None:
    timer, reader = replay([wire])
    m = measure(timer.raw)
    assert (m.status, m.http_status) == (status, int(wire[9:12]))
    assert error_part in m.error
    assert m.e2e_s == pytest.approx(piece_time(0))  # a failure keeps its time
    assert reader.finished


def test_non_streaming_json_reply_keeps_its_usage() -> None:
    wire = reply(
        b"HTTP/1.1 200 OK",
        b"application/json",
        b'{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],'
        b'"usage":{"prompt_tokens":5,"completion_tokens":1}}',
    )
    timer, _ = replay([wire])
    assert (timer.raw.prompt_tokens, timer.raw.completion_tokens, timer.raw.finish_reason) == (5, 1, "stop")


def test_event_stream_without_declared_content_type_is_sniffed() -> None:
    body = (
        delta("a")
        + delta("b")
        + 'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    )
    timer, _ = replay([reply(b"HTTP/1.1 200 OK", b"text/plain", body.encode())])
    assert measure(timer.raw).status == "ok" and timer.text == "ab"


def test_broken_json_event_is_bad_event_and_keeps_earlier_timings() -> None:
    pieces = [
        CHUNKED_SSE_HEAD,
        chunk(delta("x")),
        chunk('data: {"choices":[{"delta":{"content":"y"\n\n'),
        chunk(delta("z")),
        chunk("data: [DONE]\n\n"),
        b"0\r\n\r\n",
    ]
    timer, _ = replay(pieces)
    m = measure(timer.raw)
    assert m.status == "bad_event" and "unparseable event" in m.error
    assert m.ttft_s == pytest.approx(piece_time(1))
    assert m.e2e_s == pytest.approx(piece_time(2))  # the moment it failed
    assert timer.raw.output_times == [piece_time(1), piece_time(3)]  # later events still timed


@pytest.mark.parametrize(
    "event",
    [
        '{"choices":[null]}',
        '{"choices":"x"}',
        '{"choices":5}',
        '{"choices":[{"delta":"oops"}]}',
        '{"choices":[{"delta":{"content":5}}]}',
        '{"choices":[{"delta":{"reasoning_content":["r"]}}]}',
        '{"choices":[{"text":{"t":1}}]}',
        '{"choices":[{"delta":{},"finish_reason":7}]}',
    ],
)
def test_a_chunk_of_the_wrong_shape_is_bad_event_not_an_exception(event: str) -> None:
    pieces = [
        CHUNKED_SSE_HEAD,
        chunk(delta("x")),
        chunk(f"data: {event}\n\n"),
        chunk(delta("z")),
        chunk("data: [DONE]\n\n"),
        b"0\r\n\r\n",
    ]
    timer, reader = replay(pieces)
    m = measure(timer.raw)
    assert reader.finished
    assert m.status == "bad_event" and m.error.startswith("malformed chunk: ") and event[:20] in m.error
    assert m.ttft_s == pytest.approx(piece_time(1)) and m.e2e_s == pytest.approx(piece_time(2))
    assert timer.text.startswith("x")  # the text stays a str


def test_connection_closed_mid_stream_is_stream_cut_with_timings() -> None:
    pieces = split_pieces(load("vllm_chat"))[:5]  # head, role, 3 content events, then the peer closes
    timer, reader = replay(pieces)
    m = measure(timer.raw)
    assert m.status == "stream_cut" and not reader.keep_alive
    assert m.ttft_s == pytest.approx(piece_time(2))
    assert m.e2e_s == pytest.approx(piece_time(5))
    assert (m.output_tokens, m.tokens_source) == (3, "events")


def test_close_after_finish_reason_without_done_is_ok_and_ends_e2e() -> None:
    # ik_llama.cpp and some proxies never send [DONE]: the close after finish_reason ends the stream
    pieces = [
        SSE_HEAD + b"\r\n",
        delta("a").encode(),
        b'data: {"choices":[{"delta":{"content":"b"},"finish_reason":"stop"}]}\n\n',
    ]
    timer, reader = replay(pieces)
    m = measure(timer.raw)
    assert m.status == "ok" and m.finish_reason == "stop"
    assert m.e2e_s == pytest.approx(piece_time(3))


def test_done_without_any_output_is_empty() -> None:
    pieces = [
        CHUNKED_SSE_HEAD,
        chunk('data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'),
        chunk('data: {"choices":[],"usage":{"prompt_tokens":9000,"completion_tokens":0}}\n\n'),
        chunk("data: [DONE]\n\n"),
        b"0\r\n\r\n",
    ]
    timer, _ = replay(pieces)
    m = measure(timer.raw)
    assert (m.status, m.ttft_s, m.prompt_tokens, m.output_tokens) == ("empty", None, 9000, 0)


def test_role_only_and_usage_only_events_do_not_start_ttft() -> None:
    pieces = [
        CHUNKED_SSE_HEAD,
        chunk('data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'),
        chunk(delta("")),
        chunk(delta("tok")),
        chunk("data: [DONE]\n\n"),
        b"0\r\n\r\n",
    ]
    timer, _ = replay(pieces)
    assert measure(timer.raw).ttft_s == pytest.approx(piece_time(3))


def test_output_count_is_tokens_when_no_usage_and_tpot_needs_two() -> None:
    pieces = [
        CHUNKED_SSE_HEAD,
        chunk(delta("only")),
        chunk('data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n'),
        b"0\r\n\r\n",
    ]
    timer, _ = replay(pieces)
    m = measure(timer.raw)
    assert (m.status, m.output_tokens, m.tokens_source, m.tpot_s, m.itl_mean_s) == (
        "ok",
        1,
        "events",
        None,
        None,
    )


def test_tokenizer_count_is_used_when_usage_is_missing() -> None:
    timer, _ = replay([CHUNKED_SSE_HEAD, chunk(delta("a")), chunk(delta("b")), chunk("data: [DONE]\n\n")])
    timer.raw.tokenizer_tokens = 7  # what EngineClient puts there from the backend's /tokenize
    m = measure(timer.raw)
    assert (m.output_tokens, m.tokens_source) == (7, "tokenizer")
    assert m.tpot_s == pytest.approx((m.e2e_s - m.ttft_s) / 6)


def test_secrets_never_reach_the_error_text() -> None:
    body = b'{"error":{"message":"Invalid key sk-live-abcdef123456 for Bearer tok_ABCDEF9876; api_key=hunter22"}}'
    timer, _ = replay([reply(b"HTTP/1.1 401 Unauthorized", b"application/json", body)], secrets=("hunter22",))
    error = timer.raw.error
    assert timer.raw.status == "http_401"
    for secret in ("sk-live-abcdef123456", "tok_ABCDEF9876", "hunter22"):
        assert secret not in error
    assert "Invalid key" in error and len(error) <= 200


def test_a_secret_cut_by_the_length_limit_is_still_scrubbed() -> None:
    key = "Zq7LmP2xVb9KcT4wRy6N"  # not key-shaped: only the configured value finds it
    padding = "p" * 190
    body = json.dumps({"detail": [{"msg": padding, "received": key}]}).encode()
    timer, _ = replay([reply(b"HTTP/1.1 401 Unauthorized", b"application/json", body)], secrets=(key,))
    assert timer.raw.status == "http_401" and key[:4] not in timer.raw.error
    event = "x" * 70 + " key " + key
    pieces = [CHUNKED_SSE_HEAD, chunk(f"data: {event}\n\n"), b"0\r\n\r\n"]
    timer, _ = replay(pieces, secrets=(key,))
    assert timer.raw.status == "bad_event" and "unparseable event" in timer.raw.error
    assert key[:4] not in timer.raw.error


def test_itl_mean_p50_p99_max_over_uneven_gaps() -> None:
    from grill_locust.client import StreamReader, StreamTimer
    from grill_locust.record import RawTiming

    timer = StreamTimer(RawTiming(t0=0.0, wall_start=0.0))
    reader = StreamReader(timer)
    reader.feed(0.5, CHUNKED_SSE_HEAD)
    for t, text in zip((1.0, 1.1, 1.15, 1.45, 1.5), "abcde", strict=True):
        reader.feed(t, chunk(delta(text)))
    reader.feed(1.6, chunk('data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'))
    reader.feed(1.7, b"0\r\n\r\n")
    m = measure(timer.raw)
    # gaps 0.1, 0.05, 0.3, 0.05 -> sorted 0.05, 0.05, 0.1, 0.3
    assert m.itl_mean_s == pytest.approx(0.125)
    assert m.itl_p50_s == pytest.approx(0.075)
    assert m.itl_p99_s == pytest.approx(0.1 * 0.03 + 0.3 * 0.97)
    assert m.itl_max_s == pytest.approx(0.3)
    assert (m.ttft_s, m.e2e_s, m.output_tokens, m.tokens_source) == (1.0, 1.6, 5, "events")
    assert m.tpot_s == pytest.approx(0.6 / 4)
    assert m.tokens_per_s == pytest.approx(5 / 1.6)

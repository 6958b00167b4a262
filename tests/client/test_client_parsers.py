"""The sans-IO HTTP/1.1 response parser and SSE parser, byte by byte and in odd splits."""

from __future__ import annotations

import pytest

from grill_locust.client import End, Head, NamedEvent, ProtocolError, ResponseParser, SSEParser


def feed_all(parser: ResponseParser, pieces: list[bytes]) -> tuple[Head | None, bytes, list[End]]:
    head, body, ends = None, b"", []
    for piece in pieces:
        for event in parser.feed(piece):
            if isinstance(event, Head):
                head = event
            elif isinstance(event, End):
                ends.append(event)
            else:
                body += event
    return head, body, ends


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n"
    b"X-A: 1\r\nx-a: 2\r\n\r\n"
    b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nTrailer: x\r\n\r\n"
)


@pytest.mark.parametrize("split", ["whole", "bytewise"])
def test_chunked_body_with_extensions_and_trailers(split: str) -> None:
    parser = ResponseParser()
    head, body, ends = feed_all(parser, [CHUNKED] if split == "whole" else bytewise(CHUNKED))
    assert head is not None and head.status == 200
    assert head.headers["x-a"] == "1, 2"
    assert head.content_type == "text/event-stream"
    assert body == b"hello, world"
    assert ends == [End(keep_alive=True)] and parser.complete


def test_content_length_body_and_leftover() -> None:
    parser = ResponseParser()
    head, body, ends = feed_all(parser, [b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nab", b"cEXTRA"])
    assert head is not None and (head.status, head.reason) == (404, "Not Found")
    assert body == b"abc" and ends == [End(keep_alive=True)]
    assert parser.leftover == b"EXTRA"


def test_body_until_close_ends_on_eof_and_not_keep_alive() -> None:
    parser = ResponseParser()
    head, body, ends = feed_all(parser, [b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\npart", b"ial"])
    assert body == b"partial" and not ends
    assert parser.feed_eof() == [End(keep_alive=False)]


def test_cut_chunked_body_is_incomplete_at_eof() -> None:
    parser = ResponseParser()
    feed_all(parser, [CHUNKED[:-20]])
    assert parser.feed_eof() == [] and not parser.complete


def test_interim_100_continue_is_skipped() -> None:
    parser = ResponseParser()
    head, body, _ = feed_all(
        parser, [b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]
    )
    assert head is not None and head.status == 200 and body == b"ok"


@pytest.mark.parametrize(
    ("head_bytes", "keep_alive"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n", True),
        (b"HTTP/1.1 204 No Content\r\n\r\n", True),
    ],
)
def test_keep_alive_follows_version_and_connection_header(head_bytes: bytes, keep_alive: bool) -> None:
    _, _, ends = feed_all(ResponseParser(), [head_bytes])
    assert ends == [End(keep_alive=keep_alive)]


@pytest.mark.parametrize(
    "garbage",
    [
        b"<html>oops</html>\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
def test_non_http_bytes_raise_protocol_error(garbage: bytes) -> None:
    with pytest.raises(ProtocolError):
        ResponseParser().feed(garbage)


def sse_all(parser: SSEParser, pieces: list[bytes]) -> list[str | NamedEvent]:
    out: list[str | NamedEvent] = []
    for piece in pieces:
        out += parser.feed(piece)
    return out + parser.feed_eof()


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
@pytest.mark.parametrize("split", ["whole", "bytewise"])
def test_sse_line_endings_and_spacing(newline: bytes, split: str) -> None:
    stream = newline.join(
        [b'data: {"a":1}', b"", b": keep-alive", b"", b'data:{"b":2}', b"", b"data:  two spaces", b"", b""]
    )
    pieces = [stream] if split == "whole" else bytewise(stream)
    assert sse_all(SSEParser(), pieces) == ['{"a":1}', '{"b":2}', " two spaces"]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_sse_event_comes_out_of_the_read_that_completes_it(newline: bytes) -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a" + newline + newline) == ["a"]  # not held for a possible LF
    assert parser.feed(b"data: b" + newline + newline) == ["b"]
    assert parser.feed(b"data: c" + newline) == []
    assert parser.feed(newline) == ["c"]
    assert parser.feed_eof() == []


def test_sse_multiline_data_named_events_and_ignored_fields() -> None:
    stream = (
        b"id: 7\nretry: 100\ndata: line one\ndata: line two\n\n"
        b'event: error\ndata: {"error":"x"}\n\n'
        b"event: message\ndata: m\n\n"
        b'error: {"code":500}\n\n'
        b"data\n\n"
        b"unknown: field\n\n"
    )
    assert sse_all(SSEParser(), [stream]) == [
        "line one\nline two",
        NamedEvent("error", '{"error":"x"}'),
        "m",
        NamedEvent("error", '{"code":500}'),
        "",
    ]


# Anthropic's stream shape with CRLF line ends: a plain event, then a named event of two data lines.
CRLF_NAMED_STREAM = b"data: a\r\n\r\nevent: content_block_delta\r\ndata: one\r\ndata: two\r\n\r\n"


@pytest.mark.parametrize("cut", range(1, len(CRLF_NAMED_STREAM)))
def test_sse_crlf_split_between_two_reads_keeps_a_named_multiline_event_whole(cut: int) -> None:
    """A read that ends in the CR of a CRLF: the LF that starts the next read is not a second line end
    (which would end the event after its `event:` line, or between its data lines)."""
    pieces = [CRLF_NAMED_STREAM[:cut], CRLF_NAMED_STREAM[cut:]]
    assert sse_all(SSEParser(), pieces) == ["a", NamedEvent("content_block_delta", "one\ntwo")]


def test_sse_utf8_split_inside_a_character() -> None:
    data = 'data: {"content":"héllo ✓"}\n\n'.encode()
    cut = data.index("✓".encode()) + 1
    assert sse_all(SSEParser(), [data[:cut], data[cut:]]) == ['{"content":"héllo ✓"}']


def test_sse_eof_flushes_a_complete_last_event_but_not_a_half_line() -> None:
    assert sse_all(SSEParser(), [b"data: [DONE]\n"]) == ["[DONE]"]
    assert sse_all(SSEParser(), [b'data: {"choices":[{"del']) == []

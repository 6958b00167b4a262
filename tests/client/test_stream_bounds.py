"""A stream's memory is bounded by what a record keeps: an engine that never stops (endless deltas, or a
line that never ends) fails the request as `bad_event` soon after the stated bound, never grows the
worker until `total_s` (tiny loopback servers, the real client)."""

from __future__ import annotations

import socket
import time
import tracemalloc

import orjson
from client_servers import Request, Server, backend

from grill_locust.client import EngineClient, chat_payload
from grill_locust.client._sse import MAX_EVENT_CHARS, SSEParser
from grill_locust.client._timer import MAX_OUTPUT_EVENTS, MAX_REPLY_CHARS
from grill_locust.record import measure

PATH = "/v1/chat/completions"
PAYLOAD = chat_payload("m", [{"role": "user", "content": "hi"}])
MIB = 1024 * 1024
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(body), body)


def delta_events(content: str, count: int) -> bytes:
    event = b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": {"content": content}}]}) + b"\n\n"
    return chunk(event * count)


def endless(block: bytes, head: bytes = HEAD):
    """A handler that sends `head`, then `block` again and again until the client hangs up."""

    def handler(conn: socket.socket, request: Request, server: Server) -> bool:
        conn.sendall(head)
        try:
            while True:
                conn.sendall(block)
        except OSError:
            return False

    return handler


def stream_traced(server: Server, total_s: float) -> tuple[object, float, int]:
    """The reply's measurement, the seconds it took and the peak memory the client allocated."""
    client = EngineClient(backend(server.url, total_s=total_s, idle_s=total_s))
    tracemalloc.start()
    try:
        started = time.perf_counter()
        result = client.stream(PATH, PAYLOAD)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        server.close()
    return measure(result.raw), elapsed, peak


def test_an_endless_stream_of_long_deltas_stops_at_the_reply_bound() -> None:
    # 2 KiB of text an event: past MAX_REPLY_CHARS after ~2,000 events; before the bound the client
    # kept every piece until total_s (860 MB at 8 s)
    server = Server(endless(delta_events("x" * 2048, 16)))
    m, elapsed, peak = stream_traced(server, total_s=20.0)
    assert m.status == "bad_event" and f"{MAX_REPLY_CHARS:,} characters" in m.error, m.error
    assert elapsed < 10.0
    # the text kept, joined once at the end (a second copy), and what a read holds
    assert peak < 2 * MAX_REPLY_CHARS + 8 * MIB, peak


def test_an_endless_stream_of_one_character_deltas_stops_at_the_event_bound() -> None:
    # the worst case for the pieces kept per event: a float per output time, a character of text
    server = Server(endless(delta_events("x", 512)))
    m, elapsed, peak = stream_traced(server, total_s=60.0)
    assert m.status == "bad_event" and f"{MAX_OUTPUT_EVENTS:,} output events" in m.error, m.error
    assert m.output_tokens == MAX_OUTPUT_EVENTS + 1  # every event up to the bound is timed
    assert peak < 48 * MAX_OUTPUT_EVENTS, peak  # ~32 bytes an output time, a little text in blocks


def test_a_line_that_never_ends_is_a_bad_event_at_once() -> None:
    # one `data:` line without an end: the parser once re-joined it on every read (a worker at 95 %
    # CPU until total_s); now each read is searched alone, and the line fails past MAX_EVENT_CHARS
    body = b"x" * 65536
    server = Server(endless(chunk(body), HEAD + chunk(b"data: ")))
    m, elapsed, peak = stream_traced(server, total_s=20.0)
    assert m.status == "bad_event" and f"{MAX_EVENT_CHARS:,} characters" in m.error, m.error
    assert elapsed < 2.0
    assert peak < 4 * MAX_EVENT_CHARS + 2 * MIB, peak


def test_the_parser_searches_each_read_once_for_an_events_end() -> None:
    # an event in 1-byte reads, a blank line split between two reads, and a CRLF pair split too
    parser = SSEParser()
    out: list[object] = []
    for byte in b'data: {"a": 1}\n\ndata: two\r':
        out += parser.feed(bytes([byte]))
    out += parser.feed(b"\n")
    out += parser.feed(b"\r\n")
    assert out == ['{"a": 1}', "two"] and parser.idle
    # just under the bound is an event; one character more is not
    parser = SSEParser()
    line = b"data: " + b"y" * (MAX_EVENT_CHARS - 8)
    for start in range(0, len(line), 4096):
        assert parser.feed(line[start : start + 4096]) == []
    assert parser.feed(b"\n\n") == ["y" * (MAX_EVENT_CHARS - 8)] and not parser.too_long
    for start in range(0, len(line), 4096):
        parser.feed(line[start : start + 4096])
    parser.feed(b"yyy")
    assert parser.too_long and parser.feed(b"\n\ndata: z\n\n") == []

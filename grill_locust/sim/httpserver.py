"""A minimal HTTP/1.1 server on asyncio.Protocol: keep-alive, Content-Length bodies, chunked responses.

Small on purpose: one request at a time per connection, no request chunking, no TLS. A web framework
would cost more CPU per streamed event than the whole simulated engine step.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from dataclasses import dataclass

MAX_HEADER_BYTES = 65536
MAX_BODY_BYTES = 64 * 1024 * 1024

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Payload Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


@dataclass(slots=True)
class HttpRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    keep_alive: bool


class HttpConnection(asyncio.Protocol):
    """One client connection. The handler answers with `respond`, or `start_stream` + `write_chunk`s + `end_stream`."""

    def __init__(self, handler: Callable[[HttpConnection, HttpRequest], None]) -> None:
        self.handler = handler
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.busy = False  # a response is in progress
        self.keep_alive = True
        self.closed = False
        self.on_close: Callable[[], None] | None = None

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.busy:
            self._next_request()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        callback, self.on_close = self.on_close, None
        if callback is not None:
            callback()

    # -- parsing
    def _next_request(self) -> None:
        while not self.busy and not self.closed:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > MAX_HEADER_BYTES:
                    self._fail(413)
                return
            head = bytes(self.buffer[:end]).decode("latin-1")
            lines = head.split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) != 3:
                self._fail(400)
                return
            method, target, version = parts
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._fail(411)
                return
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                self._fail(400)
                return
            if length > MAX_BODY_BYTES:
                self._fail(413)
                return
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + length])
            del self.buffer[: end + 4 + length]
            connection = headers.get("connection", "").lower()
            keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
            self.keep_alive = keep_alive
            self.busy = True
            path = target.split("?", 1)[0]
            self.handler(self, HttpRequest(method, path, headers, body, keep_alive))

    def _fail(self, status: int) -> None:
        self.keep_alive = False
        self.busy = True
        self.respond(status, b"", "text/plain")

    # -- responding
    def _head(self, status: int, headers: list[tuple[str, str]]) -> bytes:
        lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}"]
        lines.extend(f"{name}: {value}" for name, value in headers)
        if not self.keep_alive:
            lines.append("connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def respond(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        headers: list[tuple[str, str]] | None = None,
        close: bool = False,
    ) -> None:
        """The whole response; `close` ends the connection after it (with `connection: close`)."""
        if self.closed or self.transport is None:
            return
        if close:
            self.keep_alive = False
        all_headers = [("content-type", content_type), ("content-length", str(len(body)))]
        if headers:
            all_headers.extend(headers)
        self.transport.write(self._head(status, all_headers) + body)
        self._done()

    def start_stream(self, headers: list[tuple[str, str]] | None = None, first_chunk: bytes = b"") -> None:
        all_headers = [
            ("content-type", "text/event-stream; charset=utf-8"),
            ("cache-control", "no-cache"),
            ("transfer-encoding", "chunked"),
        ]
        if headers:
            all_headers.extend(headers)
        if self.closed or self.transport is None:
            return
        data = self._head(200, all_headers)
        if first_chunk:
            data += b"%x\r\n" % len(first_chunk) + first_chunk + b"\r\n"
        self.transport.write(data)

    def write_chunk(self, data: bytes) -> None:
        if not self.closed:
            self.transport.write(b"%x\r\n" % len(data) + data + b"\r\n")  # type: ignore[union-attr]

    def end_stream(self, last_data: bytes = b"", close: bool = False) -> None:
        """The last chunk; `close` ends the connection after it, whatever the headers promised."""
        if self.closed or self.transport is None:
            return
        if close:
            self.keep_alive = False
        if last_data:
            self.transport.write(b"%x\r\n" % len(last_data) + last_data + b"\r\n0\r\n\r\n")
        else:
            self.transport.write(b"0\r\n\r\n")
        self._done()

    def abort(self) -> None:
        """Close the connection mid-response (a cut stream)."""
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True

    def _done(self) -> None:
        self.busy = False
        self.on_close = None
        if not self.keep_alive:
            if self.transport is not None:
                self.transport.close()
            self.closed = True
            return
        if self.buffer:
            asyncio.get_running_loop().call_soon(self._next_request)

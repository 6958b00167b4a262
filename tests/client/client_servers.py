"""Tiny real HTTP servers on 127.0.0.1 for the client's live tests (threads + stdlib sockets)."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grill_locust.config import Backend

MAX_REQUESTS = 50  # per server: every loop here is bounded


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    connection_index: int  # which accepted connection carried it
    index_on_connection: int


@dataclass
class Server:
    """Calls `handler(conn, request, server)` per request; the handler returns True to keep the
    connection open for another request. `sent_at` collects perf_counter times the handler notes."""

    handler: Callable[[socket.socket, Request, Server], bool]
    tls: ssl.SSLContext | None = None  # serve https with this (server-side) context
    requests: list[Request] = field(default_factory=list)
    sent_at: list[float] = field(default_factory=list)
    connections: int = 0

    def __post_init__(self) -> None:
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"
        self._closed = False
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def _accept_loop(self) -> None:
        while not self._closed and len(self.requests) < MAX_REQUESTS:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn, self.connections), daemon=True).start()

    def _serve(self, conn: socket.socket, connection_index: int) -> None:
        buffer = b""
        conn.settimeout(10)
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            for index in range(MAX_REQUESTS):
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])
                }
                length = int(headers.get("content-length", "0"))
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                body, buffer = buffer[:length], buffer[length:]
                request = Request(method, path, headers, body, connection_index, index)
                self.requests.append(request)
                if not self.handler(conn, request, self):
                    return
        except OSError:
            return
        finally:
            conn.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()


def backend(url: str, **overrides: Any) -> Backend:
    """A backend as the scenario file gives it: an OpenAI-compatible server with no tokenize route
    unless `tokenize_url` (or an engine that has one) is given; short timeouts for the tests."""
    timeouts = {"connect_s": 2.0, "first_token_s": 5.0, "total_s": 10.0, "idle_s": 10.0}
    for name in tuple(timeouts):
        if name in overrides:
            timeouts[name] = overrides.pop(name)
    return Backend.model_validate(
        {"name": "test", "url": url, "engine": "openai", "timeouts": timeouts, **overrides}
    )


def send_slowly(conn: socket.socket, pieces: list[bytes], delay_s: float, server: Server) -> None:
    """Send each piece after `delay_s`, noting when each went out."""
    for piece in pieces:
        time.sleep(delay_s)
        server.sent_at.append(time.perf_counter())
        conn.sendall(piece)

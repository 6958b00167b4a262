"""Loopback servers for the reliability tests: canned engine replies, recorded request headers.

`CannedEngine` answers `POST <prefix>/v1/chat/completions` with the reply its prefix names
(`/ok` streams a proper OpenAI answer, as do `/ok-a`, `/ok-b`, ...; `<prefix>/v1/messages` under
`/ok...` the same answer in Anthropic's events; `/html`, `/empty`, ... answer what real proxies and broken
servers send) and keeps every request's path and headers, so a test can check who got which key.
`InfluxCatcher` accepts every InfluxDB write and keeps its body and token header.
A uniquely named module (not conftest) so that test files can import it.
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from grill_locust.workload.calibrate import CALIBRATION_ID_PREFIX
from tests.ports import free_port

HTML_502 = (
    b"<html><head><title>502 Bad Gateway</title></head>"
    b"<body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>"
)
HTML_200 = b"<!doctype html><html><head><title>Sign in</title></head><body>Please sign in</body></html>"
WHOLE_COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}
OK_TOKENS = ("def", " f", "():", " pass")


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released: connections to it are refused)."""
    return free_port()


class UnansweredPort:
    """A loopback port whose accept queue is full: new connections are never answered, so a client's
    connect times out (the kernel drops their SYNs). A context manager; `.url`."""

    def __init__(self) -> None:
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(0)  # room for one pending connection, which the filler takes
        self.port = int(self._listener.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._filler = socket.create_connection(("127.0.0.1", self.port), timeout=5.0)

    def __enter__(self) -> UnansweredPort:
        return self

    def __exit__(self, *exc: object) -> None:
        self._filler.close()
        self._listener.close()


def _sse(payloads: list[Any]) -> bytes:
    lines = [f"data: {p if isinstance(p, str) else json.dumps(p)}\n\n" for p in payloads]
    return "".join(lines).encode()


def ok_stream() -> bytes:
    """A well-formed chat stream: role chunk, four tokens, finish, usage, [DONE]."""
    chunks: list[Any] = [{"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}]
    for token in OK_TOKENS:
        chunks.append({"choices": [{"index": 0, "delta": {"content": token}, "finish_reason": None}]})
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    chunks.append({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": len(OK_TOKENS)}})
    chunks.append("[DONE]")
    return _sse(chunks)


def ok_messages_stream() -> bytes:
    """The same answer as Anthropic's Messages events (`/v1/messages`)."""
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 5, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ]
    for token in OK_TOKENS:
        events.append(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": token}}
        )
    events.append({"type": "content_block_stop", "index": 0})
    events.append(
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}}
    )
    events.append({"type": "message_stop"})
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


@dataclass(frozen=True)
class CannedReply:
    status: int
    content_type: str
    body: bytes
    encoding: str = ""  # Content-Encoding, sent although every request asks for identity


# prefix -> what a chat completion request under it gets
REPLIES: dict[str, CannedReply] = {
    "ok": CannedReply(200, "text/event-stream", ok_stream()),
    "html": CannedReply(502, "text/html", HTML_502),
    "html200": CannedReply(200, "text/html; charset=utf-8", HTML_200),
    "empty": CannedReply(200, "application/json", b""),
    "nochoices": CannedReply(200, "application/json", json.dumps({"id": "x", "object": "list"}).encode()),
    "whole": CannedReply(200, "application/json", json.dumps(WHOLE_COMPLETION).encode()),
    "sse_nochoices": CannedReply(200, "text/event-stream", _sse([{"id": "x"}, {"object": "ping"}, "[DONE]"])),
    "sse_text": CannedReply(200, "text/event-stream", b"data: <html>oops</html>\n\n"),
    "gzip": CannedReply(200, "text/event-stream", gzip.compress(ok_stream()), "gzip"),
}
# prefix -> what an Anthropic Messages request under it gets
MESSAGES_REPLIES: dict[str, CannedReply] = {"ok": CannedReply(200, "text/event-stream", ok_messages_stream())}


@dataclass(frozen=True)
class SeenRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    arrival: float  # time.time() when its body had been read

    @property
    def calibrating(self) -> bool:
        """A usage request of the calibration (workload/calibrate.py): no load, and no record by design."""
        return self.headers.get("x-request-id", "").startswith(CALIBRATION_ID_PREFIX)


class CannedEngine:
    """A threaded HTTP/1.1 server on 127.0.0.1; `.url`, `.seen` (every request), context manager."""

    def __init__(self) -> None:
        self.seen: list[SeenRequest] = []
        self._lock = threading.Lock()
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
                return

            def _remember(self) -> None:
                headers = {name.lower(): value for name, value in self.headers.items()}
                with engine._lock:
                    engine.seen.append(SeenRequest(self.command, self.path, headers, time.time()))

            def _send(self, reply: CannedReply) -> None:
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                if reply.encoding:
                    self.send_header("Content-Encoding", reply.encoding)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                self._remember()
                if self.path.endswith("/v1/models"):
                    body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]})
                    self._send(CannedReply(200, "application/json", body.encode()))
                else:
                    self._send(CannedReply(404, "text/plain", b"not found"))

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                self._remember()
                prefix = self.path.strip("/").split("/", 1)[0]
                kind = prefix.split("-", 1)[0]  # `ok-a`, `ok-b`: two backends, one reply
                if self.path.endswith("/chat/completions"):
                    reply = REPLIES.get(kind)
                elif self.path.endswith("/v1/messages"):
                    reply = MESSAGES_REPLIES.get(kind)
                else:
                    reply = None
                if reply is None:
                    reply = CannedReply(404, "application/json", b'{"error": "no such route"}')
                self._send(reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="canned-engine", daemon=True)

    def start(self) -> CannedEngine:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> CannedEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def truth(self) -> list[dict[str, Any]]:
        """The requests it received, as the simulator's truth log has them (see `ledger`)."""
        with self._lock:
            return [
                {"request_id": r.headers["x-request-id"], "endpoint": r.path, "arrival": r.arrival}
                for r in self.seen
                if "x-request-id" in r.headers
            ]

    def requests_under(self, prefix: str) -> list[SeenRequest]:
        with self._lock:
            return [r for r in self.seen if r.path.startswith(f"/{prefix}/")]


class InfluxCatcher:
    """An InfluxDB write endpoint on loopback that accepts every write and remembers its token header."""

    def __init__(self) -> None:
        self.authorizations: list[str] = []
        self.bodies: list[bytes] = []
        catcher = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                catcher.authorizations.append(self.headers.get("authorization") or "")
                catcher.bodies.append(body)
                self.send_response(204)
                self.end_headers()

            def do_GET(self) -> None:  # noqa: N802
                self.send_response(200)
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

"""The backend's plain HTTP calls (`client.backend_http`) against real loopback servers: why a call
got no reply, the engine's routes, and the key sent to the backend's own server only."""

from __future__ import annotations

import gzip
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from client_servers import Request, Server

from grill_locust.client.backend_http import (
    NoReply,
    TokenizeError,
    auth_headers,
    fetch_text,
    headers_for,
    health,
    list_models,
    request_once,
    tokenize,
)
from grill_locust.config import Backend

REPO = Path(__file__).resolve().parents[2]
MODELS = json.dumps({"object": "list", "data": [{"id": "first-model"}, {"id": "second-model"}]}).encode()


def reply(conn: socket.socket, status: str, body: bytes) -> None:
    conn.sendall(b"HTTP/1.1 %s\r\ncontent-length: %d\r\n\r\n%s" % (status.encode(), len(body), body))


def routes(conn: socket.socket, request: Request, server: Server) -> bool:
    if request.path == "/v1/models":
        reply(conn, "200 OK", MODELS)
    elif request.path == "/health":
        reply(conn, "200 OK", b"")
    elif request.path == "/metrics":
        reply(conn, "503 Service Unavailable", b"warming up")
    elif request.path == "/tokenize":
        reply(conn, "200 OK", b"[1, 2, 3]")  # JSON, but not an object
    else:
        reply(conn, "404 Not Found", b"")
    return True


@pytest.fixture
def server() -> Iterator[Server]:
    server = Server(routes)
    yield server
    server.close()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_calls_read_the_engines_routes_and_say_what_went_wrong(server: Server) -> None:
    listing = list_models(server.url, "vllm")
    assert (listing.status, listing.ids) == (200, ["first-model", "second-model"])
    assert health(server.url, "vllm") is True
    assert health(server.url, "ollama") is None  # no health route in the table: not asked
    assert [r.path for r in server.requests] == ["/v1/models", "/health"]
    with pytest.raises(OSError, match="HTTP 503"):
        fetch_text(server.url + "/metrics")
    with pytest.raises(TokenizeError, match="not a JSON object"):
        tokenize(server.url + "/tokenize", "vllm", "x")


def test_no_reply_says_why(server: Server) -> None:
    with pytest.raises(NoReply, match="connection refused"):
        request_once(f"http://127.0.0.1:{closed_port()}/v1/models")

    def half(conn: socket.socket, request: Request, server: Server) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly part")
        return False

    def not_http(conn: socket.socket, request: Request, server: Server) -> bool:
        conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        return False

    for handler, why in ((half, "cut short"), (not_http, "not HTTP")):
        other = Server(handler)
        with pytest.raises(NoReply, match=why):
            request_once(other.url + "/x")
        other.close()
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)  # accepted by the kernel, never answered
        with pytest.raises(NoReply, match="no whole reply within 0.3 s"):
            request_once(f"http://127.0.0.1:{silent.getsockname()[1]}/", timeout_s=0.3)


def test_a_compressed_reply_is_decoded_and_an_unknown_encoding_named() -> None:
    # a proxy may compress although we ask for identity; a whole reply loses no timing by it
    def encoded(conn: socket.socket, request: Request, server: Server) -> bool:
        encoding = request.path.strip("/").split("/")[0]
        body = gzip.compress(MODELS) if encoding == "gzip" else b"\x8b\x00"
        head = b"HTTP/1.1 200 OK\r\ncontent-encoding: %s\r\ncontent-length: %d\r\n\r\n"
        conn.sendall(head % (encoding.encode(), len(body)) + body)
        return True

    proxy = Server(encoded)
    assert list_models(proxy.url + "/gzip", "vllm").ids == ["first-model", "second-model"]
    with pytest.raises(NoReply, match="br-encoded although the request asked for identity"):
        request_once(proxy.url + "/br/v1/models")
    assert {r.headers["accept-encoding"] for r in proxy.requests} == {"identity"}
    proxy.close()


def test_the_key_and_headers_go_to_the_backends_own_server_only(server: Server) -> None:
    backend = Backend(
        name="gateway",
        url=server.url + "/gateway",
        engine="openai",
        api_key="sk-own-1234",
        headers={"X-Team": "grill"},
    )
    assert auth_headers(backend) == {"Authorization": "Bearer sk-own-1234", "X-Team": "grill"}
    assert headers_for(backend, server.url + "/tokenize") == auth_headers(backend)  # same host and port
    assert headers_for(backend, f"http://127.0.0.1:{closed_port()}/tokenize") == {}
    assert headers_for(backend, server.url.replace("127.0.0.1", "localhost") + "/metrics") == {}
    list_models(server.url, "openai", headers=headers_for(backend, server.url))
    assert server.requests[-1].headers["authorization"] == "Bearer sk-own-1234"


def test_the_plain_users_model_lookup_takes_the_first_listed_model(server: Server) -> None:
    code = (
        "import sys\nfrom grill_locust.run.user import first_listed_model\nfrom grill_locust.errors import GrillError\n"
        "print(first_listed_model(sys.argv[1]))\n"
        "try:\n    first_listed_model(sys.argv[2])\nexcept GrillError as error:\n    print(error)\n"
    )
    gone = f"http://127.0.0.1:{closed_port()}"
    done = subprocess.run(
        [sys.executable, "-c", code, server.url, gone], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "first-model",
        f"--model not given and {gone}/v1/models gave no model (connection refused): pass --model",
    ]

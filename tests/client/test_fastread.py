"""The poller's C read (`_fastread.read_event`) against the Python it stands for: `_arrival.read`
followed by `one_whole_chunk` and `single_data_event`, on real loopback sockets."""

from __future__ import annotations

import os
import random
import select
import socket
import sys
import time

import pytest

from grill_locust.client import _arrival
from grill_locust.client._http import one_whole_chunk
from grill_locust.client._sse import single_data_event

try:
    from grill_locust.client import _fastread  # type: ignore[attr-defined]
except ImportError:
    _fastread = None

built = pytest.mark.skipif(_fastread is None, reason="the C fast path was not built here")


def test_ci_builds_the_fast_path() -> None:
    """CI (`.ci/run`: GRILL_REQUIRE_REAL=1) installs a C compiler: a build that broke would otherwise
    only show as a slower client."""
    if not (os.environ.get("GRILL_REQUIRE_REAL") and sys.platform == "linux"):
        pytest.skip("only CI on Linux must have it")
    assert _fastread is not None
    assert _arrival.read_event is _fastread.read_event  # and the poller uses it


@pytest.fixture
def stamped(connection: tuple[socket.socket, socket.socket]) -> tuple[socket.socket, socket.socket]:
    """The loopback connection as the poller reads it: stamped, non-blocking, small writes sent at once."""
    client, server = connection
    server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    assert _arrival.enable(client)
    client.setblocking(False)
    return client, server


def _python_event(data: bytes) -> bytes | None:
    body = one_whole_chunk(data)
    return None if body is None else single_data_event(body)


def _chunk(body: bytes, size: int | None = None, digits: str = "x") -> bytes:
    return b"%s\r\n%s\r\n" % (format(len(body) if size is None else size, digits).encode(), body)


EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"def"},"finish_reason":null}]}\n\n'
CASES = [
    _chunk(EVENT),
    _chunk(EVENT, digits="X"),
    _chunk(EVENT.replace(b"data: ", b"data:")),
    _chunk(b"data: [DONE]\n\n"),
    _chunk(b"data:\n\n"),  # an empty event: Python's answer is b""
    _chunk(b"data: \n\n"),
    _chunk(b"data:x\n\n"),
    _chunk(EVENT, size=len(EVENT) + 1),
    _chunk(EVENT, size=len(EVENT) - 1),
    b"000000" + _chunk(EVENT),  # 8 hex digits: still a size
    b"0000000" + _chunk(EVENT),  # 9: not one
    _chunk(EVENT)[:-2],  # the chunk's CRLF still to come
    _chunk(EVENT) + b"0\r\n\r\n",  # the last chunk too
    _chunk(EVENT) + _chunk(EVENT),
    b"%x;ext=1\r\n%s\r\n" % (len(EVENT), EVENT),
    b"0\r\n\r\n",
    _chunk(b"data: a\n\ndata: b\n\n"),
    _chunk(b"data: a\r\n\r\n"),
    _chunk(b"event: error\ndata: {}\n\n"),
    _chunk(b": keep-alive\n\n"),
    _chunk(b"data: a\rb\n\n"),
    _chunk(b"data: a\n"),
    _chunk(b"data"),
    _chunk(b"id: 1\n\n"),
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n" + _chunk(EVENT),
    b"+cd\r\n" + EVENT + b"\r\n",
    b"x",
]


def _mutations(count: int, seed: int = 7) -> list[bytes]:
    """Valid chunks with a byte changed, inserted or removed (seeded: the same cases every run)."""
    rng = random.Random(seed)
    alphabet = b"\r\n: 0aF9gdat{}"
    found = []
    for _ in range(count):
        data = bytearray(rng.choice(CASES[:7]))
        at = rng.randrange(len(data))
        action = rng.randrange(3)
        if action == 0:
            data[at] = rng.choice(alphabet)
        elif action == 1:
            data.insert(at, rng.choice(alphabet))
        else:
            del data[at]
        found.append(bytes(data))
    return found


def _read_when_ready(client: socket.socket) -> tuple[bytes | None, float, bytes | None]:
    select.select([client], [], [], 5)
    return _fastread.read_event(client.fileno(), _arrival.wall_offset(), True)


@built
def test_fast_read_finds_the_same_event_as_the_python_parsers(
    stamped: tuple[socket.socket, socket.socket],
) -> None:
    client, server = stamped
    agreed = events = 0
    for data in CASES + _mutations(600):
        server.sendall(data)
        got, _, event = _read_when_ready(client)
        expected = _python_event(data)
        assert event == expected, data
        assert got == (None if expected is not None else data), data  # the bytes when not one event
        agreed += 1
        events += expected is not None
    assert agreed == len(CASES) + 600
    assert 8 <= events < agreed  # both answers were met, many times


@built
def test_fast_read_outside_an_event_boundary_returns_the_bytes(
    stamped: tuple[socket.socket, socket.socket],
) -> None:
    client, server = stamped
    server.sendall(_chunk(EVENT))
    select.select([client], [], [], 5)
    assert _fastread.read_event(client.fileno(), _arrival.wall_offset(), False) == (
        _chunk(EVENT),
        pytest.approx(time.perf_counter(), abs=0.5),
        None,
    )


@built
def test_fast_read_reports_what_the_socket_module_would(
    stamped: tuple[socket.socket, socket.socket],
) -> None:
    client, server = stamped
    with pytest.raises(BlockingIOError):  # nothing to read yet
        _fastread.read_event(client.fileno(), 0.0, True)
    big = b"z" * (_fastread.READ_BYTES + 10)
    server.sendall(big)
    time.sleep(0.05)
    first, _, _ = _fastread.read_event(client.fileno(), 0.0, True)
    rest, _, _ = _read_when_ready(client)
    assert len(first) == _fastread.READ_BYTES and first + rest == big
    server.close()
    select.select([client], [], [], 5)
    assert _fastread.read_event(client.fileno(), 0.0, True)[0] == b""  # the peer closed
    with pytest.raises(TypeError):
        _fastread.read_event(client.fileno(), 0.0)
    fd = os.dup(client.fileno())
    os.close(fd)
    with pytest.raises(OSError) as closed:
        _fastread.read_event(fd, 0.0, True)
    assert closed.value.errno == 9  # EBADF


@built
def test_a_reset_connection_raises_connection_reset(stamped: tuple[socket.socket, socket.socket]) -> None:
    client, server = stamped
    client.sendall(b"unread by the server")
    time.sleep(0.02)
    server.close()  # closing with unread bytes sends a reset
    select.select([client], [], [], 5)
    with pytest.raises(ConnectionResetError):
        _fastread.read_event(client.fileno(), 0.0, True)

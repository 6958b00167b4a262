"""Arrival times of reads: the kernel's receive stamp on the perf_counter clock (Linux)."""

from __future__ import annotations

import socket
import time

import pytest

from grill_locust.client import _arrival

stamps = pytest.mark.skipif(not _arrival.ANCILLARY_BYTES, reason="no kernel receive stamps on this system")


def test_wall_offset_matches_the_two_clocks() -> None:
    assert abs(_arrival.wall_offset() - (time.time() - time.perf_counter())) < 0.002


def _read_stamped(read_path: str, client: socket.socket) -> tuple[bytes, float]:
    """One read of a stamped socket, as the poller does it: in Python, or the C read where built."""
    if read_path == "python":
        return _arrival.read(client, 65536, True, _arrival.wall_offset())
    if _arrival.read_event is None:
        pytest.skip("no C read here (not built, or not Linux)")
    data, arrived, _ = _arrival.read_event(client.fileno(), _arrival.wall_offset(), False)
    return data, arrived


@stamps
@pytest.mark.parametrize("read_path", ["python", "c"])
def test_bytes_read_late_keep_the_time_they_arrived(
    connection: tuple[socket.socket, socket.socket], read_path: str
) -> None:
    client, server = connection
    assert _arrival.enable(client)
    sent = time.perf_counter()
    server.sendall(b"data: {}\n\n")
    time.sleep(0.05)  # the reader is busy elsewhere
    data, arrived = _read_stamped(read_path, client)
    read_at = time.perf_counter()
    assert data == b"data: {}\n\n"
    assert sent <= arrived + 0.0005 and arrived - sent < 0.005  # not the read 50 ms later
    assert read_at - arrived > 0.045


@stamps
def test_several_sends_in_one_read_take_the_last_arrival(
    connection: tuple[socket.socket, socket.socket],
) -> None:
    client, server = connection
    _arrival.enable(client)
    server.sendall(b"a")
    time.sleep(0.03)
    last = time.perf_counter()
    server.sendall(b"b")
    time.sleep(0.03)
    data, arrived = _arrival.read(client, 65536, True, _arrival.wall_offset())
    assert data == b"ab" and abs(arrived - last) < 0.005


def test_without_stamps_a_read_is_timed_when_it_returns(
    connection: tuple[socket.socket, socket.socket],
) -> None:
    client, server = connection
    server.sendall(b"x")
    time.sleep(0.03)
    before = time.perf_counter()
    data, arrived = _arrival.read(client, 65536, False, _arrival.wall_offset())
    assert data == b"x" and before <= arrived <= time.perf_counter()


def test_a_step_of_the_system_clock_is_seen_at_the_next_read(monkeypatch: pytest.MonkeyPatch) -> None:
    offset = _arrival.wall_offset()
    real_time = time.time
    monkeypatch.setattr(_arrival.time, "time", lambda: real_time() - 0.05)  # the clock set back 50 ms
    assert abs(_arrival.wall_offset() - (offset - 0.05)) < 0.002

"""When the bytes of a read arrived: the kernel's receive timestamp, on the `perf_counter` clock.

The metric contract times each event by the arrival of its bytes. Where the kernel stamps received
data (Linux: `SO_TIMESTAMPNS`, stamped as each segment enters the host), a read reports that
moment, so a load generator that is busy elsewhere when an event arrives (other users' records,
a full hub, a slow core) still times it right; when one read holds several segments, the stamp is
the last one's, never later than the read itself (the kernel merges segments waiting in a socket and
keeps the last stamp: reading fewer bytes would not recover an earlier one). Without kernel stamps
(TLS, other systems), the moment the read returned.

`read_event` is the poller's read of a stamped socket: the C fast path (`_fastread.c`, built by
`pip install` where a C compiler is) when it is there and agrees with this module (the same
stamp constant, `perf_counter` on CLOCK_MONOTONIC), else None and the poller calls `read`.
`GRILL_NO_EXTENSIONS=1` leaves it out (to compare the two).
"""

from __future__ import annotations

import os
import platform
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

# Python does not name it; 35 on Linux's generic ABI (x86-64, arm64, riscv...), not on every CPU
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", None) or (
    35 if sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64", "riscv64") else None
)
_TIMESPEC = struct.Struct("@ll")  # struct timespec on 64-bit Linux: seconds, nanoseconds
_USABLE = _SO_TIMESTAMPNS is not None and _TIMESPEC.size == 16 and hasattr(socket, "CMSG_SPACE")
ANCILLARY_BYTES = socket.CMSG_SPACE(_TIMESPEC.size) if _USABLE else 0
_unpack = _TIMESPEC.unpack_from


def enable(sock: socket.socket) -> bool:
    """Ask the kernel to stamp what `sock` receives; False where it cannot."""
    if not _USABLE:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)  # type: ignore[arg-type]
    except OSError:
        return False
    return True


# The self-check's, while one runs: called after every read of a reply with how far the times of the
# read's output events may be from their arrivals (seconds; None for a read with no stamp, whose events'
# lateness is unknown), how many output events it held, and whether the first of them was the request's
# first output.
read_lag_sink: Callable[[float | None, int, bool], None] | None = None


def note_read(stamped: bool, arrived: float, outputs: int, known_empty: float, first: bool) -> None:
    """Tell the self-check how far a read's event times may be off: `arrived` is its arrival time
    (`read`'s answer), `outputs` the output events it held, `known_empty` the last moment the socket
    was known to hold none of them (the poller's previous look at it, or the send). One output event
    is timed by its own stamp; of several, all but the last carry a later segment's stamp, so each may
    be off by as much as the time since the socket was known empty."""
    sink = read_lag_sink
    if sink is None:
        return
    if not stamped:
        sink(None, outputs, first)
    elif outputs > 1:
        sink(max(0.0, arrived - known_empty), outputs, first)
    else:
        sink(0.0, outputs, first)


OFFSET_REFRESH_S = 1.0
OFFSET_STEP_S = 0.001  # a glance this far off the measured offset: a step, or a glance preempted
_OFFSET_SAMPLES = 5
_offset = 0.0
_offset_until = float("-inf")


def wall_offset() -> float:
    """`time.time() - time.perf_counter()`: turns the kernel's Unix-time stamps into perf_counter time.

    Both clocks run at the same (NTP-disciplined) rate, so it is measured as the best of a few tries
    (a process preempted between its two clock reads would otherwise shift a whole batch of reads by
    the preemption) at most once a second, and again as soon as one quick look finds the system
    clock stepped (a fresh machine's first time sync moves it by tens of milliseconds)."""
    global _offset, _offset_until
    before = time.perf_counter()
    glance = time.time() - before
    if before < _offset_until and abs(glance - _offset) < OFFSET_STEP_S:
        return _offset
    best_spread = float("inf")
    for _ in range(_OFFSET_SAMPLES):
        before = time.perf_counter()
        wall = time.time()
        after = time.perf_counter()
        if after - before < best_spread:
            best_spread = after - before
            _offset = wall - (before + after) / 2
    _offset_until = after + OFFSET_REFRESH_S
    return _offset


def read(sock: Any, size: int, stamped: bool, offset: float) -> tuple[bytes, float]:
    """One read of up to `size` bytes and its arrival time on the perf_counter clock. `stamped`:
    `enable` succeeded on this plain (not TLS) socket; `offset`: a recent `wall_offset()`."""
    if not stamped:
        data = sock.recv(size)
        return data, time.perf_counter()
    data, ancillary, _flags, _address = sock.recvmsg(size, ANCILLARY_BYTES)
    read_at = time.perf_counter()
    if ancillary:
        _level, kind, stamp = ancillary[0]
        if kind == _SO_TIMESTAMPNS and len(stamp) >= 16:
            seconds, nanoseconds = _unpack(stamp)
            arrived = seconds + nanoseconds * 1e-9 - offset
            if arrived < read_at:  # never later than the read (a clock step since `offset`)
                return data, arrived
    return data, read_at


def _fast_read_event() -> Any:
    if os.environ.get("GRILL_NO_EXTENSIONS") or not _USABLE:
        return None
    try:
        import grill_locust.client._fastread as _fastread
    except ImportError:  # installed without a C compiler
        return None
    monotonic = time.get_clock_info("perf_counter").implementation == "clock_gettime(CLOCK_MONOTONIC)"
    if _fastread.SCM_TIMESTAMPNS != _SO_TIMESTAMPNS or not monotonic:
        return None
    return _fastread.read_event


# read_event(fd, offset, between) -> (data, t, event): `read`, and when `between` (the reader sits
# between two events) and the read is one whole chunk holding one `data:` event, that event's data
# in `event` (then `data` is None): `one_whole_chunk` + `single_data_event` in the same call.
read_event = _fast_read_event()

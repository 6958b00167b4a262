"""Poller: every open stream of a worker process read from one epoll, many streams per wake-up.

With one greenlet per stream waiting on its own socket, every output event costs a trip through
gevent's hub: a watcher callback, a switch into the user's greenlet, a switch back. Here the hub
watches one epoll descriptor; when it is readable, one callback (running in the hub, no greenlet
switch) reads every ready socket, each read with its arrival time (`_arrival`: the kernel's stamp),
and feeds each reply's `StreamReader`. The user's greenlet sleeps for the whole stream and is woken
only when its request changes phase (first output, `[DONE]`, finished): at most a few times per
request, whatever its length.

Used for plain TCP sockets under gevent (Locust); TLS and the standard library's blocking sockets
read in `EngineClient`'s own loop.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from grill_locust.client._arrival import note_read, read, read_event, wall_offset
from grill_locust.client._reader import StreamReader

RECV_BYTES = 65536

# the phases a stream's deadline depends on (EngineClient picks the deadline)
WAITING = 0  # no output yet: first_token_s
STREAMING = 1  # output arrived: total_s
DONE = 2  # `[DONE]` arrived: the short grace for the body's end
SETTLED = 3  # nothing more to read: finished, failed, or closed before any reply


def phase_of(reader: StreamReader) -> int:
    if reader.finished:
        return SETTLED
    if reader.done_at is not None:
        return DONE
    return STREAMING if reader.timer.raw.output_times else WAITING


class Watch:
    """One request's registration: the poller feeds `reader` and wakes the waiting greenlet when
    the phase changes; a read that arrived after `until` is not fed and settles it (`late`)."""

    __slots__ = (
        "fd",
        "socket",
        "stamped",
        "reader",
        "reused",
        "phase",
        "closed_early",
        "until",
        "late",
        "reason",
        "error",
        "_waiter",
        "_poller",
    )

    def __init__(
        self,
        poller: Poller,
        raw_socket: Any,
        stamped: bool,
        reader: StreamReader,
        reused: bool,
        waiter: Any,
        until: float | None,
    ) -> None:
        self.fd: int = raw_socket.fileno()
        self.socket = raw_socket
        self.stamped = stamped  # the kernel stamps its reads (see `_arrival`)
        self.reader = reader
        self.reused = reused  # a kept-alive connection: closed before any reply means "send again"
        self.phase = phase_of(reader)
        self.closed_early = False  # a kept-alive connection the server had closed: nothing was read
        # a stamped stream's abandon time (perf_counter): bytes that arrived later are not the reply's
        # (the request was abandoned first); without stamps a read's time is its own, so none applies
        self.until = until if stamped else None
        self.late = False  # a read arrived after `until`: it was left out and the watch settled
        self.reason = ""  # why the connection broke, when it did
        self.error: BaseException | None = None  # a bug met while parsing: re-raised in the user's greenlet
        self._waiter = waiter
        self._poller = poller

    def wait(self) -> None:
        """Sleep until the phase changes (or the greenlet's deadline alarm interrupts)."""
        waiter = self._waiter
        waiter.clear()
        waiter.get()

    def close(self) -> None:
        self._poller.unwatch(self)

    def read(self, offset: float, known_empty: float) -> bool:
        """One non-blocking read of the socket, fed to the reader with its arrival time (`offset`: a
        recent `wall_offset()`), and `phase` updated; False when nothing was waiting. `known_empty`:
        when the poller last looked at the socket (what this read holds arrived since)."""
        reader = self.reader
        times = reader.timer.raw.output_times
        before = len(times)
        event = None
        try:
            if self.stamped and read_event is not None:
                data, t, event = read_event(self.fd, offset, reader.between_events)
            else:
                data, t = read(self.socket, RECV_BYTES, self.stamped, offset)
        except BlockingIOError:
            return False
        except OSError as error:
            data, t = b"", time.perf_counter()
            self.reason = error.strerror or type(error).__name__
        if self.until is not None and t > self.until:
            self.late = True
            self.phase = SETTLED
            return True
        try:
            if event is not None:
                reader.feed_event(t, event)
            elif data:
                reader.feed(t, data)
            elif self.reused and not reader.got_bytes:
                self.closed_early = True
            else:
                reader.feed_eof(t, self.reason)
        except Exception as error:  # noqa: BLE001 - a parser bug must not stop the hub
            self.error = error
        outputs = len(times) - before
        note_read(self.stamped, t, outputs, max(known_empty, reader.timer.raw.t0), before == 0 < outputs)
        self.phase = SETTLED if self.closed_early or self.error is not None else phase_of(reader)
        return True

    def drain(self) -> None:
        """Read what the socket already holds, up to `until`: the greenlet's last reads when its abandon
        timer fired before the poller came to the bytes that arrived in time (a busy process, or a
        reply longer than one read)."""
        if self.until is None:
            return
        offset = wall_offset()
        while self.phase != SETTLED and self.read(offset, self._poller.looked_at):
            pass


class Poller:
    """One per process and gevent hub (see `poller()`)."""

    def __init__(self, hub: Any, epoll_class: Any, waiter_class: Any) -> None:
        self._epoll = epoll_class()
        self._hub = hub
        self._waiter_class = waiter_class
        self._watches: dict[int, Watch] = {}
        self._watcher = hub.loop.io(self._epoll.fileno(), 1)  # 1: readable
        self._run_callback = hub.loop.run_callback
        self.wakeups = 0  # for the benchmark and tests: hub callbacks that found something to read
        self.reads = 0
        # when the last look at the ready sockets began: bytes read later arrived after it, or that look
        # would have read them (the self-check's bound on the time of events that share a read)
        self.looked_at = float("-inf")

    def watch(
        self, raw_socket: object, stamped: bool, reader: StreamReader, reused: bool, until: float | None
    ) -> Watch:
        """Start reading `raw_socket` (non-blocking; gevent's `_sock`) into `reader`, leaving out what
        arrives after `until` (see `Watch`)."""
        watch = Watch(self, raw_socket, stamped, reader, reused, self._waiter_class(self._hub), until)
        self._epoll.register(watch.fd, 1)  # EPOLLIN, level-triggered
        self._watches[watch.fd] = watch
        if len(self._watches) == 1:
            self._watcher.start(self._on_ready)
        return watch

    def unwatch(self, watch: Watch) -> None:
        if self._watches.get(watch.fd) is not watch:
            return
        del self._watches[watch.fd]
        try:
            self._epoll.unregister(watch.fd)
        except OSError:  # the socket was closed meanwhile: the kernel forgot it already
            pass
        if not self._watches:
            self._watcher.stop()

    def _on_ready(self) -> None:
        """The hub's callback when the epoll is readable."""
        self.wakeups += 1
        self.read_ready()

    def read_ready(self) -> None:
        """Read each ready socket and feed its reader; schedule the wake-ups. Never blocks: the hub
        calls it, and so does each user before it sends (`EngineClient.stream`), so that a burst of
        users finishing in the same engine step (each building its record and next request in turn,
        before the hub polls again) does not leave every other stream unread meanwhile."""
        known_empty = self.looked_at
        self.looked_at = time.perf_counter()
        try:
            ready = self._epoll.poll(0)
        except InterruptedError:
            return
        watches = self._watches
        offset = wall_offset()
        for fd, _ in ready:
            watch = watches.get(fd)
            if watch is None:
                continue
            phase = watch.phase
            if not watch.read(offset, known_empty):
                continue
            self.reads += 1
            if watch.phase != phase:
                if watch.phase == SETTLED:
                    self.unwatch(watch)
                self._run_callback(watch._waiter.switch, None)


_current: tuple[int, object, Poller] | None = None


def read_ready() -> None:
    """`Poller.read_ready` of this process's poller, if it has one."""
    current = _current
    if current is not None and current[0] == os.getpid():
        current[2].read_ready()


def poller() -> Poller:
    """This process's poller for the current gevent hub (made on first use, after any fork)."""
    global _current
    from gevent import get_hub

    hub = get_hub()
    current = _current
    if current is not None and current[0] == os.getpid() and current[1] is hub:
        return current[2]
    from gevent.hub import Waiter

    monkey = sys.modules["gevent.monkey"]
    made = Poller(hub, monkey.get_original("select", "epoll"), Waiter)
    _current = (os.getpid(), hub, made)
    return made

"""EngineClient: sends one streaming request at a time to one backend and times every event.

The I/O half of the client. Plain `socket` / `ssl` (gevent-cooperative once Locust has
monkey-patched them), one keep-alive connection per client, each read with the time its bytes
arrived (`_arrival`: the kernel's receive stamp, else the moment the read returned), never when
some buffer filled. Parsing and the metric contract live in the sans-IO `_http`, `_sse` and
`_timer` modules.

Under gevent (Locust), a plain TCP reply is read by the process's `Poller` (`_poller.py`: one
epoll, every ready stream read in one wake-up of the hub) while the user's greenlet sleeps; TLS
replies and the standard library's blocking sockets (`grill ping`, plain Python) are read here.

A request may be abandoned at a given time (`abandon_at`: an editor's next keystroke): under gevent,
one more timer that, if the stream has not ended by then, closes the connection at once; the record
is `abandoned`, with the output received before it. Received means by the kernel's stamps where it
stamps: bytes that arrived in time count though still unread when the timer fires, later ones never.

Deadlines (first token, idle between output events, total, the grace after `[DONE]`): with gevent's
sockets, one `gevent.Timeout` per request phase and sockets without a timeout, because a socket
timeout makes gevent start a timer for every wait, i.e. for every event; the idle limit, which moves
with each output event, is checked when that timer fires and re-armed from the latest event (one
timer per idle_s of streaming, not one per event). With the standard library's blocking sockets, a
socket timeout before each wait.
"""

from __future__ import annotations

import functools
import select
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from greenlet import GreenletExit

import grill_locust.client._arrival as _arrival
from grill_locust.client._connection import USER_AGENT, Origin, connect_error, open_socket
from grill_locust.client._http import Head
from grill_locust.client._messages import MessagesTimer
from grill_locust.client._poller import DONE, RECV_BYTES, SETTLED, WAITING, phase_of, poller, read_ready
from grill_locust.client._reader import StreamReader
from grill_locust.client._timer import StreamTimer, ToolCall
from grill_locust.client.backend_http import (
    StreamingBackend,
    TokenizeError,
    auth_headers,
    headers_for,
    secret_value,
    tokenize,
)
from grill_locust.client.payloads import MESSAGES_PATH
from grill_locust.engines import engine_facts
from grill_locust.record import (
    CANCELLED,
    STATUS_ABANDONED,
    STATUS_CONNECT,
    STATUS_OK,
    STATUS_STREAM_CUT,
    STATUS_TIMEOUT,
    RawTiming,
)
from grill_locust.redact import is_secret_key, secret_key_values

AFTER_DONE_GRACE_S = 2.0  # after `[DONE]`, how long to wait for the body's end before dropping the connection
TOKENIZE_TIMEOUT_S = 10.0


@dataclass(slots=True)
class StreamResult:
    """One request: its raw timings (see `record.measure`), the visible text, the reasoning and the
    tool calls the model made."""

    raw: RawTiming
    text: str
    reasoning: str
    retry_after_s: float | None = None  # a 429/503 reply's Retry-After (seconds form only)
    tool_calls: list[ToolCall] = field(default_factory=list)


class _Failed(Exception):
    """Internal: the exchange ended with a failure status (already recorded on the timer)."""


class _DeadlinePassed(Exception):
    """Internal: the current phase's deadline passed (a socket timeout or the phase alarm)."""


class _Abandoned(Exception):
    """Internal: raised into the streaming greenlet by its abandon timer."""


def _gevent_timeout_class() -> Any:
    """gevent's Timeout when gevent has monkey-patched `socket` (Locust does on import), else None."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is None or not monkey.is_module_patched("socket"):
        return None
    from gevent import Timeout

    return Timeout


def _select_now() -> Callable[..., Any]:
    """The system's `select` for a poll that never blocks: gevent's would also yield to the hub
    (a round trip through the event loop before every request)."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and monkey.is_module_patched("select"):
        return _original_select(monkey)
    return select.select


@functools.cache
def _original_select(monkey: Any) -> Callable[..., object]:
    return monkey.get_original("select", "select")  # type: ignore[no-any-return]


class _PhaseAlarm:
    """The deadline of the request's current phase, as one gevent.Timeout that interrupts whatever
    the greenlet waits on (send, reconnect, recv) when it passes; re-armed only when the phase's
    deadline changes (send -> first token -> rest of the stream -> after [DONE])."""

    __slots__ = ("deadline", "_timeout", "_timeout_class")

    def __init__(self, timeout_class: Any) -> None:
        self.deadline: float | None = None
        self._timeout: Any = None
        self._timeout_class = timeout_class

    def set(self, deadline: float | None) -> None:
        if deadline == self.deadline:
            return
        self.cancel()
        self.deadline = deadline
        if deadline is not None:
            timeout = self._timeout_class(max(deadline - time.perf_counter(), 0.0))
            timeout.start()
            self._timeout = timeout

    def cancel(self) -> None:
        timeout, self._timeout = self._timeout, None
        self.deadline = None
        if timeout is not None:
            timeout.close()

    def fired(self, error: BaseException) -> bool:
        return error is self._timeout


class EngineClient:
    """One per Locust user. `stream(path, payload)` never raises for engine or network failures:
    they are a status in `result.raw`. A `GreenletExit` (the user being stopped) marks the request
    `stream_cut` / "cancelled", leaves it in `last_result`, and is re-raised."""

    def __init__(self, backend: StreamingBackend) -> None:
        self.backend = backend
        self.origin = Origin.parse(str(backend.url))
        timeouts = backend.timeouts
        self.connect_s = float(timeouts.connect_s)
        self.first_token_s = float(timeouts.first_token_s)
        self.total_s = float(timeouts.total_s)
        self.idle_s = float(timeouts.idle_s)
        # an engine that closes the connection after each stream (llama.cpp) gets a fresh one each time,
        # rather than a send on a socket its server is closing
        self.reuses_connection = not engine_facts(backend.engine).closes_after_stream
        headers: dict[str, str] = {
            "Host": self.origin.host_header,
            "User-Agent": USER_AGENT,
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "Accept-Encoding": "identity",  # a compressed stream would arrive in compressor-sized lumps
            "Connection": "keep-alive",
            **auth_headers(backend),
        }
        configured = (getattr(backend, name, None) for name in ("extra_body", "sim_args"))
        found = {
            secret_value(getattr(backend, "api_key", None)) or "",
            *(value for name, value in headers.items() if is_secret_key(name)),
            *(v for c in configured for v in secret_key_values(c)),
        }
        # longest first: a secret that holds another is replaced whole
        self.secrets: tuple[str, ...] = tuple(
            sorted((s for s in found if len(s) >= 4), key=len, reverse=True)
        )
        self._header_bytes = "".join(f"{name}: {value}\r\n" for name, value in headers.items()).encode(
            "latin-1"
        )
        tokenize_url = getattr(backend, "tokenize_url", None)
        self.tokenize_url: str | None = str(tokenize_url) if tokenize_url else None
        self._sock: socket.socket | None = None
        self._stamped = False  # the kernel stamps what the connection receives (`_arrival`)
        self._request_sent = False  # of the request in progress: tells a send timeout from a read timeout
        self.last_result: StreamResult | None = None
        self.connections_opened = 0  # for tests and diagnostics

    # --- public -------------------------------------------------------------------------------

    def stream(
        self,
        path: str,
        payload: dict[str, object],
        request_id: str | None = None,
        abandon_at: float | None = None,
    ) -> StreamResult:
        """POST `payload` to `path` (e.g. "/v1/chat/completions") and time its event stream.

        `request_id` goes out as `X-Request-Id` (engines and gateways log it; the simulator's truth
        log keys on it), so that a record can be joined with the server's view of the request. The
        reply is read as the route answers: Anthropic's events from `/v1/messages`, OpenAI's chunks
        from the others. `abandon_at` (time.perf_counter(); gevent only): unless the whole answer has
        arrived by then, the connection is closed and the request is `abandoned` at that moment."""
        # orjson: the same compact UTF-8 JSON in a fifteenth of the time (4 ms for a 128k-token body)
        body = orjson.dumps(payload)
        target = (self.origin.prefix + "/" + path.lstrip("/")).encode("latin-1")
        id_header = b"X-Request-Id: %s\r\n" % _header_value(request_id) if request_id else b""
        request = b"POST %s HTTP/1.1\r\n%s%sContent-Length: %d\r\n\r\n%s" % (
            target,
            self._header_bytes,
            id_header,
            len(body),
            body,
        )
        read_ready()  # other streams' bytes that arrived while this user built its request
        t0 = time.perf_counter()
        raw = RawTiming(t0=t0, wall_start=time.time())
        timer_class = MessagesTimer if "/" + path.lstrip("/") == MESSAGES_PATH else StreamTimer
        timer = timer_class(raw, secrets=self.secrets)
        head: list[Head] = []  # the reply's status line and headers, once they arrive
        try:
            self._exchange(request, timer, t0, head, abandon_at)
        except _Failed:
            self.close()
        except GreenletExit:
            timer.fail(time.perf_counter(), STATUS_STREAM_CUT, CANCELLED)
            self.close()
            self.last_result = StreamResult(raw, timer.text, timer.reasoning, tool_calls=timer.tool_calls)
            raise
        except BaseException:
            self.close()
            raise
        # and those that arrived while this one ended: many users woken by one engine step each build
        # a record before the hub looks again, and a stream left unread that long shares one read (and
        # its later stamp) between two of its tokens
        read_ready()
        result = StreamResult(
            raw,
            timer.text,
            timer.reasoning,
            _retry_after_s(head[0]) if head else None,
            timer.tool_calls,
        )
        if (
            raw.completion_tokens is None
            and raw.status == STATUS_OK
            and self.tokenize_url
            and not timer.tool_calls
        ):
            raw.tokenizer_tokens = self.count_tokens(result.reasoning + result.text, payload.get("model"))
        self.last_result = result
        return result

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def count_tokens(self, text: str, model: object = None) -> int | None:
        """Tokens in `text` by the backend's tokenizer endpoint, in its engine's body shape, or None
        when it does not answer."""
        if not self.tokenize_url or not text:
            return 0 if self.tokenize_url else None
        try:
            headers = headers_for(self.backend, self.tokenize_url)
            return tokenize(
                self.tokenize_url,
                self.backend.engine,
                text,
                model=str(model) if model else None,
                headers=headers,
                timeout_s=TOKENIZE_TIMEOUT_S,
            ).count
        except (TokenizeError, ValueError):
            return None

    # --- the exchange -------------------------------------------------------------------------

    def _connect(self, timer: StreamTimer, deadline: float, alarm: _PhaseAlarm | None) -> socket.socket:
        """A new connection within min(connect_s, the deadline): its own timeout, not the alarm's
        (cancelled meanwhile), so that a connection too slow to open is always `connect`."""
        timeout_s = min(self.connect_s, deadline - time.perf_counter())
        if alarm is not None:
            alarm.cancel()
        try:
            sock = open_socket(self.origin, timeout_s)
        except OSError as error:
            timer.fail(time.perf_counter(), STATUS_CONNECT, connect_error(error, timeout_s))
            raise _Failed from None
        self.connections_opened += 1
        self._sock = sock
        self._stamped = self.origin.scheme == "http" and _arrival.enable(sock)
        if alarm is not None:
            sock.settimeout(None)  # the alarm keeps the deadlines: no timer per wait
            alarm.set(deadline)
        return sock

    def _reusable_socket(self) -> socket.socket | None:
        """The kept-alive connection, unless the server has already closed it (readable = EOF)."""
        sock = self._sock
        if sock is None:
            return None
        try:
            readable, _, _ = _select_now()([sock], [], [], 0)
        except (OSError, ValueError):
            readable = [sock]
        if readable:
            self.close()
            return None
        return sock

    def _send(
        self, request: bytes, timer: StreamTimer, deadline: float, alarm: _PhaseAlarm | None
    ) -> tuple[socket.socket, bool]:
        """Send on the kept-alive connection if it is still open, else on a new one."""
        sock = self._reusable_socket()
        if sock is not None:
            try:
                if alarm is None:
                    sock.settimeout(max(deadline - time.perf_counter(), 0.001))
                sock.sendall(request)
                return sock, True
            except TimeoutError:
                raise _DeadlinePassed(deadline) from None
            except OSError:
                self.close()  # a stale connection: reconnecting before any response is not a retry
        sock = self._connect(timer, deadline, alarm)
        self._sendall(sock, request, timer, deadline, alarm)
        return sock, False

    def _sendall(
        self,
        sock: socket.socket,
        request: bytes,
        timer: StreamTimer,
        deadline: float,
        alarm: _PhaseAlarm | None,
    ) -> None:
        try:
            if alarm is None:
                sock.settimeout(max(deadline - time.perf_counter(), 0.001))
            sock.sendall(request)
        except TimeoutError:
            raise _DeadlinePassed(deadline) from None
        except OSError as error:
            timer.fail(time.perf_counter(), STATUS_CONNECT, f"send failed: {_os_reason(error)}")
            raise _Failed from None

    def _exchange(
        self, request: bytes, timer: StreamTimer, t0: float, head_out: list[Head], abandon_at: float | None
    ) -> None:
        timeout_class = _gevent_timeout_class()
        alarm = _PhaseAlarm(timeout_class) if timeout_class is not None else None
        reader = StreamReader(timer)
        passed: _DeadlinePassed | None = None
        abandoned = False
        abandon_timer = None
        if abandon_at is not None:
            if timeout_class is None:
                raise ValueError("abandon_at needs gevent's sockets (run under Locust)")
            abandon_timer = timeout_class(max(abandon_at - time.perf_counter(), 0.0), _Abandoned)
            abandon_timer.start()
        self._request_sent = False
        try:
            if alarm is not None:
                alarm.set(t0 + self.total_s)  # the send phase: only the total limit applies
            self._loop(request, timer, t0, reader, alarm, abandon_at)
        except _DeadlinePassed as error:
            passed = error
        except _Abandoned:
            abandoned = True
        except BaseException as error:
            if alarm is None or not alarm.fired(error):
                raise
            passed = _DeadlinePassed(alarm.deadline)
        finally:
            if alarm is not None:
                alarm.cancel()
            if abandon_timer is not None:
                abandon_timer.close()
        if abandoned:
            assert abandon_at is not None
            self._abandoned(timer, reader, abandon_at)
        elif passed is not None:
            self._deadline_passed(timer, reader, passed.args[0])
        if reader.head is not None:
            head_out.append(reader.head)
        if not reader.keep_alive or not self.reuses_connection:
            self.close()

    def _loop(
        self,
        request: bytes,
        timer: StreamTimer,
        t0: float,
        reader: StreamReader,
        alarm: _PhaseAlarm | None,
        abandon_at: float | None,
    ) -> None:
        total_deadline = t0 + self.total_s
        first_token_deadline = min(t0 + self.first_token_s, total_deadline)
        sock, reused = self._send(request, timer, total_deadline, alarm)
        self._request_sent = True
        if alarm is not None and _pollable(sock):
            self._await_polled(
                sock, reused, request, timer, reader, alarm, first_token_deadline, total_deadline, abandon_at
            )
            return
        armed_phase = -1  # the phase whose deadline the alarm holds
        times = timer.raw.output_times
        known_empty = t0  # a blocking read returns what arrived since the last one returned
        while not reader.finished:
            phase = phase_of(reader)
            deadline = self._deadline(phase, reader, first_token_deadline, total_deadline)
            reason = ""
            try:
                if alarm is not None:
                    if phase != armed_phase:
                        alarm.set(deadline)
                        armed_phase = phase
                else:
                    remaining = deadline - time.perf_counter()
                    if remaining <= 0:
                        raise _DeadlinePassed(deadline)
                    sock.settimeout(remaining)
                data, t = _arrival.read(sock, RECV_BYTES, self._stamped, _arrival.wall_offset())
            except TimeoutError:
                raise _DeadlinePassed(deadline) from None
            except OSError as error:
                data, t = b"", time.perf_counter()
                reason = _os_reason(error)
            except BaseException as error:
                if alarm is None or not alarm.fired(error):
                    raise
                self._rearm_or_pass(alarm, reader, first_token_deadline, total_deadline)
                armed_phase = -1
                continue
            if data:
                before = len(times)
                reader.feed(t, data)
                outputs = len(times) - before
                _arrival.note_read(self._stamped, t, outputs, known_empty, before == 0 < outputs)
                known_empty = time.perf_counter()
            elif reused and not reader.got_bytes:
                sock = self._send_again(request, timer, total_deadline, alarm)
                reused = False
            else:
                reader.feed_eof(t, reason)

    def _await_polled(
        self,
        sock: socket.socket,
        reused: bool,
        request: bytes,
        timer: StreamTimer,
        reader: StreamReader,
        alarm: _PhaseAlarm,
        first_token_deadline: float,
        total_deadline: float,
        abandon_at: float | None,
    ) -> None:
        """Sleep while the process's poller reads the reply; wake at each phase change to move the
        deadline. Abandoned, the reply is what arrived by `abandon_at` by the kernel's stamps, read
        or not when the abandon timer fired."""
        while True:
            watch = poller().watch(sock._sock, self._stamped, reader, reused, abandon_at)  # type: ignore[attr-defined]
            try:
                while watch.phase != SETTLED:
                    alarm.set(self._deadline(watch.phase, reader, first_token_deadline, total_deadline))
                    try:
                        watch.wait()
                    except _Abandoned:
                        watch.drain()
                        raise
                    except BaseException as error:
                        if not alarm.fired(error):
                            raise
                        self._rearm_or_pass(alarm, reader, first_token_deadline, total_deadline)
            finally:
                watch.close()
            if watch.error is not None:
                raise watch.error
            if watch.late:  # the poller read past the keystroke before its timer fired
                raise _Abandoned
            if not watch.closed_early:
                return
            sock = self._send_again(request, timer, total_deadline, alarm)
            reused = False

    def _deadline(
        self, phase: int, reader: StreamReader, first_token_deadline: float, total_deadline: float
    ) -> float:
        """When the request fails if nothing more arrives, in `phase` (see `_poller`)."""
        if phase == WAITING:
            return first_token_deadline
        if phase == DONE and reader.done_at is not None:
            return min(total_deadline, reader.done_at + AFTER_DONE_GRACE_S)
        output_times = reader.timer.raw.output_times
        if output_times:
            return min(total_deadline, output_times[-1] + self.idle_s)
        return total_deadline

    def _rearm_or_pass(
        self, alarm: _PhaseAlarm, reader: StreamReader, first_token_deadline: float, total_deadline: float
    ) -> None:
        """The alarm fired: raise `_DeadlinePassed` if the deadline has passed; else (output arrived
        since it was armed and moved the idle limit) clear it, for the caller to arm it anew."""
        deadline = self._deadline(phase_of(reader), reader, first_token_deadline, total_deadline)
        if deadline <= time.perf_counter():
            raise _DeadlinePassed(deadline)
        alarm.cancel()

    def _send_again(
        self, request: bytes, timer: StreamTimer, deadline: float, alarm: _PhaseAlarm | None
    ) -> socket.socket:
        """The kept-alive connection was closed under us before any reply: the server never saw the
        request, so sending it again on a new connection is not a retry."""
        self.close()
        self._request_sent = False
        sock = self._connect(timer, deadline, alarm)
        self._sendall(sock, request, timer, deadline, alarm)
        self._request_sent = True
        return sock

    def _abandoned(self, timer: StreamTimer, reader: StreamReader, abandon_at: float) -> None:
        """The keystroke came first: the connection is dropped; a request whose `[DONE]` had arrived in
        time is complete (only its framing was late), any other is abandoned at the keystroke."""
        if reader.finished:  # read to its end in time: the result stands
            return
        reader.keep_alive = False
        done_at = reader.done_at
        if done_at is not None and done_at <= abandon_at:
            timer.close(done_at)
            return
        # stamped, what arrived by the keystroke is known (the poller and `Watch.drain` read no later
        # bytes): the request ends there; sent after its keystroke, or unstamped (TLS: a read's time is
        # its own), it ends now, when it is closed
        at_keystroke = self._stamped and abandon_at > timer.raw.t0
        timer.fail(abandon_at if at_keystroke else time.perf_counter(), STATUS_ABANDONED, "")

    def _deadline_passed(self, timer: StreamTimer, reader: StreamReader, deadline: float | None) -> None:
        """Record which limit `deadline` was; the connection is dropped (the rest of its reply is unread)."""
        reader.keep_alive = False
        now = time.perf_counter()
        if not self._request_sent:
            timer.fail(now, STATUS_CONNECT, "send failed: timed out")
            return
        if reader.done_at is not None:  # the stream is complete; only its framing is late
            timer.close(reader.done_at)
            return
        raw = timer.raw
        if deadline == raw.t0 + self.total_s:
            message = f"stream longer than total_s={self.total_s:g}"
        elif raw.output_times:
            message = f"stream idle: no output for idle_s={self.idle_s:g} after output began"
        else:
            message = f"no output within first_token_s={self.first_token_s:g}"
        timer.fail(now, STATUS_TIMEOUT, message)


def _pollable(sock: socket.socket) -> bool:
    """A plain gevent socket (not TLS, whose reads go through the SSL object): the poller reads it."""
    gevent_socket = sys.modules.get("gevent._socket3")
    return gevent_socket is not None and type(sock) is gevent_socket.socket and hasattr(sock, "_sock")


def _header_value(value: str) -> bytes:
    """A header value that cannot break the request's framing (no CR/LF), in latin-1."""
    return value.replace("\r", " ").replace("\n", " ").encode("latin-1", errors="replace")


def _os_reason(error: OSError) -> str:
    if isinstance(error, TimeoutError):
        return "timed out"
    return error.strerror or type(error).__name__


def _retry_after_s(head: Head) -> float | None:
    value = head.headers.get("retry-after", "").strip()
    try:
        return max(float(value), 0.0) if value else None
    except ValueError:
        return None  # the HTTP-date form: rare from engines and gateways

"""StreamReader: one response's bytes in, a filled `StreamTimer` out (sans-IO).

It joins the HTTP parser, the SSE parser and the timer, and decides what the reply is: an event
stream (declared by content-type, or sniffed from a body starting with `data:`), an opaque 2xx
body (empty, a whole JSON completion, an HTML page), or an error status. `EngineClient` feeds it
each `recv` with its arrival time; tests and the benchmark feed it recorded bytes on a fake clock.
"""

from __future__ import annotations

from grill_locust.client._http import End, Head, ProtocolError, ResponseParser, one_whole_chunk
from grill_locust.client._replies import scrub, summarize_body
from grill_locust.client._sse import MAX_EVENT_CHARS, SSEParser, single_data_event
from grill_locust.client._timer import StreamTimer
from grill_locust.record import STATUS_BAD_EVENT, STATUS_STREAM_CUT, http_status_kind

MAX_KEPT_BODY_BYTES = 16 * 1024  # of a non-stream reply, kept to say what went wrong

_SSE = "sse"
_SNIFF = "sniff"  # 2xx without an event-stream content-type: the first body bytes decide
_OPAQUE = "opaque"
_ERROR = "error"  # non-2xx


class StreamReader:
    """Feed one response: `feed(t, data)` per received piece, `feed_eof(t)` if the peer closed.

    `finished` turns True when nothing more is to be read (complete, or failed); `keep_alive` says
    whether the connection may carry the next request.
    """

    __slots__ = (
        "timer",
        "head",
        "finished",
        "keep_alive",
        "got_bytes",
        "done_at",
        "_http",
        "_sse",
        "_mode",
        "_kept",
        "between_events",
    )

    def __init__(self, timer: StreamTimer) -> None:
        self.timer = timer
        self.head: Head | None = None
        self.finished = False
        self.keep_alive = False
        self.got_bytes = False
        self.done_at: float | None = None  # arrival of `[DONE]`
        self._http = ResponseParser()
        self._sse = SSEParser()
        self._mode = ""
        self._kept = bytearray()
        # an event stream, both parsers at a boundary: a read of one whole chunk holding one event
        # can skip them (`feed_event`)
        self.between_events = False

    def feed(self, t: float, data: bytes) -> None:
        if self.between_events:  # mid-stream, nearly every read: one chunk holding one event
            body = one_whole_chunk(data)
            if body is not None:
                event = single_data_event(body)
                if event is not None:
                    self.feed_event(t, event)
                    return
        self.got_bytes = True
        try:
            events = self._http.feed(data)
        except ProtocolError as error:
            self.timer.fail(t, STATUS_BAD_EVENT, f"bad HTTP response: {error}")
            self.finished = True
            return
        if len(events) == 1 and self._mode == _SSE and type(events[0]) is bytes:
            self._feed_sse(t, events[0])  # body bytes only
        else:
            self._handle(t, events)
        self.between_events = self._mode == _SSE and self._http.between_chunks and self._sse.idle

    def feed_event(self, t: float, event: bytes) -> None:
        """A read that was, while `between_events`, exactly one chunk holding one `data:` event:
        that event's data (the poller's C read finds it; `feed` does for the rest)."""
        self.got_bytes = True
        timer = self.timer
        timer.on_data(t, event)
        if timer.done and self.done_at is None:
            self.done_at = t
        if timer.overflow:
            self._drop()

    def feed_eof(self, t: float, reason: str = "") -> None:
        """The connection closed (or broke: `reason`)."""
        if self.finished:
            return
        events = self._http.feed_eof()
        if self._http.complete:  # a body framed by the close
            self._handle(t, events)
            return
        self.finished = True
        self.keep_alive = False
        why = f" ({reason})" if reason else ""
        if self.head is None:
            self.timer.fail(t, STATUS_STREAM_CUT, "connection closed before a response" + why)
        elif self._mode in (_SSE, _ERROR):
            # a stream closed after its finish_reason is complete (E2E ends there); otherwise it is cut
            self._end_body(t)
        else:
            self.timer.fail(t, STATUS_STREAM_CUT, "connection closed mid-body" + why)

    def _handle(self, t: float, events: list[Head | bytes | End]) -> None:
        pieces: list[bytes] = []
        end: End | None = None
        for event in events:
            if type(event) is bytes:
                pieces.append(event)
            elif isinstance(event, Head):
                self._on_head(t, event)
                if self.finished:
                    return
            elif isinstance(event, End):
                end = event
        if pieces:
            body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            mode = self._mode
            if mode == _SNIFF:
                start = body.lstrip()[:6]
                mode = self._mode = _SSE if start.startswith((b"data:", b":", b"event:")) else _OPAQUE
            if mode == _SSE:
                self._feed_sse(t, body)
            elif len(self._kept) < MAX_KEPT_BODY_BYTES:
                self._kept += body[: MAX_KEPT_BODY_BYTES - len(self._kept)]
        if end is not None:
            self.finished = True
            self.keep_alive = end.keep_alive and not self._http.leftover
            self._end_body(t)

    def _feed_sse(self, t: float, body: bytes) -> None:
        timer = self.timer
        sse = self._sse
        for item in sse.feed(body):
            if type(item) is str:
                timer.on_data(t, item)
            else:
                timer.on_event(t, item)
            if timer.overflow:
                break
        if timer.done and self.done_at is None:
            self.done_at = t
        if sse.too_long:
            timer.fail(
                t,
                STATUS_BAD_EVENT,
                f"an event longer than {MAX_EVENT_CHARS:,} characters: not an engine's stream",
            )
            self._drop()
        elif timer.overflow:
            self._drop()

    def _drop(self) -> None:
        """The reply failed past what a record keeps: nothing more of it is read."""
        self.finished = True
        self.keep_alive = False
        self.between_events = False

    def _on_head(self, t: float, head: Head) -> None:
        self.head = head
        self.timer.raw.http_status = head.status
        encoding = head.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity") and head.status not in (204, 304):
            # compressed although the request asked for identity (a proxy's doing): its events would
            # arrive in the compressor's lumps, so their times would be the compressor's, not the engine's
            self.timer.fail(
                t,
                http_status_kind(head.status) if not 200 <= head.status < 300 else STATUS_BAD_EVENT,
                f"the reply is {encoding}-encoded although the request asked for Accept-Encoding: "
                "identity; turn compression off between us and the engine",
            )
            self.finished = True
            self.keep_alive = False
            return
        if not 200 <= head.status < 300:
            self._mode = _ERROR
        elif "event-stream" in head.content_type:
            self._mode = _SSE
        else:
            self._mode = _SNIFF

    def _end_body(self, t: float) -> None:
        head = self.head
        assert head is not None
        timer = self.timer
        if self._mode == _SSE:
            for event in self._sse.feed_eof():
                timer.on_event(t, event)
            timer.close(t)
        elif self._mode == _ERROR:
            summary = scrub(summarize_body(bytes(self._kept), head.content_type), timer.secrets)
            timer.fail(t, http_status_kind(head.status), summary or head.reason)
        else:  # opaque, or sniff with an empty body
            timer.on_opaque_body(t, head.content_type, bytes(self._kept))
            timer.close(t)

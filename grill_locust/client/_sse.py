"""A sans-IO Server-Sent Events parser: body bytes in, the data of each complete event out.

Follows the WHATWG event-stream rules (CRLF / CR / LF line ends, `:` comments, `data:` with or
without a space, multi-line data joined by "\\n", `event:` names) with one addition: llama.cpp's
server reports a failure mid-stream as a line `error: {...}`, a field the standard ignores; we
treat it as an event named "error". Events named other than "message" come out as `NamedEvent`
so that the common case, a plain `data:` event, costs no object beyond its string.
"""

from __future__ import annotations

from codecs import utf_8_decode
from dataclasses import dataclass

DONE_MARKER = "[DONE]"
MAX_EVENT_CHARS = 1024 * 1024  # an event (its lines) longer than this is no engine's: `bad_event`


@dataclass(frozen=True, slots=True)
class NamedEvent:
    """An event with an `event:` name other than "message" (e.g. "error")."""

    name: str
    data: str


class SSEParser:
    """`feed(bytes)` returns, in order, a `str` (the data) for each complete unnamed/"message" event
    and a `NamedEvent` for each named one. Events without data (keep-alive comments) return nothing.

    An event still incomplete past `MAX_EVENT_CHARS` sets `too_long` and is dropped with whatever
    follows (the caller fails the stream): no engine sends one, and a stream that never ends its line
    would otherwise hold the worker's memory. Each read is searched for an event's end on its own
    (and across its start), never the whole incomplete event again.
    """

    def __init__(self) -> None:
        self._undecoded = b""  # the start of a UTF-8 sequence split between two reads
        self._parts: list[str] = []  # the incomplete event's text, a piece per read
        self._pending = 0  # its length
        self._pending_cr = False
        self.too_long = False

    def feed(self, data: bytes) -> list[str | NamedEvent]:
        if self.too_long:
            return []
        if self._undecoded:
            data = self._undecoded + data
        text, used = utf_8_decode(data, "replace", False)
        self._undecoded = data[used:] if used != len(data) else b""
        if self._pending_cr and text:  # the last read ended in CR: an LF now is the rest of its CRLF
            self._pending_cr = False
            if text[0] == "\n":
                text = text[1:]
        if "\r" in text:
            self._pending_cr = text.endswith("\r")  # a line end now, whatever follows
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        parts = self._parts
        if parts:
            # an event ends in this read: a blank line inside it, or one begun by the buffer's last LF
            if "\n\n" not in text and not (text[:1] == "\n" and parts[-1][-1] == "\n"):
                if text:
                    parts.append(text)
                    self._hold(len(text))
                return []
            buffer = "".join(parts) + text
        elif "\n\n" not in text:
            if text:
                parts.append(text)
                self._hold(len(text))
            return []
        else:
            buffer = text
        blocks = buffer.split("\n\n")
        rest = blocks.pop()
        self._parts = [rest] if rest else []
        self._pending = 0
        self._hold(len(rest))
        out: list[str | NamedEvent] = []
        for block in blocks:
            # fast path: one `data:` line, the shape of nearly every engine's event
            if block.startswith("data:") and "\n" not in block:
                value = block[5:]
                out.append(value[1:] if value.startswith(" ") else value)
            elif block:
                event = _parse_block(block)
                if event is not None:
                    out.append(event)
        return out

    def _hold(self, chars: int) -> None:
        self._pending += chars
        if self._pending > MAX_EVENT_CHARS:
            self.too_long = True
            self._parts = []
            self._pending = 0

    @property
    def idle(self) -> bool:
        """Between events with nothing buffered: one whole event (`single_data_event`) leaves the parser
        as it is."""
        return not (self._parts or self._undecoded or self._pending_cr or self.too_long)

    def feed_eof(self) -> list[str | NamedEvent]:
        """The stream ended: flush a last event only if its lines are complete (a server may omit the
        final blank line); a half-received line is a cut stream, not an event."""
        tail = "".join(self._parts)
        self._undecoded = b""  # a cut UTF-8 sequence: the line it was in is incomplete anyway
        self._parts = []
        self._pending = 0
        self._pending_cr = False
        if not tail.endswith("\n"):
            return []
        event = _parse_block(tail.strip("\n"))
        return [event] if event is not None else []


def single_data_event(body: bytes) -> bytes | None:
    """The data's bytes when `body` is exactly one event of one `data:` line (nearly every chunk of
    every engine), else None (`SSEParser.feed` reads it)."""
    if not body.startswith(b"data:") or not body.endswith(b"\n\n"):
        return None
    end = len(body) - 2
    if body.find(b"\n", 5, end) >= 0 or body.find(b"\r", 5, end) >= 0:
        return None
    return body[6:end] if body[5:6] == b" " else body[5:end]


def _parse_block(block: str) -> str | NamedEvent | None:
    data_lines: list[str] = []
    name = "message"
    for line in block.split("\n"):
        if not line or line[0] == ":":
            continue
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "data":
            data_lines.append(value)
        elif field == "event":
            name = value or "message"
        elif field == "error":  # llama.cpp: `error: {json}`
            name = "error"
            data_lines.append(value)
        # id, retry and unknown fields do not matter to a client that never reconnects a stream
    if not data_lines:
        return None
    data = data_lines[0] if len(data_lines) == 1 else "\n".join(data_lines)
    return data if name == "message" else NamedEvent(name, data)

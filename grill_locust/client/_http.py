"""A sans-IO, incremental HTTP/1.1 response parser: bytes in, `Head` / body bytes / `End` out.

Just what an engine client needs: a status line and headers, then a body framed by Content-Length,
chunked transfer encoding, or the connection closing. No socket here (see `_engine.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_HEAD_BYTES = 64 * 1024  # a longer status line + headers is not an HTTP server we can talk to


class ProtocolError(Exception):
    """The peer's bytes are not an HTTP/1.1 response."""


@dataclass(frozen=True, slots=True)
class Head:
    """Status line and headers (names lower-cased; repeated headers joined with ", ")."""

    status: int
    reason: str
    http_version: str
    headers: dict[str, str]

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")


@dataclass(frozen=True, slots=True)
class End:
    """The response is complete; `keep_alive` says whether the connection can carry another request."""

    keep_alive: bool


# parser states
_HEAD = 0
_LENGTH = 1
_CHUNK_SIZE = 2
_CHUNK_DATA = 3
_CHUNK_DATA_END = 4
_TRAILERS = 5
_UNTIL_CLOSE = 6
_DONE = 7


def one_whole_chunk(data: bytes) -> bytes | None:
    """The data of `data` when it is exactly one complete, non-empty chunk without extensions
    (`<hex size>\\r\\n<data>\\r\\n`), else None (the general loop handles it)."""
    line_end = data.find(b"\r\n", 0, 10)
    if line_end <= 0:
        return None
    size_text = data[:line_end]
    if not size_text.isalnum():  # hex digits only (int() would also take signs, spaces, "_")
        return None
    try:
        size = int(size_text, 16)
    except ValueError:
        return None
    end = line_end + 2 + size
    if size == 0 or len(data) != end + 2 or data[end:] != b"\r\n":
        return None
    return data[line_end + 2 : end]


class ResponseParser:
    """Feed it the bytes of one response as they arrive; it returns events.

    `feed(data)` returns a list of `Head`, `bytes` (body pieces, framing removed) and `End`.
    `feed_eof()` is called when the peer closed: it returns `[End]` for a body framed by the close,
    and `[]` when the response was cut short (`complete` stays False).
    Bytes after the end of the response are kept in `leftover` (a server should send none).
    """

    def __init__(self, *, request_method: str = "POST") -> None:
        self._request_method = request_method
        self._state = _HEAD
        self._buffer = b""
        self._remaining = 0
        self._keep_alive = True
        self.head: Head | None = None
        self.complete = False
        self.leftover = b""

    def feed(self, data: bytes) -> list[Head | bytes | End]:
        events: list[Head | bytes | End] = []
        if self._state == _DONE:
            self.leftover += data
            return events
        if self._state == _UNTIL_CLOSE and not self._buffer:
            if data:
                events.append(data)
            return events
        if self._state == _LENGTH and not self._buffer:
            return self._feed_length(data, events)
        if self.between_chunks:
            piece = one_whole_chunk(data)
            if piece is not None:  # the common case of a stream: one recv, one chunk, one event
                events.append(piece)
                return events
        buffer = self._buffer + data if self._buffer else data
        self._buffer = b""
        pos = 0  # an index, not slicing: a 64 KiB recv holds hundreds of chunks
        size_of_buffer = len(buffer)
        while pos < size_of_buffer:
            state = self._state
            if state == _CHUNK_DATA:
                end = pos + self._remaining
                if end <= size_of_buffer:
                    events.append(buffer[pos:end])
                    self._remaining = 0
                    self._state = _CHUNK_DATA_END
                    pos = end
                else:
                    events.append(buffer[pos:])
                    self._remaining -= size_of_buffer - pos
                    return events
            elif state == _CHUNK_DATA_END:
                if size_of_buffer - pos < 2:
                    self._buffer = buffer[pos:]
                    return events
                if buffer[pos : pos + 2] != b"\r\n":
                    raise ProtocolError("chunk data not followed by CRLF")
                pos += 2
                self._state = _CHUNK_SIZE
            elif state == _CHUNK_SIZE:
                line_end = buffer.find(b"\r\n", pos)
                if line_end < 0:
                    if size_of_buffer - pos > 1024:
                        raise ProtocolError("chunk size line too long")
                    self._buffer = buffer[pos:]
                    return events
                size_text = buffer[pos:line_end].split(b";", 1)[0].strip()
                try:
                    size = int(size_text, 16)
                except ValueError:
                    raise ProtocolError(f"bad chunk size {size_text[:20]!r}") from None
                pos = line_end + 2
                if size == 0:
                    self._state = _TRAILERS
                else:
                    self._remaining = size
                    self._state = _CHUNK_DATA
            elif state == _HEAD:
                rest = self._parse_head(buffer[pos:], events)
                if rest is None:
                    return events
                buffer, pos, size_of_buffer = rest, 0, len(rest)
            elif state == _LENGTH:
                return self._feed_length(buffer[pos:], events)
            elif state == _TRAILERS:
                line_end = buffer.find(b"\r\n", pos)
                if line_end < 0:
                    self._buffer = buffer[pos:]
                    return events
                is_blank = line_end == pos
                pos = line_end + 2
                if is_blank:
                    self._finish(events)
            elif state == _UNTIL_CLOSE:
                events.append(buffer[pos:])
                return events
            else:  # _DONE
                self.leftover += buffer[pos:]
                return events
        return events

    @property
    def between_chunks(self) -> bool:
        """In a chunked body with nothing buffered: one whole chunk (`one_whole_chunk`) leaves the parser
        as it is."""
        return self._state == _CHUNK_SIZE and not self._buffer

    def feed_eof(self) -> list[Head | bytes | End]:
        if self._state == _UNTIL_CLOSE:
            self._keep_alive = False
            events: list[Head | bytes | End] = []
            self._finish(events)
            return events
        return []

    @property
    def keep_alive(self) -> bool:
        return self._keep_alive

    def _feed_length(self, data: bytes, events: list[Head | bytes | End]) -> list[Head | bytes | End]:
        if len(data) < self._remaining:
            if data:
                events.append(data)
            self._remaining -= len(data)
            return events
        if self._remaining:
            events.append(data[: self._remaining])
        self.leftover += data[self._remaining :]
        self._remaining = 0
        self._finish(events)
        return events

    def _finish(self, events: list[Head | bytes | End]) -> None:
        self._state = _DONE
        self.complete = True
        events.append(End(keep_alive=self._keep_alive))

    def _parse_head(self, buffer: bytes, events: list[Head | bytes | End]) -> bytes | None:
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(buffer) > MAX_HEAD_BYTES:
                raise ProtocolError("response head larger than 64 KiB")
            self._buffer = buffer
            return None
        lines = buffer[:end].decode("latin-1").split("\r\n")
        rest = buffer[end + 4 :]
        version, _, status_and_reason = lines[0].partition(" ")
        status_text, _, reason = status_and_reason.partition(" ")
        if not version.startswith("HTTP/1.") or not status_text.isdigit():
            raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:60]!r}")
        status = int(status_text)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon:
                raise ProtocolError(f"bad header line {line[:60]!r}")
            name = name.strip().lower()
            value = value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        if 100 <= status < 200:  # 100 Continue and friends: the real response follows
            return rest
        head = Head(status=status, reason=reason, http_version=version, headers=headers)
        self.head = head
        events.append(head)
        connection = headers.get("connection", "").lower()
        self._keep_alive = "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
        if self._request_method == "HEAD" or status in (204, 304):
            self._finish(events)
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._state = _CHUNK_SIZE
        elif "content-length" in headers:
            try:
                self._remaining = int(headers["content-length"])
            except ValueError:
                raise ProtocolError("bad Content-Length") from None
            self._state = _LENGTH
            if self._remaining == 0:
                self._finish(events)
        else:
            self._keep_alive = False
            self._state = _UNTIL_CLOSE
        return rest

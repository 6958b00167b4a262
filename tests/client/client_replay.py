"""Shared helpers for the client tests: recorded transcripts replayed on a fake clock."""

from __future__ import annotations

import re
from pathlib import Path

from grill_locust.client import MessagesTimer, StreamReader, StreamTimer
from grill_locust.record import RawTiming

TRANSCRIPTS = Path(__file__).parent / "transcripts"
STEP_S = 0.1  # fake clock: piece k of a transcript arrives at 1.0 + k * STEP_S (t0 = 0)
_PIECE_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


def load(name: str) -> bytes:
    return (TRANSCRIPTS / f"{name}.http").read_bytes()


def split_pieces(wire: bytes) -> list[bytes]:
    """Cut a transcript after each blank line: piece 0 is the HTTP head, piece k >= 1 completes the
    k-th SSE block (event or comment); the chunked terminator is the last piece."""
    pieces, start = [], 0
    for match in _PIECE_END.finditer(wire):
        pieces.append(wire[start : match.end()])
        start = match.end()
    if start < len(wire):
        pieces.append(wire[start:])
    return pieces


def piece_time(k: int) -> float:
    return 1.0 + k * STEP_S


def timer_class_for(name: str) -> type[StreamTimer]:
    """The timer that reads transcript `name`: Anthropic's for `<engine>_messages*`, else OpenAI's."""
    return MessagesTimer if name.split("_", 1)[-1].startswith("messages") else StreamTimer


def replay(
    pieces: list[bytes], *, secrets: tuple[str, ...] = (), timer_class: type[StreamTimer] = StreamTimer
) -> tuple[StreamTimer, StreamReader]:
    """Feed pieces at fake times; if the reader is not finished after the last one, the peer closes."""
    timer = timer_class(RawTiming(t0=0.0, wall_start=1_700_000_000.0), secrets=secrets)
    reader = StreamReader(timer)
    for k, piece in enumerate(pieces):
        reader.feed(piece_time(k), piece)
    if not reader.finished:
        reader.feed_eof(piece_time(len(pieces)))
    return timer, reader


def transcript_names() -> list[str]:
    return sorted(p.stem for p in TRANSCRIPTS.glob("*.http"))

"""Trace replay: the rows of a production trace (when each request came, its input and output lengths,
the prefix blocks it shares with others), read from Mooncake's JSONL, Azure's or BurstGPT's CSV, and
the schedule of their sends.

A row's prompt (built in generators.py) is `input_tokens` of corpus code in blocks of BLOCK_TOKENS:
a block's text is a function of its hash id and the replay's key only, so rows that share hash ids
share a token prefix on the engine, as they did in the trace.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import TYPE_CHECKING, Literal, NamedTuple, cast, get_args

from grill_locust.errors import GrillError
from grill_locust.workload.files import file_version

if TYPE_CHECKING:
    from grill_locust.workload.kinds import ConversationBase
    from grill_locust.workload.kinds.trace import TraceConversation

TraceFormat = Literal["mooncake", "azure", "burstgpt"]
TRACE_FORMATS: tuple[str, ...] = get_args(TraceFormat)
BLOCK_TOKENS = 512  # Mooncake's hash ids each stand for a block of this many tokens
MS_PER_S = 1000.0
# CSV formats: (time column, input column, output column); BurstGPT's other columns (Model, Total
# tokens, Log Type, and Session ID, Elapsed time in newer releases) are not needed to replay it
_CSV_COLUMNS: dict[str, tuple[str, str, str]] = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
}
# Azure's `2023-11-16 18:15:46.6805900` (ticks of 100 ns: more digits than Python 3.10's
# fromisoformat reads), also with a `T`, and a zone as in its 2024 traces
_AZURE_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\s*(Z|[+-]\d{2}:?\d{2})?"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# stated maxima, checked at load: a row's lengths (no engine's context is longer; a larger one would
# build its prompt for minutes under load) and a replay's length in time
MAX_ROW_TOKENS = 10_000_000
MAX_REPLAY_S = 30 * 24 * 3600.0
MAX_ZONE_HOURS = 14  # UTC-12:00 to UTC+14:00, the world's zones


class TraceError(GrillError):
    """A trace file that cannot be replayed: `path:LINE: what` (LINE as an editor numbers it)."""


@dataclass(frozen=True)
class TraceRow:
    """One request of the trace. `line`: its 0-based line (JSONL) or data row (CSV), as records carry
    it in `trace_line`; `at_s`: when it is sent, in seconds from the window's first row, ÷ speedup;
    `hash_ids`: the ids of its BLOCK_TOKENS-token blocks (Mooncake), None where the trace has none."""

    line: int
    at_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class TraceWindow:
    """Which rows of the file are replayed, and how fast: rows from `start_s` for `duration_s` trace
    seconds (None: to the end), at most `max_requests` of them, their times divided by `speedup`."""

    speedup: float = 1.0
    start_s: float = 0.0
    duration_s: float | None = None
    max_requests: int | None = None


class TraceSend(NamedTuple):
    """One send of a trace replay: row `iteration` of the trace, `at_s` seconds after the replay starts."""

    at_s: float
    iteration: int


def read_trace(path: str, trace_format: str, window: TraceWindow = TraceWindow()) -> tuple[TraceRow, ...]:
    """The rows of `window` in the trace file at `path`; TraceError on a file that is missing or
    unreadable, a row with a missing or negative length, timestamps going backwards, hash_ids that are
    not a list of whole numbers, or a window with no row. The file is read up to the window's end only."""
    return _read_cached(path, trace_format, window, file_version(path, TraceError))


def trace_schedule(rows: tuple[TraceRow, ...]) -> list[TraceSend]:
    """The sends of a trace replay, in time order: row `iteration` of `rows` at `at_s` seconds after
    the replay starts (its first row at 0).

    What the run does with it: a trace target runs once, at the trace's own times, and needs no `load`
    section (a `load` given applies to the scenario's other targets). At `at_s` after its start it
    sends `workload.script(replay_key, iteration)`: one request (`user_turns[0]`, its `max_tokens` the
    row's output length, `ignore_eos` asked) whose record carries `trace_line` (`script.trace_line`).
    `replay_key` is the same for every row of one replay (its session, phase and attempt, not a user
    or worker): rows share the blocks their hash ids name within it, and nothing with another run."""
    return [TraceSend(row.at_s, iteration) for iteration, row in enumerate(rows)]


def conversation_trace(conversation: ConversationBase) -> tuple[TraceRow, ...]:
    """The rows a `kind: trace` conversation replays (its file, format and window)."""
    conversation = cast("TraceConversation", conversation)
    if conversation.path is None or conversation.format is None:
        raise TraceError(f"conversation {conversation.name!r}: a trace needs a format and a path")
    window = TraceWindow(
        speedup=conversation.speedup or 1.0,
        start_s=conversation.start_s or 0.0,
        duration_s=conversation.duration_s,
        max_requests=conversation.max_requests,
    )
    return read_trace(conversation.path, conversation.format, window)


def block_count(input_tokens: int) -> int:
    """Blocks of BLOCK_TOKENS a prompt of `input_tokens` is made of (the last one cut)."""
    return max(1, math.ceil(input_tokens / BLOCK_TOKENS))


# ---- reading ---------------------------------------------------------------------------------------


class _Raw(NamedTuple):
    """A row as the file gives it: its time in trace seconds (any origin) and lengths."""

    line_number: int  # 1-based, as an editor numbers the file's lines (for messages)
    row_index: int  # 0-based line (JSONL) or data row (CSV)
    time_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] | None


@lru_cache(maxsize=16)
def _read_cached(
    path: str, trace_format: str, window: TraceWindow, version: tuple[int, int]
) -> tuple[TraceRow, ...]:
    """One parse per file version and window in a process (every user's script asks for its row)."""
    if trace_format not in TRACE_FORMATS:
        raise TraceError(f"{path}: unknown trace format {trace_format!r} (known: {', '.join(TRACE_FORMATS)})")
    try:
        with open(path, encoding="utf-8", newline="") as file:
            raws = _mooncake(path, file) if trace_format == "mooncake" else _csv(path, file, trace_format)
            return _windowed(path, raws, window)
    except UnicodeDecodeError as error:
        raise TraceError(_not_utf8(path, error)) from None
    except csv.Error as error:  # e.g. a cell past the csv module's field size limit
        raise TraceError(f"{path}: not CSV ({error})") from None
    except OSError as error:
        raise TraceError(f"{path}: cannot read: {error.strerror}") from None


def _windowed(path: str, raws: Iterator[_Raw], window: TraceWindow) -> tuple[TraceRow, ...]:
    rows: list[TraceRow] = []
    origin_s: float | None = None  # the file's first row: the window is measured from it
    first_s: float | None = None  # the window's first row: send times are measured from it
    previous: _Raw | None = None
    end_s = math.inf if window.duration_s is None else window.start_s + window.duration_s
    for raw in raws:
        if previous is not None and raw.time_s < previous.time_s:
            raise TraceError(
                f"{path}:{raw.line_number}: timestamp goes backwards "
                f"({raw.time_s - previous.time_s:+.6g} s from line {previous.line_number})"
            )
        previous = raw
        if origin_s is None:
            origin_s = raw.time_s
        trace_s = raw.time_s - origin_s
        if trace_s >= end_s:
            break
        if trace_s < window.start_s:
            continue
        if first_s is None:
            first_s = raw.time_s
        at_s = (raw.time_s - first_s) / window.speedup
        if at_s > MAX_REPLAY_S:
            raise TraceError(
                f"{path}:{raw.line_number}: sent {at_s:.6g} s after the first row: a replay is at most "
                f"{MAX_REPLAY_S:g} s (30 days); give a window (duration_s) or a speedup"
            )
        rows.append(TraceRow(raw.row_index, at_s, raw.input_tokens, raw.output_tokens, raw.hash_ids))
        if window.max_requests is not None and len(rows) >= window.max_requests:
            break
    if not rows:
        if origin_s is None:
            raise TraceError(f"{path}: no rows")
        span_s = (previous.time_s - origin_s) if previous is not None else 0.0
        until = "the end" if window.duration_s is None else f"{end_s:g} s"
        raise TraceError(
            f"{path}: no rows in the window from {window.start_s:g} s to {until} "
            f"(the trace read spans 0 to {span_s:g} s)"
        )
    return tuple(rows)


def _mooncake(path: str, file: Iterator[str]) -> Iterator[_Raw]:
    """Mooncake's JSONL: `timestamp` (ms), `input_length`, `output_length`, `hash_ids` per line."""
    for index, text in enumerate(file):
        line_number = index + 1
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as error:
            raise TraceError(f"{path}:{line_number}: not a JSON object ({error.msg})") from None
        except RecursionError:
            raise TraceError(f"{path}:{line_number}: not a JSON object (nested too deeply)") from None
        if not isinstance(row, dict):
            raise TraceError(f"{path}:{line_number}: expected a JSON object, got {type(row).__name__}")
        where = f"{path}:{line_number}"
        timestamp_ms = _number(row.get("timestamp"), "timestamp", where)
        hash_ids = row.get("hash_ids")
        if hash_ids is not None:
            if not isinstance(hash_ids, list) or not all(_is_whole(item) for item in hash_ids):
                raise TraceError(
                    f"{where}: hash_ids: expected a list of whole numbers, got {_shown(hash_ids)}"
                )
            hash_ids = tuple(hash_ids)
        yield _Raw(
            line_number,
            index,
            timestamp_ms / MS_PER_S,
            _length(row.get("input_length"), "input_length", where),
            _length(row.get("output_length"), "output_length", where),
            hash_ids,
        )


def _csv(path: str, file: Iterator[str], trace_format: str) -> Iterator[_Raw]:
    """Azure's (`TIMESTAMP` a date and time) or BurstGPT's (`Timestamp` in seconds) CSV, by header."""
    time_column, input_column, output_column = _CSV_COLUMNS[trace_format]
    reader = csv.reader(file)
    header = next(reader, None)
    if header is None:
        raise TraceError(f"{path}: no rows (an empty file)")
    header = [name.strip() for name in header]
    positions = []
    for column in (time_column, input_column, output_column):
        if column not in header:
            raise TraceError(
                f"{path}:1: no {column!r} column in the header ({trace_format} traces have "
                f"{', '.join(_CSV_COLUMNS[trace_format])}; this one has {', '.join(header)})"
            )
        positions.append(header.index(column))
    read_time = _azure_seconds if trace_format == "azure" else _number
    time_at, input_at, output_at = positions
    for index, cells in enumerate(reader):
        line_number = reader.line_num
        if not any(cell.strip() for cell in cells):
            continue
        where = f"{path}:{line_number}"
        yield _Raw(
            line_number,
            index,
            read_time(_cell(cells, time_at), time_column, where),
            _length(_cell(cells, input_at), input_column, where),
            _length(_cell(cells, output_at), output_column, where),
            None,
        )


def _not_utf8(path: str, error: UnicodeDecodeError) -> str:
    """The line of the first bytes that are not UTF-8, and their offset in it (the decoder's offset is
    into the chunk it was reading)."""
    with open(path, "rb") as file:
        for line_number, data in enumerate(file, 1):
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as found:
                return (
                    f"{path}:{line_number}: not UTF-8 text ({found.reason} at byte {found.start} of the line)"
                )
    return f"{path}: not UTF-8 text ({error.reason})"


def _cell(cells: list[str], position: int) -> str | None:
    """A CSV cell's text, None where it is empty or the row is short."""
    text = cells[position].strip() if position < len(cells) else ""
    return text or None


def _is_whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shown(value: object) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _number(value: object, name: str, where: str) -> float:
    if value is None:
        raise TraceError(f"{where}: {name}: missing")
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise TraceError(f"{where}: {name}: expected a number, got {_shown(value)}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TraceError(f"{where}: {name}: expected a number, got {_shown(value)}")
    return float(value)


def _length(value: object, name: str, where: str) -> int:
    """A length in tokens: a whole number >= 0 (JSON numbers like 12.0 and CSV text like "12" too)."""
    number = _number(value, name, where)
    if number < 0:
        raise TraceError(f"{where}: {name}: a length cannot be negative, got {number:g}")
    if number != int(number):
        raise TraceError(f"{where}: {name}: expected a whole number of tokens, got {number:g}")
    if number > MAX_ROW_TOKENS:
        raise TraceError(
            f"{where}: {name}: {number:g} tokens is above the most a row can have ({MAX_ROW_TOKENS:,})"
        )
    return int(number)


def _azure_seconds(value: str | None, name: str, where: str) -> float:
    """Seconds since the Unix epoch of an Azure trace's timestamp (no zone: UTC, as its traces are)."""
    if value is None:
        raise TraceError(f"{where}: {name}: missing")
    match = _AZURE_TIME.fullmatch(value)
    if match is None:
        raise TraceError(
            f"{where}: {name}: expected a date and time like 2023-11-16 18:15:46.6805900, got {value!r}"
        )
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        moment = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=timezone.utc
        )
    except ValueError as error:
        raise TraceError(f"{where}: {name}: {error} in {value!r}") from None
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        hours, minutes = int(digits[:2]), int(digits[2:])
        if hours > MAX_ZONE_HOURS or minutes > 59:
            raise TraceError(f"{where}: {name}: no such time zone {zone!r} in {value!r}")
        try:
            moment -= sign * timedelta(hours=hours, minutes=minutes)
        except OverflowError:
            raise TraceError(f"{where}: {name}: out of the calendar's range in {value!r}") from None
    seconds = (moment - _EPOCH).total_seconds()
    return seconds + (float(f"0.{fraction}") if fraction else 0.0)


__all__ = [
    "BLOCK_TOKENS",
    "TRACE_FORMATS",
    "TraceError",
    "TraceFormat",
    "TraceRow",
    "TraceSend",
    "TraceWindow",
    "block_count",
    "conversation_trace",
    "read_trace",
    "trace_schedule",
]

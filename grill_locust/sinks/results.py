"""The results folder of a run: records.jsonl as records arrive, records.parquet and summary at the end.

Only the master (or the local runner) writes it. `records.jsonl` is appended and flushed batch by
batch, so a crash or `kill -9` loses at most the last flush interval; each record_id is written once.
A write that fails (a full disk) loses nothing silently: the file is cut back to its last whole line,
the records are held in memory (up to MAX_UNWRITTEN_RECORDS) and written with the next batch; the
campaign stops the run when no space comes back (`unwritable_for_s`).
"""

from __future__ import annotations

import csv
import json
import logging
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, ClassVar

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
import pyarrow.parquet as pq
import yaml

from grill_locust.record import (
    LABEL_COLUMNS,
    RECORD_COLUMN_TYPES,
    RENAMED_COLUMNS,
    REQUIRED_RECORD_COLUMNS,
    RequestRecord,
    record_problem,
    with_current_names,
)
from grill_locust.samples import Sample
from grill_locust.sinks import PhaseEvent

RECORDS_JSONL = "records.jsonl"
RECORDS_PARQUET = "records.parquet"
RECORDS_INTERRUPTED_JSONL = "records.interrupted.jsonl"
PHASES_CSV = "phases.csv"
TELEMETRY_PARQUET = "telemetry.parquet"
TELEMETRY_JSONL = "telemetry.jsonl"
CONFIG_YAML = "config.yaml"
RUN_JSON = "run.json"
SUMMARY_CSV = "summary.csv"

# phases.csv: one row per target x tier x attempt; its labels, numbers, whether it completed and why not
PHASE_COLUMNS = (
    *LABEL_COLUMNS,
    "tier_index",
    "tier_users",
    "tier_rate",  # an open-loop tier's rate (tier_users 0); empty in a tier of users
    "attempt",  # 1: the tier run again after an engine outage in attempt 0 (both rows stay)
    "repeat",  # which of `--repeat N` walks of the campaign (0-based): a row per tier and repeat
    "session",
    "start_wall",
    "end_wall",
    "iterations_target",
    "iterations_done",
    "max_in_flight",  # a rate tier's load.max_in_flight; empty in a tier of users
    "waited_for_max_in_flight",  # a rate tier's sends that waited for a free slot under it
    "complete",
    "note",
)
PHASE_TEXT_COLUMNS = (*LABEL_COLUMNS, "session", "note")
PHASE_NUMBER_COLUMNS = tuple(c for c in PHASE_COLUMNS if c not in (*PHASE_TEXT_COLUMNS, "complete"))

# Records held in memory while the disk refuses them (about 1 KB each); any beyond are counted as lost.
MAX_UNWRITTEN_RECORDS = 100_000
MAX_UNWRITTEN_TELEMETRY_SAMPLES = 100_000
# each failed batch would log a line: while the disk stays full, say so at most this often
UNWRITABLE_LOG_INTERVAL_S = 10.0
WRITE_CHUNK_BYTES = 1 << 20  # held records are written a chunk at a time: what fits is kept

log = logging.getLogger("grill")

_ARROW_TYPES = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}
RECORD_SCHEMA = pa.schema([pa.field(name, _ARROW_TYPES[t]) for name, t in RECORD_COLUMN_TYPES.items()])


def new_run_id(scenario_name: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in scenario_name)[:40] or "run"
    return time.strftime("%Y%m%d-%H%M%S") + f"-{safe}"


class AppendOnlyFile:
    """A jsonl file that only grows by whole lines: a write that fails (a full disk) is cut back to the
    last whole line, so that no torn line is left behind for the next write to glue onto."""

    def __init__(self, path: Path) -> None:
        self.path = path
        end_torn_last_line(path)
        self._file = open(path, "ab", buffering=0)  # unbuffered: a returned write is in the kernel's hands
        self._end = self._file.seek(0, os.SEEK_END)

    def write(self, data: bytes) -> None:
        """Append `data` whole, or raise OSError with the file as it was."""
        view = memoryview(data)
        try:
            while view:
                view = view[self._file.write(view) or 0 :]
        except OSError:
            os.ftruncate(self._file.fileno(), self._end)
            raise
        self._end += len(data)

    def close(self) -> None:
        self._file.close()


def end_torn_last_line(path: Path) -> None:
    """End a last line that a crash cut short, so that the next line written starts a line of its own;
    the cut line stays where it is, for `grill report` to count as unreadable."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        f.write(b"\n")
    log.warning("%s: its last line was cut short by an earlier crash; ended it (unreadable, kept)", path)


def _reason(error: OSError) -> str:
    """What an OSError means for a write, in lower case: "no space left on device"."""
    return (error.strerror or str(error)).lower()


class ResultsWriter:
    """Writes one run's folder, a `Sink`. Not thread-safe: call it from the master's greenlets only.

    No write error reaches the caller: what could not be written is held and written again by the next
    call or by `retry_unwritten()`, and `unwritable_for_s` says for how long the folder refused writes.
    """

    live: ClassVar[bool] = False  # summary.csv is made from every record at the end (report.summarize_run)

    def __init__(
        self, run_dir: Path, meta: dict[str, Any], redacted_config: dict[str, object], resume: bool = False
    ):
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.meta = meta
        self.phases: list[dict[str, object]] = []
        self._seen: set[str] = set()  # record ids in records.jsonl
        # records the disk refused: record_id -> ((target, tier_index), line), oldest first
        self._held_records: dict[str, tuple[tuple[str, int], bytes]] = {}
        self._lost_records: Counter[tuple[str, int]] = Counter()  # refused beyond MAX_UNWRITTEN_RECORDS
        self._held_telemetry: list[bytes] = []
        self.lost_telemetry_samples = 0
        self._phases_unwritten = False
        self._meta_unwritten = False
        self._unwritable_since: float | None = None  # monotonic time of the first refusal since a success
        self._unwritable_logged = 0.0
        self._refusals: dict[Path, str] = {}  # path -> "no space left on device writing <path>"
        if resume:
            self._set_aside_incomplete_tiers()
            for stale in (
                RECORDS_PARQUET,
                TELEMETRY_PARQUET,
            ):  # copies of the jsonl files: made again at close
                (run_dir / stale).unlink(missing_ok=True)
        else:
            with open(run_dir / CONFIG_YAML, "w") as f:
                yaml.safe_dump(redacted_config, f, sort_keys=False)
        self._records = AppendOnlyFile(run_dir / RECORDS_JSONL)
        self._telemetry = AppendOnlyFile(run_dir / TELEMETRY_JSONL)
        self.write_meta()

    def _set_aside_incomplete_tiers(self) -> None:
        """On --resume: tiers that did not complete will run again, so their earlier records move to
        records.interrupted.jsonl (kept, but out of the statistics) and their phases.csv rows go. The
        records of an older folder are written back under today's column names; unreadable lines stay."""
        phases = read_phases(self.run_dir)
        complete = {(p["target"], int(p["tier_index"])) for p in phases if p["complete"] == "True"}
        # a complete tier keeps the row of an attempt an outage cut short, as its records stay
        self.phases = [p for p in phases if (p["target"], int(p["tier_index"])) in complete]
        kept: list[dict[str, Any]] = []
        set_aside: list[dict[str, object]] = []
        renamed = False
        rows, unreadable = read_records(self.run_dir / RECORDS_JSONL)
        for row in rows:
            record = with_current_names(row)
            renamed |= record.keys() != row.keys()
            (kept if (record["target"], record["tier_index"]) in complete else set_aside).append(record)
        if unreadable:
            log.warning(
                "%s: %d unreadable lines (%s) kept as they are; grill report counts them",
                self.run_dir / RECORDS_JSONL,
                len(unreadable),
                line_numbers_text(unreadable),
            )
        if set_aside:
            with open(self.run_dir / RECORDS_INTERRUPTED_JSONL, "a", encoding="utf-8") as f:
                f.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in set_aside))
            tiers = sorted({(r["target"], r["tier_index"]) for r in set_aside})
            log.info(
                "--resume: %d records of %d tiers not complete (they run again) moved aside to %s",
                len(set_aside),
                len(tiers),
                self.run_dir / RECORDS_INTERRUPTED_JSONL,
            )
        if set_aside or renamed:
            with open(self.run_dir / RECORDS_JSONL, "w", encoding="utf-8") as f:
                f.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in kept))
                f.write("".join(line.text + "\n" for line in unreadable))
        self._seen = {r["record_id"] for r in kept}

    @property
    def record_count(self) -> int:
        """Records in records.jsonl (not those held for want of space)."""
        return len(self._seen)

    @property
    def held_record_count(self) -> int:
        """Records received and held for want of space, to be written when it comes back."""
        return len(self._held_records)

    @property
    def unwritten_record_count(self) -> int:
        """Records received and not (yet) in records.jsonl: held, or lost beyond the bound."""
        return len(self._held_records) + sum(self._lost_records.values())

    def unwritten_of(self, target: str, tier_index: int) -> tuple[int, int]:
        """Records of one tier received and not (yet) in records.jsonl: (held, lost beyond the bound)."""
        key = (target, tier_index)
        held = sum(1 for tier, _ in self._held_records.values() if tier == key)
        return held, self._lost_records[key]

    @property
    def unwritable_reason(self) -> str:
        """Why the folder refused the records ("no space left on device writing <path>"), else why it
        refused another file; "" while it writes."""
        return self._refusals.get(self._records.path) or next(reversed(self._refusals.values()), "")

    def unwritable_for_s(self) -> float:
        """How long the folder has refused every write that was tried (0 when the last one succeeded)."""
        return 0.0 if self._unwritable_since is None else time.monotonic() - self._unwritable_since

    def write_meta(self) -> None:
        self._meta_unwritten = not self._write_whole(
            self.run_dir / RUN_JSON, lambda f: f.write(json.dumps(self.meta, indent=2, default=str))
        )

    def unseen(self, records: Sequence[RequestRecord]) -> list[RequestRecord]:
        """The records not in the folder (or held for it) yet, each once (a worker resends a batch it
        could not confirm)."""
        batch_ids: set[str] = set()
        fresh = []
        for record in records:
            record_id = record.record_id
            known = record_id in self._seen or record_id in self._held_records
            if not known and record_id not in batch_ids:
                batch_ids.add(record_id)
                fresh.append(record)
        return fresh

    def write_records(self, records: Sequence[RequestRecord]) -> None:
        """Append the records not written before (a record is never written twice). A record counts as
        written once records.jsonl has it whole; until then it is held and tried again."""
        fresh = self.unseen(records)
        if self._held_records or not self._phases_and_meta_written():
            self._hold_records(fresh)
            self.retry_unwritten()
        elif fresh:
            # orjson: json.dumps was 60 % of the master's CPU per record (bench/master_ingest.py); it
            # writes a dataclass's fields in their order, the columns of RECORD_COLUMNS
            lines = [orjson.dumps(r) + b"\n" for r in fresh]
            try:
                self._records.write(b"".join(lines))
            except OSError as error:
                self._hold_records(fresh, lines)
                self._refused(error, self._records.path)
                return
            self._seen.update(record.record_id for record in fresh)
            self._written()

    def _hold_records(self, records: Sequence[RequestRecord], lines: list[bytes] | None = None) -> None:
        for index, record in enumerate(records):
            key = (record.target, record.tier_index)
            if len(self._held_records) >= MAX_UNWRITTEN_RECORDS:
                self._lost_records[key] += 1
                continue
            line = lines[index] if lines is not None else orjson.dumps(record) + b"\n"
            self._held_records[record.record_id] = (key, line)

    def _phases_and_meta_written(self) -> bool:
        return not (self._phases_unwritten or self._meta_unwritten or self._held_telemetry)

    def retry_unwritten(self) -> None:
        """Write what the disk refused before: held records (a chunk at a time), telemetry, phases.csv and
        run.json. Called with every batch, and by the campaign every tick."""
        if not self._held_records and self._phases_and_meta_written():
            return
        while self._held_records:
            chunk_ids, chunk, size = [], [], 0
            for record_id, (_, line) in self._held_records.items():
                chunk_ids.append(record_id)
                chunk.append(line)
                size += len(line)
                if size >= WRITE_CHUNK_BYTES:
                    break
            try:
                self._records.write(b"".join(chunk))
            except OSError as error:
                self._refused(error, self._records.path)
                return
            for record_id in chunk_ids:
                del self._held_records[record_id]
            self._seen.update(chunk_ids)
        if self._held_telemetry:
            self.write_telemetry([])
        if self._phases_unwritten:
            self._write_phases()
        if self._meta_unwritten:
            self.write_meta()
        if self._phases_and_meta_written():
            self._written()

    def _refused(self, error: OSError, path: Path) -> None:
        """A write failed: remember since when, and say so (once, then every UNWRITABLE_LOG_INTERVAL_S)."""
        now = time.monotonic()
        self._refusals[path] = f"{_reason(error)} writing {path}"
        if self._unwritable_since is None:
            self._unwritable_since = now
        if now - self._unwritable_logged >= UNWRITABLE_LOG_INTERVAL_S:
            self._unwritable_logged = now
            log.error(
                "%s: %d records held in memory (up to %d), written when space comes back",
                self._refusals[path],
                len(self._held_records),
                MAX_UNWRITTEN_RECORDS,
            )

    def _written(self) -> None:
        """A write succeeded and nothing is held: the folder is writable again."""
        if self._unwritable_since is not None and not self._held_records:
            log.warning(
                "%s writable again after %.0f s: every held record written (%d lost beyond the bound)",
                self.run_dir,
                self.unwritable_for_s(),
                sum(self._lost_records.values()),
            )
            self._unwritable_since = None
            self._unwritable_logged = 0.0
            self._refusals.clear()

    def write_telemetry(self, samples: list[Sample]) -> None:
        lines = self._held_telemetry + [orjson.dumps(s) + b"\n" for s in samples]
        if not lines:
            return
        try:
            self._telemetry.write(b"".join(lines))
        except OSError as error:
            self._refused(error, self._telemetry.path)
            kept = lines[:MAX_UNWRITTEN_TELEMETRY_SAMPLES]
            self.lost_telemetry_samples += len(lines) - len(kept)
            self._held_telemetry = kept
            return
        self._held_telemetry = []

    def write_phase(self, event: PhaseEvent, phase: dict[str, object]) -> None:
        """Add or update the row of one target x tier in phases.csv (the row says whether it ended); an
        updated row keeps its place (a tier's late records update it while the next tier runs)."""
        key = phase_key(phase)
        index = next((i for i, row in enumerate(self.phases) if phase_key(row) == key), len(self.phases))
        self.phases[index : index + 1] = [phase]
        self._write_phases()

    def _write_phases(self) -> None:
        def rows(f: IO[str]) -> None:
            writer = csv.DictWriter(f, fieldnames=PHASE_COLUMNS)
            writer.writeheader()
            writer.writerows(self.phases)

        self._phases_unwritten = not self._write_whole(self.run_dir / PHASES_CSV, rows)

    def _write_whole(self, path: Path, write: Callable[[IO[str]], object]) -> bool:
        """Replace `path` whole or not at all (a kill or a full disk meanwhile leaves the old one)."""
        partial = path.with_name(path.name + ".partial")
        try:
            with open(partial, "w", newline="") as f:
                write(f)
            partial.replace(path)
        except OSError as error:
            partial.unlink(missing_ok=True)
            self._refused(error, path)
            return False
        return True

    def write_tier(self, row: dict[str, object]) -> None:
        """Nothing to do while the run goes: summary.csv is made from every record at the end."""

    def close(self) -> None:
        """Finish the folder: held records written if the disk lets them, records.parquet and
        telemetry.parquet from the jsonl files (with the lines they could not read), the end time in
        run.json. A file the disk refuses is logged, not raised: records.jsonl holds what was written."""
        self.retry_unwritten()
        self._records.close()
        self._telemetry.close()
        table, unreadable = read_records_table(self.run_dir / RECORDS_JSONL)
        self.meta["unreadable_record_lines"] = [line.as_dict() for line in unreadable]
        self._write_parquet(table, self.run_dir / RECORDS_PARQUET)
        samples, _ = read_jsonl(self.run_dir / TELEMETRY_JSONL)
        if samples:
            self._write_parquet(pa.Table.from_pylist(samples), self.run_dir / TELEMETRY_PARQUET)
        self.meta["ended_wall"] = time.time()
        self.write_meta()
        if self.unwritten_record_count:
            log.error("%d records not written: %s", self.unwritten_record_count, self.unwritable_reason)
        if self.lost_telemetry_samples or self._held_telemetry:
            log.error(
                "%d telemetry samples not written: %s",
                self.lost_telemetry_samples + len(self._held_telemetry),
                self.unwritable_reason,
            )

    def _write_parquet(self, table: pa.Table, path: Path) -> None:
        partial = path.with_name(path.name + ".partial")
        try:
            pq.write_table(table, partial)
            partial.replace(path)
        except OSError as error:
            partial.unlink(missing_ok=True)
            self._refused(error, path)


@dataclass(frozen=True)
class UnreadableLine:
    """A line of a jsonl file that is not what the file holds (cut by a crash, damaged, or for
    records.jsonl no record: record.record_problem), 1-based; why, and the tier its text still names,
    when it names one."""

    line: int
    text: str
    target: str | None = None
    tier_index: int | None = None
    reason: str = ""

    def as_dict(self) -> dict[str, object]:
        return {
            "line": self.line,
            "target": self.target,
            "tier_index": self.tier_index,
            "reason": self.reason,
        }


_TARGET_FIELD = re.compile(r'"target"\s*:\s*("(?:[^"\\]|\\.)*")')
_TIER_FIELD = re.compile(r'"tier_index"\s*:\s*(-?\d+)\s*[,}]')


def _unreadable(number: int, text: str, reason: str) -> UnreadableLine:
    target, tier = _TARGET_FIELD.search(text), _TIER_FIELD.search(text)
    if target is None or tier is None:
        return UnreadableLine(number, text, reason=reason)
    return UnreadableLine(number, text, json.loads(target.group(1)), int(tier.group(1)), reason)


def line_numbers_text(lines: list[UnreadableLine], most: int = 20) -> str:
    """ "lines 3, 9" for a log or a note; past `most` numbers, how many more."""
    numbers = ", ".join(str(line.line) for line in lines[:most])
    more = f" and {len(lines) - most} more" if len(lines) > most else ""
    return f"line{'s' if len(lines) > 1 else ''} {numbers}{more}"


def read_jsonl(
    path: Path, problem: Callable[[dict[str, object]], str | None] | None = None
) -> tuple[list[dict[str, object]], list[UnreadableLine]]:
    """Every JSON object of a jsonl file (that `problem` finds nothing wrong with), and the lines that
    are not one, with why (blank lines are nothing)."""
    if not path.exists():
        return [], []
    rows: list[dict[str, object]] = []
    unreadable: list[UnreadableLine] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                row, reason = None, "not JSON"
            else:
                reason = "not a JSON object"
            if isinstance(row, dict):
                found = problem(row) if problem is not None else None
                if found is None:
                    rows.append(row)
                    continue
                reason = found
            unreadable.append(_unreadable(number, line.rstrip("\n"), reason))
    return rows, unreadable


def _record_problem(row: dict[str, object]) -> str | None:
    return record_problem(with_current_names(row))


def read_records(path: Path) -> tuple[list[dict[str, object]], list[UnreadableLine]]:
    """The records of a records.jsonl as written (perhaps under an older folder's names), and the lines
    that are no record."""
    return read_jsonl(path, _record_problem)


def read_records_table(path: Path) -> tuple[pa.Table, list[UnreadableLine]]:
    """records.jsonl as an Arrow table with the record schema under today's names, and the lines that
    are no record. Read column-wise (no Python dict per record) while every line passes what the record
    schema asks (`_clean_read`); else line by line, each line checked by record.record_problem."""
    if not path.exists() or path.stat().st_size == 0:
        return RECORD_SCHEMA.empty_table(), []
    table = _clean_read(path)
    if table is not None:
        return table, []
    rows, unreadable = read_records(path)
    table = pa.Table.from_pylist([with_current_names(row) for row in rows], schema=RECORD_SCHEMA)
    return table, unreadable


def _clean_read(path: Path) -> pa.Table | None:
    """The fast read of records.jsonl, or None where a line may be no record. Arrow's reader refuses a
    value of another type than its column's; what it lets through and record_problem does not (NaN or
    infinity, a required field missing, two objects on one line) or an older folder's column names send the
    file to the line-by-line read."""
    try:
        table = pa_json.read_json(path, parse_options=pa_json.ParseOptions(explicit_schema=RECORD_SCHEMA))
    except (pa.ArrowException, OSError):
        return None
    if any(old in table.column_names for old in RENAMED_COLUMNS):  # an older folder: renamed row by row
        return None
    table = table.select(list(RECORD_SCHEMA.names))
    if table.num_rows != _line_count(path):
        return None
    if any(table.column(name).null_count for name in REQUIRED_RECORD_COLUMNS):
        return None
    for name, kind in RECORD_COLUMN_TYPES.items():
        if kind is float and pc.any(pc.invert(pc.is_finite(table.column(name)))).as_py():
            return None
    return table


def _line_count(path: Path) -> int:
    """Lines of a file (a last one without its newline counted too)."""
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(WRITE_CHUNK_BYTES):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


def phase_key(row: dict[str, Any]) -> tuple[str, int, int, int]:
    """A phases.csv row's target, tier, attempt and repeat (rows written before these were counted: 0)."""
    return row["target"], int(row["tier_index"]), int(row.get("attempt") or 0), int(row.get("repeat") or 0)


def read_phases(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / PHASES_CSV
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return [with_current_names(row) for row in csv.DictReader(f)]

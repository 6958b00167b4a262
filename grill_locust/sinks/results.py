"""The results folder of a run: records.jsonl as records arrive, records.parquet and summary at the end.

Only the master (or the local runner) writes it. `records.jsonl` is appended and flushed batch by
batch, so a crash or `kill -9` loses at most the last flush interval; each record_id is written once.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq
import yaml

from grill_locust.record import LABEL_COLUMNS, RECORD_COLUMN_TYPES, with_current_names
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

PHASE_COLUMNS = (
    *LABEL_COLUMNS,
    "tier_index",
    "tier_users",
    "attempt",  # 1: the tier run again after an engine outage in attempt 0 (both rows stay)
    "session",
    "start_wall",
    "end_wall",
    "iterations_target",
    "iterations_done",
    "complete",
    "note",
)

_ARROW_TYPES = {str: pa.string(), int: pa.int64(), float: pa.float64()}
RECORD_SCHEMA = pa.schema([pa.field(name, _ARROW_TYPES[t]) for name, t in RECORD_COLUMN_TYPES.items()])


def new_run_id(scenario_name: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in scenario_name)[:40] or "run"
    return time.strftime("%Y%m%d-%H%M%S") + f"-{safe}"


class ResultsWriter:
    """Writes one run's folder, a `Sink`. Not thread-safe: call it from the master's greenlets only."""

    live: ClassVar[bool] = False  # summary.csv is made from every record at the end (report.summarize_run)

    def __init__(
        self, run_dir: Path, meta: dict[str, Any], redacted_config: dict[str, Any], resume: bool = False
    ):
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.meta = meta
        self.phases: list[dict[str, Any]] = []
        self._seen: set[str] = set()
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
        self._records = open(run_dir / RECORDS_JSONL, "ab")
        self._telemetry = open(run_dir / TELEMETRY_JSONL, "ab")
        self.write_meta()

    def _set_aside_incomplete_tiers(self) -> None:
        """On --resume: tiers that did not complete will run again, so their earlier records move to
        records.interrupted.jsonl (kept, but out of the statistics) and their phases.csv rows go. The
        records of an older folder are written back under today's column names."""
        phases = read_phases(self.run_dir)
        complete = {(p["target"], int(p["tier_index"])) for p in phases if p["complete"] == "True"}
        # a complete tier keeps the row of an attempt an outage cut short, as its records stay
        self.phases = [p for p in phases if (p["target"], int(p["tier_index"])) in complete]
        kept: list[dict[str, Any]] = []
        set_aside: list[dict[str, Any]] = []
        renamed = False
        for row in read_records_jsonl(self.run_dir / RECORDS_JSONL):
            record = with_current_names(row)
            renamed |= record.keys() != row.keys()
            (kept if (record["target"], record["tier_index"]) in complete else set_aside).append(record)
        if set_aside:
            with open(self.run_dir / RECORDS_INTERRUPTED_JSONL, "a", encoding="utf-8") as f:
                f.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in set_aside))
        if set_aside or renamed:
            with open(self.run_dir / RECORDS_JSONL, "w", encoding="utf-8") as f:
                f.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in kept))
        self._seen = {r["record_id"] for r in kept}

    @property
    def record_count(self) -> int:
        return len(self._seen)

    def write_meta(self) -> None:
        (self.run_dir / RUN_JSON).write_text(json.dumps(self.meta, indent=2, default=str))

    def unseen(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The records not in the folder yet, each once (a worker resends a batch it could not confirm)."""
        batch_ids: set[str] = set()
        fresh = []
        for record in records:
            record_id = record["record_id"]
            if record_id not in self._seen and record_id not in batch_ids:
                batch_ids.add(record_id)
                fresh.append(record)
        return fresh

    def write_records(self, records: list[dict[str, Any]]) -> None:
        """Append the records not written before (a record is never written twice)."""
        fresh = self.unseen(records)
        if fresh:
            self._seen.update(record["record_id"] for record in fresh)
            # orjson: json.dumps was 60 % of the master's CPU per record (bench/master_ingest.py)
            self._records.write(b"".join(orjson.dumps(r) + b"\n" for r in fresh))
            self._records.flush()

    def write_telemetry(self, samples: list[dict[str, Any]]) -> None:
        if samples:
            self._telemetry.write(b"".join(orjson.dumps(s) + b"\n" for s in samples))
            self._telemetry.flush()

    def write_phase(self, event: PhaseEvent, phase: dict[str, Any]) -> None:
        """Add or update the row of one target x tier in phases.csv (the row says whether it ended)."""
        key = phase_key(phase)
        self.phases = [p for p in self.phases if phase_key(p) != key] + [phase]
        partial = self.run_dir / (PHASES_CSV + ".partial")
        with open(partial, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=PHASE_COLUMNS)
            writer.writeheader()
            writer.writerows(self.phases)
        partial.replace(self.run_dir / PHASES_CSV)  # whole or not at all, if the run is killed meanwhile

    def write_tier(self, row: dict[str, Any]) -> None:
        """Nothing to do while the run goes: summary.csv is made from every record at the end."""

    def close(self) -> None:
        """Finish the folder: the end time in run.json, records.parquet and telemetry.parquet from the
        jsonl files."""
        self.meta["ended_wall"] = time.time()
        self.write_meta()
        self._records.close()
        self._telemetry.close()
        pq.write_table(read_records_table(self.run_dir / RECORDS_JSONL), self.run_dir / RECORDS_PARQUET)
        samples = read_records_jsonl(self.run_dir / TELEMETRY_JSONL)
        if samples:
            pq.write_table(pa.Table.from_pylist(samples), self.run_dir / TELEMETRY_PARQUET)


def read_records_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete line of a jsonl file (a line cut by a crash is skipped)."""
    if not path.exists():
        return []
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def read_records_table(path: Path) -> pa.Table:
    """records.jsonl as an Arrow table with the record schema, read column-wise (no Python dict per record).
    A line cut by a crash makes the fast reader fail; then the complete lines are read one by one."""
    if not path.exists() or path.stat().st_size == 0:
        return RECORD_SCHEMA.empty_table()
    try:
        table = pa_json.read_json(path, parse_options=pa_json.ParseOptions(explicit_schema=RECORD_SCHEMA))
        return table.select(list(RECORD_SCHEMA.names))
    except pa.ArrowInvalid:
        return pa.Table.from_pylist(read_records_jsonl(path), schema=RECORD_SCHEMA)


def phase_key(row: dict[str, Any]) -> tuple[str, int, int]:
    """A phases.csv row's target, tier and attempt (rows written before attempts were counted: 0)."""
    return row["target"], int(row["tier_index"]), int(row.get("attempt") or 0)


def read_phases(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / PHASES_CSV
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return [with_current_names(row) for row in csv.DictReader(f)]

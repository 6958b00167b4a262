"""Read one results folder (records, phases, telemetry, run.json) into a `RunData` for the report.

A run that crashed (or is still running) leaves `records.jsonl` and `telemetry.jsonl` without their
parquet copies, perhaps with a half-written last line, and perhaps no (or an empty) `phases.csv`: the
report still reads what is there. The parquet files are written at a clean close and removed by
`--resume`, so where one is there it holds every record; one that does not open is passed over.
A folder written before a column was renamed is read under today's names (`with_current_columns`).
A line of records.jsonl that is not a record (not JSON, or a field of the wrong type: record.record_problem)
is neither read nor counted, but never passed over in silence: `RunData` lists it (`unreadable_lines`),
from the jsonl or, for a parquet copy, from what its close wrote in run.json.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from grill_locust.errors import GrillError
from grill_locust.record import LABEL_COLUMNS, NUMERIC_RECORD_COLUMNS, RECORD_COLUMNS, RENAMED_COLUMNS
from grill_locust.sinks.results import (
    CONFIG_YAML,
    PHASE_COLUMNS,
    PHASE_NUMBER_COLUMNS,
    PHASE_TEXT_COLUMNS,
    PHASES_CSV,
    RECORDS_JSONL,
    RECORDS_PARQUET,
    RUN_JSON,
    TELEMETRY_JSONL,
    TELEMETRY_PARQUET,
    UnreadableLine,
    read_jsonl,
    read_records_table,
)


@dataclass(frozen=True)
class RunData:
    """Everything one run left in its results folder, as DataFrames."""

    records: pd.DataFrame  # RECORD_COLUMNS, one row per request
    phases: pd.DataFrame  # PHASE_COLUMNS, one row per target x tier
    telemetry: pd.DataFrame | None  # telemetry.parquet (or .jsonl) when present
    meta: dict[str, Any] = field(default_factory=dict)  # run.json, plus "slo" from config.yaml if needed
    run_dir: Path | None = None
    unreadable_lines: tuple[UnreadableLine, ...] = ()  # lines of records.jsonl that are not a record

    @property
    def run_id(self) -> str:
        return str(self.meta.get("run_id") or (self.run_dir.name if self.run_dir else "run"))


def load_run(run_dir: str | Path) -> RunData:
    """Load a results folder; raises GrillError (one line naming the folder) when it holds no records."""
    folder = Path(run_dir)
    if not folder.is_dir():
        raise GrillError(f"{folder}: no such results folder (expected results/<run_id>)")
    meta = _read_meta(folder)
    records, unreadable = _read_records(folder, meta)
    if "run_id" not in meta:
        ids = records["run_id"].dropna().unique() if len(records) else []
        meta["run_id"] = str(ids[0]) if len(ids) else folder.name
    phases = _read_phases(folder, records)
    records, phases = latest_attempts(records, phases)
    telemetry = _read_telemetry(folder)
    return RunData(
        records=records,
        phases=phases,
        telemetry=telemetry,
        meta=meta,
        run_dir=folder,
        unreadable_lines=tuple(unreadable),
    )


def _read_records(folder: Path, meta: dict[str, Any]) -> tuple[pd.DataFrame, list[UnreadableLine]]:
    parquet, jsonl = folder / RECORDS_PARQUET, folder / RECORDS_JSONL
    frame = _read_parquet(parquet)
    if frame is not None:  # its close listed the lines it could not read
        unreadable = [
            UnreadableLine(
                int(line["line"]), "", line.get("target"), line.get("tier_index"), line.get("reason", "")
            )
            for line in meta.get("unreadable_record_lines") or []
        ]
        return normalize_records(frame), unreadable
    if not jsonl.is_file():
        raise GrillError(f"{folder}: no {RECORDS_PARQUET} or {RECORDS_JSONL} (is this a results folder?)")
    table, unreadable = read_records_table(jsonl)
    return normalize_records(table.to_pandas()), unreadable


def _read_parquet(path: Path) -> pd.DataFrame | None:
    """A parquet copy when it opens; None when it is not there or cut short by a kill while it was
    written (pyarrow: ArrowInvalid)."""
    if path.is_file():
        try:
            return pd.read_parquet(path)
        except (OSError, ValueError):
            pass
    return None


def _read_telemetry(folder: Path) -> pd.DataFrame | None:
    """telemetry.parquet, else the telemetry.jsonl it was made from; None when neither holds a sample."""
    frame = _read_parquet(folder / TELEMETRY_PARQUET)
    jsonl = folder / TELEMETRY_JSONL
    if frame is None and jsonl.is_file() and jsonl.stat().st_size:
        try:
            frame = pd.read_json(jsonl, lines=True, dtype=False)
        except ValueError:  # a line cut by a crash: the samples read one by one
            frame = pd.DataFrame.from_records(read_jsonl(jsonl)[0])
    return frame if frame is not None and len(frame) else None


def with_current_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """A records or phases frame of any results folder under today's column names (RENAMED_COLUMNS)."""
    renames = {old: new for old, new in RENAMED_COLUMNS.items() if old in frame and new not in frame}
    return frame.rename(columns=renames)


def normalize_records(frame: pd.DataFrame) -> pd.DataFrame:
    """Give a records frame every RECORD_COLUMNS column, numbers as floats, labels as strings."""
    frame = with_current_columns(frame)
    for name in RECORD_COLUMNS:
        if name not in frame.columns:
            frame[name] = np.nan if name in NUMERIC_RECORD_COLUMNS else None
    for name in NUMERIC_RECORD_COLUMNS:
        if not pd.api.types.is_float_dtype(frame[name]):
            frame[name] = pd.to_numeric(frame[name], errors="coerce").astype("float64")
    for name in (*LABEL_COLUMNS, "status"):
        frame[name] = frame[name].astype("string").fillna("")
    frame["repeat"] = frame["repeat"].fillna(0.0)  # written before --repeat: one walk of the campaign
    ordered = list(RECORD_COLUMNS) + [c for c in frame.columns if c not in RECORD_COLUMNS]
    return frame[ordered]


def _read_phases(folder: Path, records: pd.DataFrame) -> pd.DataFrame:
    path = folder / PHASES_CSV
    if path.is_file() and path.stat().st_size:
        phases = pd.read_csv(path)
        if len(phases):
            return _normalize_phases(phases)
    return phases_from_records(records)


def _normalize_phases(phases: pd.DataFrame) -> pd.DataFrame:
    phases = with_current_columns(phases)
    for name in PHASE_COLUMNS:
        if name not in phases.columns:
            phases[name] = np.nan
    for name in PHASE_NUMBER_COLUMNS:
        phases[name] = pd.to_numeric(phases[name], errors="coerce").astype("float64")
    phases["attempt"] = phases["attempt"].fillna(0.0)  # written before tiers were run again
    phases["repeat"] = phases["repeat"].fillna(0.0)  # written before --repeat
    phases["complete"] = phases["complete"].map(_as_bool)
    for name in PHASE_TEXT_COLUMNS:
        phases[name] = phases[name].astype("string").fillna("")
    return phases[list(PHASE_COLUMNS)]


def _as_bool(value: object) -> bool:
    """phases.csv writes True/False; a missing value counts as complete (nothing says otherwise)."""
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "0", "no")
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return True
    return bool(value)


def phases_from_records(records: pd.DataFrame) -> pd.DataFrame:
    """Rebuild phases (tier spans) from the records when phases.csv is missing."""
    if not len(records):
        return _normalize_phases(pd.DataFrame(columns=list(PHASE_COLUMNS)))
    frame = records.assign(_end=records["wall_start"] + records["e2e_s"].fillna(0.0))
    grouped = frame.groupby(["target", "tier_index", "repeat"], sort=True)
    phases = grouped.agg(
        run_id=("run_id", "first"),
        backend=("backend", "first"),
        engine=("engine", "first"),
        model=("model", "first"),
        conversation=("conversation", "first"),
        kind=("kind", "first"),
        tier_users=("tier_users", "max"),  # a plain run: the count grows while users spawn
        attempt=("attempt", "max"),
        start_wall=("wall_start", "min"),
        end_wall=("_end", "max"),
        iterations_done=("iteration", "nunique"),
    ).reset_index()
    phases["iterations_target"] = np.nan
    phases["complete"] = True
    phases["note"] = "derived from records"
    return _normalize_phases(phases)


def latest_attempts(records: pd.DataFrame, phases: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A tier run again after an engine outage is measured by its last attempt: the records and phase
    row of that attempt; the earlier attempts' records stay in the folder and are counted beside
    (`earlier_attempt_requests` of the phase row). Each repeat of a tier (`--repeat`) keeps its own."""
    tier = ["target", "tier_index", "repeat"]
    last = phases.sort_values("attempt", kind="stable").drop_duplicates(tier, keep="last")
    last = last.sort_index().reset_index(drop=True)
    attempt_of_tier = last.set_index(tier)["attempt"]
    if not len(records):
        return records, last.assign(earlier_attempt_requests=0)
    wanted = attempt_of_tier.reindex(pd.MultiIndex.from_frame(records[tier])).fillna(0.0).to_numpy()
    earlier = records["attempt"].fillna(0.0).to_numpy() < wanted
    counts = records[earlier].groupby(tier).size()
    last["earlier_attempt_requests"] = (
        counts.reindex(pd.MultiIndex.from_frame(last[tier])).fillna(0).astype("int64").to_numpy()
    )
    return records[~earlier].reset_index(drop=True), last


def _read_meta(folder: Path) -> dict[str, object]:
    meta: dict[str, object] = {}
    run_json = folder / RUN_JSON
    if run_json.is_file():
        try:
            meta = dict(json.loads(run_json.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, TypeError, ValueError) as error:
            raise GrillError(f"{run_json}: not valid JSON ({error})") from error
    config = _read_config(folder / CONFIG_YAML)
    if not isinstance(meta.get("slo"), dict):
        slo = config.get("slo")
        if isinstance(slo, dict):
            meta["slo"] = slo
    meta["budgets_ms"] = _budgets_ms(config)
    return meta


def _read_config(path: Path) -> dict[str, object]:
    """The run's scenario as it was run (config.yaml), or {} when it is missing or unreadable."""
    if not path.is_file():
        return {}
    import yaml

    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError:
        return {}
    return config if isinstance(config, dict) else {}


def _budgets_ms(config: dict[str, Any]) -> dict[str, float]:
    """{conversation name: budget_ms} of the scenario's conversations that have one (autocomplete)."""
    budgets = {}
    for conversation in config.get("conversations") or []:
        if isinstance(conversation, dict) and isinstance(conversation.get("budget_ms"), int | float):
            budgets[str(conversation.get("name"))] = float(conversation["budget_ms"])
    return budgets

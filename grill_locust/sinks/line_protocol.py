"""InfluxDB line protocol for grill's measurements: which columns are tags and fields, and the encoding.

Every InfluxDB writer builds its points here (the run's sink and the GPU exporter's push), so a
measurement has one schema whoever writes it. Pure functions, standard library only: the exporter runs
on engine machines without gevent or pandas.

Schema: measurements `grill_request`, `grill_tier`, `grill_phase`, `grill_gpu`, `grill_engine`; tags are
low-cardinality labels only, every field is written as a float (one type per field whatever the value,
and no strings: some Influx-protocol stores turn them into 0), timestamps in ms.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from grill_locust.record import LABEL_COLUMNS, RECORD_COLUMN_TYPES, RequestRecord
from grill_locust.samples import KIND_GPU
from grill_locust.workload.kinds import WORKLOAD_KINDS

MEASUREMENT_REQUEST = "grill_request"
MEASUREMENT_TIER = "grill_tier"
MEASUREMENT_PHASE = "grill_phase"
MEASUREMENT_GPU = "grill_gpu"
MEASUREMENT_ENGINE = "grill_engine"

# labels that may become tags (low cardinality only: never record, user or conversation ids)
# tier_rate: an open-loop tier's rate (left out of a tier of users' points, as every empty tag is)
RUN_TAGS: tuple[str, ...] = (*LABEL_COLUMNS, "tier_users", "tier_rate")
REQUEST_TAGS: tuple[str, ...] = (*RUN_TAGS, "status")
TELEMETRY_TAGS: tuple[str, ...] = ("run_id", "backend", "source", "host", "gpu_index", "gpu_uuid", "gpu_name")
PHASE_TAGS: tuple[str, ...] = (*RUN_TAGS, "event")
WORKER_TAG = "worker"  # the load generator process that measured a request (the master for run events)
# an agent session's step (the record's turn) on its requests only, for per-step panels: one series per
# step a session reaches (tens), never per session; other kinds' points are as they were
STEP_TAG = "step"

# columns that hold a time, not a measurement: never fields; a point's timestamp comes from one of them
TIME_COLUMNS: tuple[str, ...] = ("wall_start", "wall_time", "start_wall", "end_wall", "time")
# record columns written as fields of grill_request: numbers, and booleans as 1 / 0 (shown_in_budget:
# a field's mean is then the share that held)
REQUEST_FIELDS: tuple[str, ...] = tuple(
    c
    for c, kind in RECORD_COLUMN_TYPES.items()
    if kind in (int, float, bool) and c not in (*RUN_TAGS, *TIME_COLUMNS)
)
PHASE_END_EVENTS = frozenset({"end", "stop", "stopped"})


def escape_key(text: str) -> str:
    """A tag key, tag value or field key."""
    return text.replace("\\", "\\\\").replace(",", r"\,").replace("=", r"\=").replace(" ", r"\ ")


def escape_measurement(text: str) -> str:
    return text.replace("\\", "\\\\").replace(",", r"\,").replace(" ", r"\ ")


def field_value(value: object) -> float | None:
    """A field as a float, or None where it is not a finite number (strings, None, NaN)."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        number = float(value)
        return number if math.isfinite(number) else None
    # numpy / pandas scalars
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        try:
            return field_value(value.item())
        except (TypeError, ValueError):
            return None
    return None


def tag_value(value: object) -> str | None:
    """A tag's text, or None to leave the tag out (Influx rejects empty tag values)."""
    if value is None or isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # tier_users 10.0 -> "10"
    return str(value) or None


def series_key(measurement: str, tags: Mapping[str, object]) -> str:
    """`measurement,tag=value,...` with tags sorted by key (Influx's canonical order), empty ones left out."""
    parts = [escape_measurement(measurement)]
    for key in sorted(tags):
        text = tag_value(tags[key])
        if text is not None:
            parts.append(f"{escape_key(key)}={escape_key(text)}")
    return ",".join(parts)


@dataclass(frozen=True, slots=True)
class Point:
    """One point before serialisation: the series key (measurement + tags), fields and time in ms."""

    series: str
    fields: dict[str, float]
    time_ms: int

    def line(self) -> str:
        field_text = ",".join(f"{escape_key(name)}={value!r}" for name, value in self.fields.items())
        return f"{self.series} {field_text} {self.time_ms}"

    def at(self, time_ms: int) -> Point:
        return self if time_ms == self.time_ms else Point(self.series, self.fields, time_ms)


def _time_ms(row: Mapping[str, object], columns: tuple[str, ...]) -> int:
    """The first of `columns` that holds a number, else now."""
    for column in columns:
        value = field_value(row.get(column))
        if value is not None:
            return _ms(value)
    return _ms(time.time())


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000.0))


def request_point(record: RequestRecord, worker: str) -> Point | None:
    """A grill_request point from a record."""
    tags: dict[str, object] = {key: getattr(record, key) for key in REQUEST_TAGS}
    tags[WORKER_TAG] = worker
    kind = WORKLOAD_KINDS.get(record.kind)
    if kind is not None and kind.agent_steps:
        tags[STEP_TAG] = record.turn
    fields = {}
    for name in REQUEST_FIELDS:
        value = field_value(getattr(record, name))
        if value is not None:
            fields[name] = value
    if not fields:
        return None
    return Point(series_key(MEASUREMENT_REQUEST, tags), fields, _ms(record.wall_start))


def _labelled_point(
    measurement: str,
    row: Mapping[str, object],
    tag_keys: Iterable[str],
    extra_tags: Mapping[str, object],
    time_columns: tuple[str, ...],
) -> Point | None:
    """Tags from `tag_keys` present in the row, every other numeric column a field (times excepted)."""
    tag_set = set(tag_keys)
    tags = {key: row[key] for key in tag_set if key in row}
    tags.update(extra_tags)
    fields = {}
    for name, value in row.items():
        if name in tag_set or name in TIME_COLUMNS or name in extra_tags:
            continue
        number = field_value(value)
        if number is not None:
            fields[name] = number
    if not fields:
        return None
    return Point(series_key(measurement, tags), fields, _time_ms(row, time_columns))


def tier_point(row: Mapping[str, object], worker: str) -> Point | None:
    """A grill_tier point from a summary row; `users` repeats tier_users as a number for x axes (`rate`,
    an open-loop tier's tier_rate)."""
    fields_row = dict(row)
    for field, column in (("users", "tier_users"), ("rate", "tier_rate")):
        number = field_value(row.get(column))
        if number is not None:
            fields_row[field] = number
    return _labelled_point(
        MEASUREMENT_TIER, fields_row, RUN_TAGS, {WORKER_TAG: worker}, ("end_wall", "start_wall", "time")
    )


def phase_point(event: str, phase: Mapping[str, object], worker: str, at_s: float) -> Point | None:
    """A grill_phase point (an annotation): event tag, `users` = tier users while the tier runs, 0 after."""
    row = dict(phase)
    row["time"] = at_s  # the moment of the event, whatever start_wall / end_wall the row carries
    users = field_value(phase.get("tier_users")) or 0.0
    row["users"] = 0.0 if event in PHASE_END_EVENTS else users
    rate = field_value(phase.get("tier_rate"))
    if rate is not None:  # an open-loop tier: its rate while it runs, 0 after
        row["rate"] = 0.0 if event in PHASE_END_EVENTS else rate
    return _labelled_point(
        MEASUREMENT_PHASE, row, PHASE_TAGS, {WORKER_TAG: worker, "event": event}, ("time",)
    )


def telemetry_point(sample: Mapping[str, object], run_id: str | None = None) -> Point | None:
    """grill_gpu or grill_engine from a telemetry sample (kind "gpu" | "engine"), tagged with the run
    when one is given and the sample has none (the GPU exporter's own samples belong to no run)."""
    measurement = MEASUREMENT_GPU if sample.get("kind") == KIND_GPU else MEASUREMENT_ENGINE
    extra: dict[str, object] = {}
    if run_id and not sample.get("run_id"):
        extra["run_id"] = run_id
    row = {key: value for key, value in sample.items() if key != "kind"}
    return _labelled_point(measurement, row, TELEMETRY_TAGS, extra, ("wall_time",))

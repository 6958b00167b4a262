"""RequestRecord: one row per request, and the metric definitions (docs/metrics.md) in one place.

The client collects raw timestamps (`RawTiming`); `measure()` turns them into the metrics; the user adds
its labels (`RequestLabels`: its tier's, its iteration's, an open-loop send's) and the load generator's
own health, giving a `RequestRecord` (`build_record`).
"""

from __future__ import annotations

import dataclasses
import math
import time
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field

# status values besides "ok" and "http_<code>"
STATUS_OK = "ok"
STATUS_TIMEOUT = "timeout"
STATUS_CONNECT = "connect"
STATUS_STREAM_CUT = "stream_cut"
CANCELLED = "cancelled"  # the error of a `stream_cut` request that our own stop cut short
STATUS_BAD_EVENT = "bad_event"
STATUS_EMPTY = "empty"
CUT_SHORT = ("length", "max_tokens")  # finish reasons of a reply cut at max_tokens (OpenAI's, Anthropic's)
# an autocomplete request the developer's next keystroke cancelled (the client closed the stream): not
# an error and not a failure, and left out of latency percentiles
STATUS_ABANDONED = "abandoned"

TOKENS_FROM_USAGE = "usage"
TOKENS_FROM_TOKENIZER = "tokenizer"
TOKENS_FROM_EVENTS = "events"
# Appended to the output tokens' source when the reasoning tokens were counted from reasoning events
# while the output tokens came from usage or the tokenizer: the two counts are then not of one kind.
REASONING_FROM_EVENTS = "+reasoning_events"


def http_status_kind(code: int) -> str:
    return f"http_{code}"


@dataclass(slots=True)
class RawTiming:
    """What the client observed for one request, on the monotonic clock (seconds)."""

    t0: float  # monotonic, just before the request was sent
    wall_start: float  # time.time() at the same instant
    output_times: list[float] = field(default_factory=list)  # arrival of each output event
    first_visible_time: float | None = None  # first non-reasoning output event
    end_time: float | None = None  # end of stream, or the moment the request failed
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None  # from usage
    reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens, when sent
    reasoning_events: int = 0  # output events that carried reasoning
    tokenizer_tokens: int | None = None  # from the backend's tokenizer, when usage is missing
    finish_reason: str | None = None
    finish_time: float | None = None  # arrival of the event that first gave `finish_reason`
    status: str = STATUS_OK
    http_status: int | None = None
    error: str = ""


@dataclass(slots=True)
class Measurement:
    """The metrics of one request, as `measure` defines them."""

    wall_start: float
    ttft_s: float | None
    ttfo_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    itl_mean_s: float | None
    itl_p50_s: float | None
    itl_p99_s: float | None
    itl_max_s: float | None
    prompt_tokens: int | None
    cached_tokens: int | None
    output_tokens: int
    reasoning_tokens: int
    tokens_source: str
    tokens_per_s: float | None
    visible_tokens_per_s: float | None
    finish_reason: str | None
    status: str
    http_status: int | None
    error: str


def percentile_ranks(count: int, q: float) -> tuple[int, int, float]:
    """Where the q-th percentile of `count` sorted values lies: between the values at these two
    positions, this far (0..1) from the first. Linear interpolation, numpy's default: every percentile
    of grill-locust is this one (docs/metrics.md)."""
    position = (count - 1) * q / 100.0
    low = math.floor(position)
    return low, min(low + 1, count - 1), position - low


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of an already sorted, non-empty sequence (`percentile_ranks`)."""
    low, high, weight = percentile_ranks(len(sorted_values), q)
    return sorted_values[low] * (1.0 - weight) + sorted_values[high] * weight


def measure(raw: RawTiming) -> Measurement:
    """Apply the metric contract to one request's raw timings."""
    times = raw.output_times
    ttft = times[0] - raw.t0 if times else None
    ttfo = raw.first_visible_time - raw.t0 if raw.first_visible_time is not None else None
    e2e = raw.end_time - raw.t0 if raw.end_time is not None else None

    if raw.completion_tokens is not None:
        output_tokens, source = raw.completion_tokens, TOKENS_FROM_USAGE
    elif raw.tokenizer_tokens is not None:
        output_tokens, source = raw.tokenizer_tokens, TOKENS_FROM_TOKENIZER
    else:
        output_tokens, source = len(times), TOKENS_FROM_EVENTS
    if raw.reasoning_tokens is not None:
        reasoning_tokens = raw.reasoning_tokens
    else:
        reasoning_tokens = raw.reasoning_events
        if reasoning_tokens and source != TOKENS_FROM_EVENTS:
            source += REASONING_FROM_EVENTS

    tpot = None
    if ttft is not None and e2e is not None and output_tokens >= 2:
        tpot = (e2e - ttft) / (output_tokens - 1)

    itl_mean = itl_p50 = itl_p99 = itl_max = None
    if len(times) >= 2:
        gaps = sorted(b - a for a, b in zip(times, times[1:], strict=False))
        itl_mean = sum(gaps) / len(gaps)
        itl_p50 = percentile(gaps, 50)
        itl_p99 = percentile(gaps, 99)
        itl_max = gaps[-1]

    tokens_per_s = output_tokens / e2e if e2e and e2e > 0 else None
    # the answer's own streaming rate: visible tokens after the first, over first visible token -> end
    visible_tokens = output_tokens - reasoning_tokens
    visible_tokens_per_s = None
    if ttfo is not None and e2e is not None and e2e > ttfo and visible_tokens >= 2:
        visible_tokens_per_s = (visible_tokens - 1) / (e2e - ttfo)
    status = raw.status
    if status == STATUS_OK and not times:
        if raw.finish_time is not None and output_tokens == 1 and raw.finish_reason not in CUT_SHORT:
            # the model's first token ended its reply (an end-of-text or stop token streams no text): a
            # reply of one token, whose event is the finish. Tokens the engine held back (a tool call's
            # markup cut by max_tokens) stay `empty`.
            ttft = raw.finish_time - raw.t0
        else:
            status = STATUS_EMPTY
    return Measurement(
        wall_start=raw.wall_start,
        ttft_s=ttft,
        ttfo_s=ttfo,
        tpot_s=tpot,
        e2e_s=e2e,
        itl_mean_s=itl_mean,
        itl_p50_s=itl_p50,
        itl_p99_s=itl_p99,
        itl_max_s=itl_max,
        prompt_tokens=raw.prompt_tokens,
        cached_tokens=raw.cached_tokens,
        output_tokens=output_tokens,
        reasoning_tokens=reasoning_tokens,
        tokens_source=source,
        tokens_per_s=tokens_per_s,
        visible_tokens_per_s=visible_tokens_per_s,
        finish_reason=raw.finish_reason,
        status=status,
        http_status=raw.http_status,
        error=raw.error,
    )


@dataclass(slots=True)
class RequestRecord:
    """One row of records.jsonl / records.parquet; the field order is the column order."""

    record_id: str
    run_id: str
    target: str
    backend: str
    engine: str
    model: str
    conversation: str  # the conversation's name (older results folders call this column `scenario`)
    kind: str  # the workload kind that produced the request (the conversation's `kind`)
    tier_index: int
    tier_users: int
    iteration: int
    user_id: int
    worker_id: str
    conversation_id: str
    turn: int
    wall_start: float
    ttft_s: float | None
    ttfo_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    itl_mean_s: float | None
    itl_p50_s: float | None
    itl_p99_s: float | None
    itl_max_s: float | None
    prompt_tokens: int | None
    cached_tokens: int | None
    output_tokens: int
    reasoning_tokens: int
    tokens_source: str
    tokens_per_s: float | None
    visible_tokens_per_s: float | None
    finish_reason: str | None
    status: str
    http_status: int | None
    error: str
    worker_lag_p99_ms: float | None = None
    # how late the worker read replies after the kernel stamped them, p99 (None: some reads unstamped)
    worker_read_lag_p99_ms: float | None = None
    worker_cpu: float | None = None
    retries: int = 0  # 429 retries, only when a backend opts in to `retries`
    # the run, or the resumption of it, that sent the request (`<run_id>.<n>`): a resumed campaign
    # takes records of its own session only
    session: str = ""
    # 0, or 1 for a tier run again after an engine outage (the first attempt's records stay, labelled)
    attempt: int = 0
    # the developer's 0-based index in the tier, the same at every tier (a target's `mix` gives each
    # developer one persona by it)
    developer: int | None = None
    # autocomplete: the completion was shown within the conversation's budget_ms and before the next
    # keystroke (None for other kinds and for requests that did not complete)
    shown_in_budget: bool | None = None
    # open-loop tiers: the tier's rate (requests/s, or sessions/s for multi-turn and agentic kinds;
    # tier_users is then 0), each send's intended wall time and how late it went out
    tier_rate: float | None = None
    scheduled_wall: float | None = None
    schedule_lag_s: float | None = None
    # trace replay: the 0-based line (JSONL) or row (CSV) of the trace; dataset replay: the row replayed
    trace_line: int | None = None
    # started in the tier's warmup: recorded, left out of the tier's statistics (counted beside them)
    warmup: bool | None = None
    cooldown: bool | None = None  # still running when its rate tier's time ended: it finished after
    slo_met: bool | None = None  # within every per-request SLO limit (False if failed; None: no limit)
    repeat: int = 0  # which of `--repeat N` campaigns sent it (0-based)

    def to_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in RECORD_COLUMNS}


RECORD_COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(RequestRecord))
# The text labels that say what a record measured: a phase's row in phases.csv carries them too.
LABEL_COLUMNS: tuple[str, ...] = ("run_id", "target", "backend", "engine", "model", "conversation", "kind")
# Columns an older results folder names differently (old name -> name now), and labels it may lack
# (read as ""): the readers of records and phases map them, rows here, frames in report/load.py.
RENAMED_COLUMNS: dict[str, str] = {"scenario": "conversation"}
ADDED_LABEL_COLUMNS: tuple[str, ...] = ("kind",)


def with_current_names(row: dict[str, object]) -> dict[str, object]:
    """A record or phase row of any results folder under today's column names."""
    row = dict(row)
    for old, new in RENAMED_COLUMNS.items():
        if old in row and new not in row:
            row[new] = row.pop(old)
    for name in ADDED_LABEL_COLUMNS:
        row.setdefault(name, "")
    return row


def _column_types() -> dict[str, type]:
    hints = typing.get_type_hints(RequestRecord)
    types = {}
    for name in RECORD_COLUMNS:
        args = [arg for arg in typing.get_args(hints[name]) if arg is not type(None)] or [hints[name]]
        types[name] = args[0]
    return types


RECORD_COLUMN_TYPES: dict[str, type] = _column_types()  # str, int, float or bool
# What every record of every results folder carries (fields added since are read as empty where absent):
# a line without one of them names no request of a tier.
REQUIRED_RECORD_COLUMNS: tuple[str, ...] = (
    "record_id",
    "run_id",
    "target",
    "tier_index",
    "wall_start",
    "status",
)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1  # the columns' Arrow type: a larger number is no record's
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a finite number", bool: "true or false"}


def _is_of_type(value: object, kind: type) -> bool:
    if kind is bool or isinstance(value, bool):
        return kind is bool and isinstance(value, bool)
    if isinstance(value, int):  # an integer is a number too
        return kind in (int, float) and _INT64_MIN <= value <= _INT64_MAX
    if isinstance(value, float):  # a whole float is an integer (as another writer, pandas, writes one)
        if kind is int:
            return value.is_integer() and _INT64_MIN <= value < -_INT64_MIN
        return kind is float and math.isfinite(value)
    return isinstance(value, kind)


def record_problem(row: dict[str, object]) -> str | None:
    """Why a row read from records.jsonl (under today's names) is not a record, in a few words, or None:
    the one type check of a record's fields, for every reader of records. A field may be absent or null
    (an older folder lacks it, a measure was not taken) unless every record carries it; NaN and
    infinity are no measure."""
    for name, kind in RECORD_COLUMN_TYPES.items():
        value = row.get(name)
        if value is not None and not _is_of_type(value, kind):
            shown = repr(value)
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            return f"{name} is {shown}, not {_TYPE_NAMES[kind]}"
    missing = [name for name in REQUIRED_RECORD_COLUMNS if row.get(name) is None]
    return f"no {', '.join(missing)}" if missing else None


NUMERIC_RECORD_COLUMNS: tuple[str, ...] = tuple(
    n for n, t in RECORD_COLUMN_TYPES.items() if t in (int, float)
)
MEASUREMENT_COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Measurement))


@dataclass(frozen=True, slots=True)
class TierLabels:
    """The labels every record and tier row of a phase carries: LABEL_COLUMNS, the tier, its session,
    attempt and repeat (in the order of phases.csv's first columns)."""

    run_id: str
    target: str
    backend: str
    engine: str
    model: str
    conversation: str
    kind: str
    tier_index: int
    tier_users: int
    tier_rate: float | None
    session: str
    attempt: int
    repeat: int

    def as_row(self) -> dict[str, str | int | float | None]:
        return {name: getattr(self, name) for name in TIER_LABEL_FIELDS}

    @property
    def tier_key(self) -> tuple[str, str, int, int]:
        """The tier its requests belong to, in this session and attempt (warmup is counted per tier)."""
        return (self.session, self.target, self.tier_index, self.attempt)


TIER_LABEL_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(TierLabels))


@dataclass(slots=True)
class ScheduledSend:
    """One send of a rate tier while its conversation plays: the open-loop columns of its records. Every
    record carries the send's intended wall time; the first (the request the arrival sent) its lateness,
    the later turns of its session, sent closed-loop, none. A request that ends after the tier's sending
    time is cooldown."""

    scheduled_wall: float
    tier_end_wall: float
    first: bool = True
    # the conversation's own wait before its first request (a typing developer's first burst and
    # debounce): that request is planned this long after the arrival, and late only past it
    plan_delay_s: float = 0.0

    def columns(self, wall_start: float) -> tuple[float, float | None, bool]:
        """(scheduled_wall, schedule_lag_s, cooldown) of the record of a request started at `wall_start`."""
        lag_s = wall_start - self.scheduled_wall - self.plan_delay_s if self.first else None
        self.first = False
        return self.scheduled_wall, lag_s, time.time() > self.tier_end_wall


@dataclass(frozen=True, slots=True)
class RequestLabels:
    """What a request's record says besides its measurement, its turn and the worker's health: its
    tier's labels, the iteration it plays, and the open-loop send that started it (shared by the
    session's requests: only the first is late)."""

    tier: TierLabels
    iteration: int
    user_id: int
    developer: int | None
    worker_id: str
    conversation_id: str
    trace_line: int | None = None  # the record's trace_line, where the kind replays a file
    send: ScheduledSend | None = None


def build_record(
    labels: RequestLabels,
    turn: int,
    record_id: str,
    measurement: Measurement,
    *,
    worker_lag_p99_ms: float | None = None,
    worker_read_lag_p99_ms: float | None = None,
    worker_cpu: float | None = None,
    retries: int = 0,
    shown_in_budget: bool | None = None,
    warmup: bool | None = None,
    slo_met: bool | None = None,
) -> RequestRecord:
    """Join a request's labels with its measurement and the load generator's health."""
    tier = labels.tier
    scheduled_wall: float | None = None
    schedule_lag_s: float | None = None
    cooldown: bool | None = None
    if labels.send is not None:
        scheduled_wall, schedule_lag_s, cooldown = labels.send.columns(measurement.wall_start)
    return RequestRecord(
        record_id=record_id,
        run_id=tier.run_id,
        target=tier.target,
        backend=tier.backend,
        engine=tier.engine,
        model=tier.model,
        conversation=tier.conversation,
        kind=tier.kind,
        tier_index=tier.tier_index,
        tier_users=tier.tier_users,
        iteration=labels.iteration,
        user_id=labels.user_id,
        worker_id=labels.worker_id,
        conversation_id=labels.conversation_id,
        turn=turn,
        # every metric by its name: a new one is a field of Measurement and of RequestRecord
        **{name: getattr(measurement, name) for name in MEASUREMENT_COLUMNS},
        worker_lag_p99_ms=worker_lag_p99_ms,
        worker_read_lag_p99_ms=worker_read_lag_p99_ms,
        worker_cpu=worker_cpu,
        retries=retries,
        session=tier.session,
        attempt=tier.attempt,
        developer=labels.developer,
        shown_in_budget=shown_in_budget,
        tier_rate=tier.tier_rate,
        scheduled_wall=scheduled_wall,
        schedule_lag_s=schedule_lag_s,
        trace_line=labels.trace_line,
        warmup=warmup,
        cooldown=cooldown,
        slo_met=slo_met,
        repeat=tier.repeat,
    )

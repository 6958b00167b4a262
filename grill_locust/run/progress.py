"""A tier's progress as the master sees it: its records and iterations counted, its errors, what lost
workers took with it, and whether it ended complete. The campaign feeds it; the verdicts read it."""

from __future__ import annotations

import bisect
import math
import time
from collections import Counter
from dataclasses import dataclass, field

from grill_locust.errors import RETRY_LATER_STATUSES, http_code, is_known_refusal, is_refusal
from grill_locust.record import (
    CANCELLED,
    SATURATION_CPU_PCT,
    SATURATION_LAG_P99_MS,
    STATUS_ABANDONED,
    STATUS_CONNECT,
    STATUS_OK,
    RequestRecord,
    timing_lag_ms,
)
from grill_locust.run.arrivals import SCHEDULE_LAG_P99_LIMIT_S
from grill_locust.run.messages import Dispatched
from grill_locust.run.phase import DeveloperSeats, Phase

# A tier measured an outage, not the engine, when the backend refused a connection during it or when more
# than this share of its requests failed (a request cut by our own stop, or abandoned by typing, is not counted).
OUTAGE_FAILED_SHARE = 0.5
# Fewer failed requests than this are no evidence of an outage (nor one message on each of a refusal)
# unless the backend also fails its probe: one request that failed says nothing of the engine's state.
OUTAGE_MIN_FAILED = 3


@dataclass
class PhaseProgress:
    phase: Phase
    started_wall: float = 0.0
    started: float = 0.0  # monotonic
    ended_wall: float | None = None
    ended_monotonic: float = 0.0
    iterations_done: int = 0
    records: int = 0
    errors: int = 0
    refused: int = 0  # requests whose connection the backend refused (status `connect`)
    cancelled: int = 0  # requests cut by our own stop: neither a success nor the engine's failure
    abandoned: int = 0  # autocomplete requests the developer's typing cancelled: not errors either
    by_worker: Counter[str] = field(default_factory=Counter)
    complete: bool = False
    end_reason: str = ""  # why it ended incomplete ("time cap ... reached", "run stopped")
    note: str = ""
    lost_by_worker: Counter[str] = field(default_factory=Counter)
    tier_records: list[dict[str, object]] = field(
        default_factory=list
    )  # for the live tier row, while it runs
    # each worker's timing lag p99 (record.timing_lag_ms) over this tier so far: on its latest record
    # (wall end, value)
    worker_lag_p99_ms: dict[str, tuple[float, float]] = field(default_factory=dict)
    worker_cpu_max: float = 0.0
    developers: DeveloperSeats = field(default_factory=DeveloperSeats)
    records_by_conversation: Counter[str] = field(default_factory=Counter)  # a mix's personas apart
    errors_by_conversation: Counter[str] = field(default_factory=Counter)
    # an open-loop tier: each dispatcher's share once it sent it; its sends' lags
    dispatched: dict[str, Dispatched] = field(default_factory=dict)
    schedule_lags_s: list[float] = field(default_factory=list)
    max_in_flight: int = 0  # the scenario's load.max_in_flight, which the flag names
    last_records_wall: dict[str, float] = field(default_factory=dict)  # each worker's latest, as they came
    # a rate tier: what each worker lost mid-tier took with it
    losses: list[str] = field(default_factory=list)
    # the failed requests (not cut by our stop) by (status, the engine's message)
    failed_replies: Counter[tuple[str, str]] = field(default_factory=Counter)
    refusal: str = ""  # the engine's message when it refused the tier's requests (Campaign._judge_failures)
    # the load's warmup_requests (0: none), and the tier's earliest sends so far, as many, each as
    # (wall_start, record_id, its worker marked it warmup), in order; and the records no worker marked
    warmup_requests: int = 0
    earliest_sends: list[tuple[float, str, bool]] = field(default_factory=list)
    unmarked_records: int = 0
    remark: str = ""  # why failures that looked like an outage were not taken for one

    @property
    def iterations_target(self) -> int:
        """Iterations to do: N x k in a tier of users; in a rate tier, the sends its dispatchers reported,
        and those of a lost worker (which reports none) that its records show."""
        if self.phase.tier_rate is None:
            return self.phase.iterations_target
        reported = sum(share.sends for share in self.dispatched.values())
        return reported + sum(
            n for client_id, n in self.by_worker.items() if client_id not in self.dispatched
        )

    @property
    def sends_waited(self) -> int:
        """A rate tier's sends that waited for a max_in_flight slot, as its dispatchers reported them."""
        return sum(share.waited for share in self.dispatched.values())

    @property
    def open_loop_flags(self) -> str:
        """A rate tier's flags: sends held back by max_in_flight, sends late enough to measure the load
        generator rather than the engine; "" when neither."""
        flags = []
        waited = self.sends_waited
        if waited:
            flags.append(f"max_in_flight {self.max_in_flight} reached: {waited} sends waited")
        lags = sorted(self.schedule_lags_s)
        lag_p99_s = lags[min(len(lags) - 1, math.ceil(0.99 * len(lags)) - 1)] if lags else 0.0
        if lag_p99_s > SCHEDULE_LAG_P99_LIMIT_S:
            flags.append(
                f"LOAD-GENERATOR-BOUND (schedule lag p99 {lag_p99_s * 1000:.1f} ms > "
                f"{SCHEDULE_LAG_P99_LIMIT_S * 1000:g} ms)"
            )
        return "; ".join(flags)

    def count_warmup(self, record: RequestRecord) -> None:
        """Count a record toward the tier's warmup: the tier's first warmup_requests by send time (as the
        report picks them, report/aggregate.py _tier_warmup) or marked by its worker."""
        marked = record.warmup is True
        self.unmarked_records += not marked
        if not self.warmup_requests:
            return
        send = (float(record.wall_start), record.record_id, marked)
        earliest = self.earliest_sends
        if len(earliest) < self.warmup_requests or send < earliest[-1]:
            bisect.insort(earliest, send)
            del earliest[self.warmup_requests :]

    @property
    def all_warmup(self) -> str:
        """The flag of a tier whose every request was warmup (none left to measure), or ""."""
        measured = self.unmarked_records - sum(not marked for _, _, marked in self.earliest_sends)
        if not self.records or measured > 0:
            return ""
        return (
            f"no measured request: all {self.records} requests were warmup "
            "(load.warmup_s or warmup_requests covers the tier)"
        )

    @property
    def lag_p99_ms(self) -> float:
        """The tier's timing lag p99 so far: the highest of its workers'."""
        return max((lag for _, lag in self.worker_lag_p99_ms.values()), default=0.0)

    @property
    def failed_and_sent(self) -> tuple[int, int]:
        """Requests that failed, and requests sent (neither counts one cut by our stop or by typing)."""
        return self.errors - self.cancelled, self.records - self.cancelled - self.abandoned

    @property
    def outage(self) -> str:
        """Why this tier's failures look like an engine outage rather than the engine, or "" (before
        Campaign._judge_failures tells a refusal or too few failures apart). Warmup requests count: the
        engine failed them as it would any other."""
        if self.refused:
            return f"engine outage: {self.refused} requests could not connect to the backend"
        failed, sent = self.failed_and_sent
        if sent and failed / sent > OUTAGE_FAILED_SHARE:
            return (
                f"engine outage: {failed} of {sent} requests failed "
                f"(more than {OUTAGE_FAILED_SHARE * 100:g} %)"
            )
        return ""

    @property
    def refusal_by_status(self) -> str:
        """The engine's (most frequent) message when every failed request was refused by its status
        (errors.is_refusal), else "": the engine will never serve these requests as sent."""
        if not self.failed_replies or not all(is_refusal(status) for status, _ in self.failed_replies):
            return ""
        (status, message), _ = self.failed_replies.most_common(1)[0]
        return message or status

    @property
    def one_server_error(self) -> tuple[str, str] | None:
        """(status, message) when every failed request, at least OUTAGE_MIN_FAILED of them, got one server
        error with one message from the engine, of no "not now" kind (503...), else None (one failure is
        enough when the message is a known refusal's)."""
        if len(self.failed_replies) != 1:
            return None
        (status, message), count = next(iter(self.failed_replies.items()))
        code = http_code(status)
        if code is None or code < 500 or code in RETRY_LATER_STATUSES or not message:
            return None
        enough = count >= OUTAGE_MIN_FAILED or is_known_refusal(message)
        return (status, message) if enough else None

    @property
    def saturation(self) -> str:
        """Why the load generator was saturated in this tier, or "" (records carry each worker's state)."""
        if self.lag_p99_ms > SATURATION_LAG_P99_MS or self.worker_cpu_max > SATURATION_CPU_PCT:
            return (
                f"LOAD GENERATOR SATURATED (timing lag p99 {self.lag_p99_ms:.1f} ms, "
                f"CPU up to {self.worker_cpu_max:.0f} %): this tier's latencies are suspect"
            )
        return ""

    def count_record(self, record: RequestRecord, keep_for_tier_row: bool) -> None:
        """Count one record of this tier (sent once: the results folder drops a resent one); kept for the
        live tier row or a probe's verdict when `keep_for_tier_row`."""
        self.records += 1
        self.count_warmup(record)
        self.records_by_conversation[record.conversation] += 1
        if keep_for_tier_row:
            self.tier_records.append(record.to_dict())
        if record.status == STATUS_ABANDONED:
            self.abandoned += 1
        elif record.status != STATUS_OK:
            self.errors += 1
            self.errors_by_conversation[record.conversation] += 1
            self.refused += record.status == STATUS_CONNECT
            if record.error == CANCELLED:
                self.cancelled += 1
            else:
                self.failed_replies[(record.status, record.error or "")] += 1
        cpu = record.worker_cpu
        if record.worker_lag_p99_ms is not None:
            lag = timing_lag_ms(record.worker_lag_p99_ms, record.worker_read_lag_p99_ms)
            end = record.wall_start + (record.e2e_s or 0.0)
            if end >= self.worker_lag_p99_ms.get(record.worker_id, (-math.inf, 0.0))[0]:
                self.worker_lag_p99_ms[record.worker_id] = (end, lag)
        if cpu is not None and cpu > self.worker_cpu_max:
            self.worker_cpu_max = cpu
        if record.schedule_lag_s is not None:
            self.schedule_lags_s.append(record.schedule_lag_s)

    def count_iterations(self, client_id: str, worker: str, count: int) -> None:
        """A worker finished `count` iterations of this tier. A worker counted lost was cut off, not gone:
        the iterations it delivers were not lost."""
        self.iterations_done += count
        self.by_worker[client_id] += count
        self.last_records_wall[client_id] = time.time()
        if self.lost_by_worker.get(worker):
            self.lost_by_worker[worker] = max(0, self.lost_by_worker[worker] - count)

    def compose_note(self) -> str:
        """The tier's phases.csv note: why it ended incomplete, what its lost workers took, its flags."""
        lost = "; ".join(f"{n} iterations lost on worker {w}" for w, n in self.lost_by_worker.items() if n)
        parts = (self.end_reason, self.remark, lost, *self.losses, self.open_loop_flags, self.all_warmup)
        return "; ".join(part for part in parts if part)

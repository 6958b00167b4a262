"""A tier's progress as the master sees it: its records and iterations counted, its errors, what lost
workers took with it, and whether it ended complete. The campaign feeds it; the verdicts read it."""

from __future__ import annotations

import bisect
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from grill_locust.record import CANCELLED, STATUS_ABANDONED, STATUS_CONNECT, STATUS_OK
from grill_locust.run.phase import DeveloperSeats, Phase
from grill_locust.verdicts import (
    SCHEDULE_LAG_P99_LIMIT_S,
    TierFailures,
    behind_schedule,
    outage_reason,
    saturation_text,
    schedule_lag_p99_s,
    tier_cpu_pct,
    timing_lag_ms,
)


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
    tier_records: list[dict[str, Any]] = field(default_factory=list)  # for the live tier row, while it runs
    # each worker's timing lag p99 (verdicts.timing_lag_ms) over this tier so far: on its latest
    # measured record (wall end, value)
    worker_lag_p99_ms: dict[str, tuple[float, float]] = field(default_factory=dict)
    # each worker's CPU readings on the tier's records its worker did not mark warmup: their sum and
    # count (verdicts.tier_cpu_pct)
    cpu_sums: dict[str, float] = field(default_factory=dict)
    cpu_counts: Counter[str] = field(default_factory=Counter)
    developers: DeveloperSeats = field(default_factory=DeveloperSeats)
    records_by_conversation: Counter[str] = field(default_factory=Counter)  # a mix's personas apart
    errors_by_conversation: Counter[str] = field(default_factory=Counter)
    # an open-loop tier: each dispatcher's {"sends", "waited"} once it sent its share; its sends' lags
    dispatched: dict[str, dict[str, int]] = field(default_factory=dict)
    schedule_lags_s: list[float] = field(default_factory=list)
    max_in_flight: int = 0  # the scenario's load.max_in_flight, which the flag names
    last_records_wall: dict[str, float] = field(default_factory=dict)  # each worker's latest, as they came
    # a rate tier: what each worker lost mid-tier took with it
    losses: list[str] = field(default_factory=list)
    # the failed requests (not cut by our stop) by (status, the engine's message)
    failed_replies: Counter[tuple[str, str]] = field(default_factory=Counter)
    refusal: str = ""  # the engine's message when it refused the tier's requests (verdicts.judge_failures)
    # the load's warmup_requests (0: none), and the tier's earliest sends so far, as many, each as
    # (wall_start, record_id, its worker marked it warmup, worker_id, worker_cpu), in order; and the
    # records no worker marked
    warmup_requests: int = 0
    earliest_sends: list[tuple[float, str, bool, str, float | None]] = field(default_factory=list)
    unmarked_records: int = 0
    remark: str = ""  # why failures that looked like an outage were not taken for one

    @property
    def iterations_target(self) -> int:
        """Iterations to do: N x k in a tier of users; in a rate tier, the sends its dispatchers reported,
        and those of a lost worker (which reports none) that its records show."""
        if self.phase.tier_rate is None:
            return self.phase.iterations_target
        reported = sum(share["sends"] for share in self.dispatched.values())
        return reported + sum(
            n for client_id, n in self.by_worker.items() if client_id not in self.dispatched
        )

    @property
    def sends_waited(self) -> int:
        """A rate tier's sends that waited for a max_in_flight slot, as its dispatchers reported them."""
        return sum(share["waited"] for share in self.dispatched.values())

    @property
    def open_loop_flags(self) -> str:
        """A rate tier's flags: sends held back by max_in_flight, sends late enough to measure the load
        generator rather than the engine; "" when neither."""
        flags = []
        waited = self.sends_waited
        if waited:
            flags.append(f"max_in_flight {self.max_in_flight} reached: {waited} sends waited")
        lag_p99_s = schedule_lag_p99_s(self.schedule_lags_s)
        if behind_schedule(lag_p99_s):
            flags.append(
                f"LOAD-GENERATOR-BOUND (schedule lag p99 {lag_p99_s * 1000:.1f} ms > "
                f"{SCHEDULE_LAG_P99_LIMIT_S * 1000:g} ms)"
            )
        return "; ".join(flags)

    def count_warmup(self, record: dict[str, Any]) -> None:
        """Count a record toward the tier's warmup: the tier's first warmup_requests by send time (as the
        report picks them, report/aggregate.py _tier_warmup) or marked by its worker."""
        marked = record.get("warmup") is True
        self.unmarked_records += not marked
        if not self.warmup_requests:
            return
        cpu = record.get("worker_cpu")
        send = (float(record["wall_start"]), str(record["record_id"]), marked, record["worker_id"], cpu)
        earliest = self.earliest_sends
        if len(earliest) < self.warmup_requests or send < earliest[-1]:
            bisect.insort(earliest, send)
            del earliest[self.warmup_requests :]

    @property
    def all_warmup(self) -> str:
        """The flag of a tier whose every request was warmup (none left to measure), or ""."""
        measured = self.unmarked_records - sum(not marked for _, _, marked, _, _ in self.earliest_sends)
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
    def failures(self) -> TierFailures:
        """The tier's failures as the outage rule (verdicts.judge_failures) reads them."""
        return TierFailures(self.refused, *self.failed_and_sent, self.failed_replies)

    @property
    def outage(self) -> str:
        """Why this tier's failures look like an engine outage rather than the engine, or "" (before
        verdicts.judge_failures tells a refusal or too few failures apart). Warmup requests count: the
        engine failed them as it would any other."""
        return outage_reason(self.failures)

    @property
    def cpu_pct(self) -> float:
        """The tier's CPU so far (verdicts.tier_cpu_pct) over its measured records: those its workers
        marked warmup never counted, and those among its first warmup_requests sends are taken out."""
        sums, counts = dict(self.cpu_sums), self.cpu_counts.copy()
        for _, _, marked, worker, cpu in self.earliest_sends:
            if not marked and cpu is not None:
                sums[worker] -= cpu
                counts[worker] -= 1
        return tier_cpu_pct(sums, counts)

    @property
    def saturation(self) -> str:
        """Why the load generator was saturated in this tier, or "" (records carry each worker's state)."""
        return saturation_text(self.lag_p99_ms, self.cpu_pct)

    def count_record(self, record: dict[str, Any], keep_for_tier_row: bool) -> None:
        """Count one record of this tier (sent once: the results folder drops a resent one); kept for the
        live tier row or a probe's verdict when `keep_for_tier_row`."""
        self.records += 1
        self.count_warmup(record)
        self.records_by_conversation[record["conversation"]] += 1
        if keep_for_tier_row:
            self.tier_records.append(record)
        if record["status"] == STATUS_ABANDONED:
            self.abandoned += 1
        elif record["status"] != STATUS_OK:
            self.errors += 1
            self.errors_by_conversation[record["conversation"]] += 1
            self.refused += record["status"] == STATUS_CONNECT
            if record["error"] == CANCELLED:
                self.cancelled += 1
            else:
                self.failed_replies[(record["status"], record["error"] or "")] += 1
        if record.get("warmup") is not True:  # the load generator's health, as the report reads it
            self.count_health(record)
        if record.get("schedule_lag_s") is not None:
            self.schedule_lags_s.append(record["schedule_lag_s"])

    def count_health(self, record: dict[str, Any]) -> None:
        """The load generator's state on a measured record: its worker's timing lag p99 (the latest
        record's covers the tier so far) and CPU reading."""
        worker = record["worker_id"]
        if record.get("worker_lag_p99_ms") is not None:
            lag = timing_lag_ms(record["worker_lag_p99_ms"], record.get("worker_read_lag_p99_ms"))
            end = record["wall_start"] + (record.get("e2e_s") or 0.0)
            if end >= self.worker_lag_p99_ms.get(worker, (-math.inf, 0.0))[0]:
                self.worker_lag_p99_ms[worker] = (end, lag)
        if record.get("worker_cpu") is not None:
            self.cpu_sums[worker] = self.cpu_sums.get(worker, 0.0) + record["worker_cpu"]
            self.cpu_counts[worker] += 1

    def count_iterations(self, client_id: str, worker: str, count: int) -> None:
        """A worker finished `count` iterations of this tier. A worker counted lost was cut off, not gone:
        the iterations it delivers were not lost."""
        self.iterations_done += count
        self.by_worker[client_id] += count
        self.last_records_wall[client_id] = time.time()
        if self.lost_by_worker.get(worker):
            self.lost_by_worker[worker] = max(0, self.lost_by_worker[worker] - count)

    def compose_note(self) -> str:
        """The tier's phases.csv note: why it ended incomplete, what its lost workers took, its flags (a
        saturated load generator's as the live log and summary.csv judge it: verdicts.py)."""
        lost = "; ".join(f"{n} iterations lost on worker {w}" for w, n in self.lost_by_worker.items() if n)
        parts = (
            self.end_reason,
            self.remark,
            self.saturation,
            lost,
            *self.losses,
            self.open_loop_flags,
            self.all_warmup,
        )
        return "; ".join(part for part in parts if part)

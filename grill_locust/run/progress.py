"""A tier's progress as the master sees it: its records and iterations counted, its errors, what lost
workers took with it, and whether it ended complete; every tier's in a campaign's `TierBook`. The
campaign feeds it; the verdicts read it."""

from __future__ import annotations

import bisect
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from grill_locust.record import CANCELLED, STATUS_ABANDONED, STATUS_CONNECT, STATUS_OK, RequestRecord
from grill_locust.run.messages import Dispatched
from grill_locust.run.phase import DeveloperSeats, Phase, Tier
from grill_locust.verdicts import (
    TierFailures,
    judge_failures,
    outage_reason,
    saturation_text,
    tier_cpu_pct,
    timing_lag_ms,
)


@dataclass
class PhaseProgress:
    tier: Tier  # the tier as it runs (a rate tier takes its dispatchers at its start, and its re-splits)
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
    # an open-loop tier: each dispatcher's share once it sent it; its sends' lags
    dispatched: dict[str, Dispatched] = field(default_factory=dict)
    schedule_lags_s: list[float] = field(default_factory=list)
    last_records_wall: dict[str, float] = field(default_factory=dict)  # each worker's latest, as they came
    # a rate tier: what each worker lost mid-tier took with it
    losses: list[str] = field(default_factory=list)
    # the failed requests (not cut by our stop) by (status, the engine's message)
    failed_replies: Counter[tuple[str, str]] = field(default_factory=Counter)
    refusal: str = ""  # the engine's message when it refused the tier's requests (judge_failures)
    # the load's warmup_requests (0: none), and the tier's earliest sends so far, as many, each as
    # (wall_start, record_id, its worker marked it warmup, worker_id, worker_cpu), in order; and the
    # records no worker marked
    warmup_requests: int = 0
    earliest_sends: list[tuple[float, str, bool, str, float | None]] = field(default_factory=list)
    unmarked_records: int = 0
    remark: str = ""  # why failures that looked like an outage were not taken for one

    @property
    def phase(self) -> Phase:
        return self.tier.phase

    @property
    def iterations_target(self) -> int:
        """Iterations to do: N x k in a tier of users; in a rate tier, the sends its dispatchers reported,
        and those of a lost worker (which reports none) that its records show."""
        return self.tier.iterations_target(self)

    @property
    def sends_waited(self) -> int:
        """A rate tier's sends that waited for a max_in_flight slot, as its dispatchers reported them."""
        return sum(share.waited for share in self.dispatched.values())

    def count_warmup(self, record: RequestRecord) -> None:
        """Count a record toward the tier's warmup: the tier's first warmup_requests by send time (as the
        report picks them, report/aggregate.py _tier_warmup) or marked by its worker."""
        marked = record.warmup is True
        self.unmarked_records += not marked
        if not self.warmup_requests:
            return
        cpu = record.worker_cpu
        send = (float(record.wall_start), record.record_id, marked, record.worker_id, cpu)
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
        judge_failures tells a refusal or too few failures apart). Warmup requests count: the
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
        if record.warmup is not True:  # the load generator's health, as the report reads it
            self.count_health(record)
        if record.schedule_lag_s is not None:
            self.schedule_lags_s.append(record.schedule_lag_s)

    def count_health(self, record: RequestRecord) -> None:
        """The load generator's state on a measured record: its worker's timing lag p99 (the latest
        record's covers the tier so far) and CPU reading."""
        worker = record.worker_id
        if record.worker_lag_p99_ms is not None:
            lag = timing_lag_ms(record.worker_lag_p99_ms, record.worker_read_lag_p99_ms)
            end = record.wall_start + (record.e2e_s or 0.0)
            if end >= self.worker_lag_p99_ms.get(worker, (-math.inf, 0.0))[0]:
                self.worker_lag_p99_ms[worker] = (end, lag)
        if record.worker_cpu is not None:
            self.cpu_sums[worker] = self.cpu_sums.get(worker, 0.0) + record.worker_cpu
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
        flags = (self.tier.flags(self), self.all_warmup)
        parts = (self.end_reason, self.remark, self.saturation, lost, *self.losses, *flags)
        return "; ".join(part for part in parts if part)

    def judge_failures(self, backend: str, answers: Callable[[], bool]) -> tuple[str, str]:
        """(why the tier measured an outage, the engine's message if it refused the tier's requests), each
        "" when not, by verdicts.judge_failures (`answers`: whether the backend answers its model list;
        self.remark says why failures were no outage)."""
        verdict = judge_failures(self.failures, backend, answers)
        self.remark = verdict.remark
        return verdict.outage, verdict.refusal


@dataclass
class TierBook:
    """Every tier's progress in a campaign, by Phase.key (a tier run again after an outage is a phase of
    its own, attempt 1), and the tier running: what workers send is counted here."""

    # someone reads a tier's records (a live sink's tier row, a search's verdict): keep them while it runs
    keep_records: bool = False
    progress: dict[str, PhaseProgress] = field(default_factory=dict)
    current: PhaseProgress | None = None
    judging: PhaseProgress | None = None  # a probe that ended: its last records are on their way

    def start(self, tier: Tier, warmup_requests: int) -> PhaseProgress:
        progress = PhaseProgress(tier, warmup_requests=warmup_requests)
        progress.started, progress.started_wall = time.monotonic(), time.time()
        self.progress[tier.phase.key] = self.current = progress
        return progress

    def of(self, record: RequestRecord) -> PhaseProgress | None:
        """The tier a record was sent in (None: no tier of this session)."""

        def same(phase: Phase) -> bool:
            return (phase.target, phase.tier_index, phase.attempt, phase.repeat) == (
                record.target,
                record.tier_index,
                record.attempt,
                record.repeat,
            )

        current = self.current
        if current is not None and same(current.phase):
            return current
        return next((p for p in self.progress.values() if same(p.phase)), None)

    def count(
        self,
        records: list[RequestRecord],
        iterations: dict[str, int],
        dispatched: dict[str, Dispatched],
        client_id: str,
        worker: str,
    ) -> list[PhaseProgress]:
        """Count a worker's batch (records seen once, its iterations and dispatchers' shares by Phase.key);
        the tiers it touched that had ended already, whose rows are then written again."""
        ended: dict[str, PhaseProgress] = {}
        for record in records:
            progress = self.of(record)
            if progress is not None:
                if progress.ended_wall is not None:
                    ended[progress.phase.key] = progress
                keep = self.keep_records and (progress is self.current or progress is self.judging)
                progress.count_record(record, keep_for_tier_row=keep)
        for phase_key, count in iterations.items():
            progress = self.progress.get(phase_key)  # another session's phase is none of ours
            if progress is not None:
                progress.count_iterations(client_id, worker, count)
                if progress.ended_wall is not None:
                    ended[phase_key] = progress
        for phase_key, share in dispatched.items():
            progress = self.progress.get(phase_key)
            if progress is not None:
                progress.dispatched[client_id] = share
                if progress.ended_wall is not None:
                    ended[phase_key] = progress
        return list(ended.values())

    def incomplete(self, stopped_note: str) -> list[PhaseProgress]:
        """The tiers whose last attempt ended incomplete (a time cap, an outage not run again, a
        refusal...), but for those the run's own stop (`stopped_note`) cut."""
        last: dict[tuple[str, int, int], PhaseProgress] = {}
        for progress in self.progress.values():
            phase = progress.phase
            key = (phase.target, phase.tier_index, phase.repeat)
            if progress.ended_wall is not None and (
                key not in last or phase.attempt > last[key].phase.attempt
            ):
                last[key] = progress
        return [p for p in last.values() if not p.complete and not p.end_reason.startswith(stopped_note)]

"""A run's records against the engine's own log of the requests it received: lost, duplicated,
misattributed. Used by the fault suite (tests/reliability) and its long version (bench/soak.py).

The engine's log is the simulator's truth log, or a loopback server's list of requests: one line per
request, keyed by its `X-Request-Id`, which is the record's `record_id`. A record may lack a line only
when its request never completed at the engine (`NEVER_COMPLETED`: refused, or cut as the engine went
away); a record's labels are right when the request arrived during its own phase (the last phase of
`phases.csv` to start before the engine received it).
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from grill_locust.workload.calibrate import CALIBRATION_ID_PREFIX

NEVER_COMPLETED = ("connect", "stream_cut")
COMPLETION_ENDPOINTS = ("/chat/completions", "/completions")
LOST_ON_WORKER = re.compile(r"(\d+) iterations lost on worker ([^\s;]+)")


@dataclass(frozen=True)
class Ledger:
    fault: str
    expected: int  # requests the engine received, plus attempts that never completed there
    found: int  # records
    lost: int  # requests the engine received with no record (beyond what the run counted lost)
    duplicated: int  # record ids written twice, and request ids the engine received twice
    misattributed: int  # records labelled with another phase than the request's, or unbacked successes
    counted_lost: int = 0  # requests the engine received with no record, among what the run counted lost

    @property
    def clean(self) -> bool:
        return self.lost == self.duplicated == self.misattributed == 0 and self.found == self.expected


def engine_requests(lines: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The load's completion requests in an engine's log (not its /tokenize or /health calls, nor the
    calibration's usage requests, which are no record by design: workload/calibrate.py)."""
    return [
        line
        for line in lines
        if str(line.get("endpoint", "")).endswith(COMPLETION_ENDPOINTS)
        and not str(line.get("request_id", "")).startswith(CALIBRATION_ID_PREFIX)
    ]


def counted_lost(phases: pd.DataFrame) -> dict[str, int]:
    """Iterations the run itself reported lost, by worker (phases.csv's note)."""
    found: Counter[str] = Counter()
    notes = phases["note"].dropna() if "note" in phases else []
    for note in notes:
        for count, worker in LOST_ON_WORKER.findall(str(note)):
            found[worker] += int(count)
    return dict(found)


def ledger(
    fault: str,
    records: pd.DataFrame,
    truth: Iterable[Mapping[str, Any]],
    phases: pd.DataFrame,
    excused: dict[str, int] | None = None,
) -> Ledger:
    """`excused`: iterations the run counted lost, by worker (default: `counted_lost(phases)`); the
    requests it excuses are taken from it, so that ledgers of parts of one run can share it."""
    lines = engine_requests(truth)
    seen = Counter(str(line["request_id"]) for line in lines)
    arrival = {str(line["request_id"]): float(line["arrival"]) for line in lines}
    ids = Counter(records["record_id"].astype(str))
    duplicated = sum(n - 1 for n in ids.values()) + sum(n - 1 for n in seen.values())

    missing = [request_id for request_id in seen if request_id not in ids]
    if excused is None:
        excused = counted_lost(phases)
    lost = excused_here = 0
    for request_id in missing:
        worker = next((w for w in excused if request_id.startswith(f"{w}-") and excused[w] > 0), None)
        if worker is None:
            lost += 1
        else:
            excused[worker] -= 1
            excused_here += 1

    ordered = phases.sort_values("start_wall")
    starts = list(ordered["start_wall"].astype(float))
    labels = list(zip(ordered["target"], ordered["tier_index"].astype(int), strict=True))
    misattributed = 0
    unbacked = 0
    for row in records[["record_id", "target", "tier_index", "status"]].itertuples(index=False):
        at = arrival.get(str(row.record_id))
        if at is None:
            unbacked += row.status not in NEVER_COMPLETED  # an answer from an engine that never saw it
            continue
        index = bisect.bisect_right(starts, at) - 1
        misattributed += index < 0 or labels[index] != (row.target, int(row.tier_index))
    never_completed = sum(1 for record_id in ids if record_id not in seen) - unbacked
    return Ledger(
        fault=fault,
        expected=len(seen) + never_completed,
        found=len(records),
        lost=lost,
        duplicated=duplicated,
        misattributed=misattributed + unbacked,
        counted_lost=excused_here,
    )


def total(ledgers: Iterable[Ledger], fault: str = "all") -> Ledger:
    parts = list(ledgers)
    sums = [sum(getattr(x, name) for x in parts) for name in ("expected", "found", "lost", "duplicated")]
    return Ledger(
        fault,
        *sums,
        misattributed=sum(x.misattributed for x in parts),
        counted_lost=sum(x.counted_lost for x in parts),
    )


def table(ledgers: Iterable[Ledger]) -> str:
    """fault | records expected | records found | lost | duplicated | misattributed | counted lost by the
    run, one row per fault."""
    header = ("fault", "records expected", "records found", "lost", "duplicated", "misattributed")
    header += ("counted lost by the run",)
    rows = [header] + [
        (
            x.fault,
            *(str(n) for n in (x.expected, x.found, x.lost, x.duplicated, x.misattributed, x.counted_lost)),
        )
        for x in ledgers
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows
    )

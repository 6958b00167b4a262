"""A tier's verdicts, in one place for the run (its live log, phases.csv, the capacity search) and the
report (summary.csv, report.html) alike: whether the load generator was saturated, whether a rate
tier's sends kept their schedule, whether its failures were an engine outage or the engine refusing the
requests, and which SLO bounds it misses (the first to break: its binding metric). Every percentile is
`record.percentile`'s (linear interpolation, numpy's default), as docs/metrics.md says.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import pandas as pd

from grill_locust.config import KIND_MIX, Slo
from grill_locust.errors import RETRY_LATER_STATUSES, http_code, is_known_refusal, is_refusal
from grill_locust.record import percentile

# The load generator's own health: above either threshold its latencies are suspect (the tier is flagged).
SATURATION_LAG_P99_MS = 5.0  # the worker's timing lag p99 (`timing_lag_ms`)
SATURATION_CPU_PCT = 70.0  # a tier's CPU (`tier_cpu_pct`), percent of one core


def timing_lag_ms(event_loop_lag_ms: float | None, read_lag_ms: float | None) -> float:
    """The lag that can skew a worker's timings (run/selfcheck.py): how late it read replies when
    the kernel stamped every read (their times are the stamps), else how late its event loop was."""
    for lag in (read_lag_ms, event_loop_lag_ms):
        if lag is not None and lag == lag:  # None or NaN (a results table's empty cell): not measured
            return lag
    return 0.0


def tier_cpu_pct(sums: Mapping[str, float], counts: Mapping[str, int]) -> float:
    """A tier's CPU, from each worker's `sums` and `counts` of its readings on the tier's measured records
    (a record carries its worker's last one-second reading): the highest of the workers' means, NaN
    with none. The mean, because the verdict is on the tier as a whole: one busy second among many idle
    ones (spawning users, a garbage collection) skews no timing the lag would not show. A worker's own,
    because an idle worker beside a busy one eases none of its users' timings (the tier's lag is its
    workers' highest for the same reason). docs/metrics.md, "A tier's verdicts"."""
    means = [sums[worker] / counts[worker] for worker in counts if counts[worker] > 0]
    return max(means) if means else math.nan


def saturation_causes(lag_ms: float, cpu_pct: float) -> list[str]:
    """What made the tier's load generator saturated (empty when it was not): its timing lag p99 past
    SATURATION_LAG_P99_MS, its CPU (`tier_cpu_pct`) past SATURATION_CPU_PCT."""
    causes = []
    if lag_ms > SATURATION_LAG_P99_MS:
        causes.append(f"lag p99 {lag_ms:.1f} ms")
    if cpu_pct > SATURATION_CPU_PCT:  # NaN (no reading) is not past it
        causes.append(f"cpu {cpu_pct:.0f}%")
    return causes


def saturation_text(lag_ms: float, cpu_pct: float) -> str:
    """The run's line for a saturated tier, or "" (the report's flag names the same causes)."""
    causes = saturation_causes(lag_ms, cpu_pct)
    if not causes:
        return ""
    return f"LOAD GENERATOR SATURATED ({', '.join(causes)}): this tier's latencies are suspect"


# a rate tier whose sends went out later than this at p99 measured the load generator, not the engine
SCHEDULE_LAG_P99_LIMIT_S = 0.010


def schedule_lag_p99_s(lags_s: Iterable[float]) -> float:
    """The p99 of a rate tier's schedule lags (its arrivals' sends; 0 with none)."""
    ordered = sorted(lags_s)
    return percentile(ordered, 99) if ordered else 0.0


def behind_schedule(lag_p99_s: float) -> bool:
    """Whether a rate tier's sends went out late enough to measure the load generator, not the engine."""
    return lag_p99_s > SCHEDULE_LAG_P99_LIMIT_S


# A tier measured an outage, not the engine, when the backend refused a connection during it or when more
# than this share of its requests failed (a request cut by our own stop, or abandoned by typing, is not counted).
OUTAGE_FAILED_SHARE = 0.5
# Fewer failed requests than this are no evidence of an outage (nor one message on each of a refusal)
# unless the backend also fails its probe: one request that failed says nothing of the engine's state.
OUTAGE_MIN_FAILED = 3


@dataclass(frozen=True)
class TierFailures:
    """What a tier's failures were: connections refused, requests failed and sent (neither counts one
    cut by our own stop, nor one abandoned by typing), and the failed ones by (status, engine's message)."""

    refused: int
    failed: int
    sent: int
    replies: Counter[tuple[str, str]]


@dataclass(frozen=True)
class FailureVerdict:
    """Why the tier measured an engine outage, the engine's message if it refused the tier's requests
    (each "" when not), and why failures that looked like an outage were not taken for one."""

    outage: str = ""
    refusal: str = ""
    remark: str = ""


def outage_reason(failures: TierFailures) -> str:
    """Why these failures look like an engine outage rather than the engine, or "" (before
    `judge_failures` tells a refusal or too few failures apart)."""
    if failures.refused:
        return f"engine outage: {failures.refused} requests could not connect to the backend"
    if failures.sent and failures.failed / failures.sent > OUTAGE_FAILED_SHARE:
        return (
            f"engine outage: {failures.failed} of {failures.sent} requests failed "
            f"(more than {OUTAGE_FAILED_SHARE * 100:g} %)"
        )
    return ""


def refusal_by_status(replies: Counter[tuple[str, str]]) -> str:
    """The engine's (most frequent) message when every failed request was refused by its status
    (errors.is_refusal), else "": the engine will never serve these requests as sent."""
    if not replies or not all(is_refusal(status) for status, _ in replies):
        return ""
    (status, message), _ = replies.most_common(1)[0]
    return message or status


def one_server_error(replies: Counter[tuple[str, str]]) -> tuple[str, str] | None:
    """(status, message) when every failed request, at least OUTAGE_MIN_FAILED of them, got one server
    error with one message from the engine, of no "not now" kind (503...), else None (one failure is
    enough when the message is a known refusal's)."""
    if len(replies) != 1:
        return None
    (status, message), count = next(iter(replies.items()))
    code = http_code(status)
    if code is None or code < 500 or code in RETRY_LATER_STATUSES or not message:
        return None
    enough = count >= OUTAGE_MIN_FAILED or is_known_refusal(message)
    return (status, message) if enough else None


def judge_failures(
    failures: TierFailures, backend: str, engine_answers: Callable[[], bool]
) -> FailureVerdict:
    """A tier's failures judged. Refused connections are an outage. Failures that are all refused by their
    status are a refusal (`refused`, never an outage). One server error message on every failed request
    is a refusal when the backend answers its probe (`engine_answers`, asked only when it decides); too
    few failures to tell are an outage only when it does not."""
    outage = outage_reason(failures)
    if not outage or failures.refused:
        return FailureVerdict(outage=outage)
    refusal = refusal_by_status(failures.replies)
    if refusal:
        return FailureVerdict(refusal=refusal)
    one_error = one_server_error(failures.replies)
    if one_error is None and failures.failed >= OUTAGE_MIN_FAILED:
        return FailureVerdict(outage=outage)
    if not engine_answers():
        return FailureVerdict(outage=f"{outage}; backend {backend} does not answer its model list")
    if one_error is not None:
        return FailureVerdict(refusal=one_error[1])
    return FailureVerdict(
        remark=f"{failures.failed} of {failures.sent} requests failed: too few to call an outage, and "
        f"backend {backend} answers its model list"
    )


METRIC_SUCCESS = "success_rate"
METRIC_ATTAINMENT = "slo_attainment"
# per-request limit (record column) -> the summary's name of its metric, as f"{name}_p{percentile}_s"
LIMITED_METRICS = {"ttft_s": "ttft", "tpot_s": "tpot", "e2e_s": "e2e"}


def upper_bounds(slo: Slo) -> dict[str, float]:
    """Summary column -> the most it may be: the SLO's latency bounds and, at its percentile, its
    per-request limits (the lower of the two where both bound one column)."""
    bounds = slo.latency_bounds()
    limit_percentile = slo.limit_percentile()
    if limit_percentile is not None:
        for column, limit in slo.request_limits().items():
            metric = f"{LIMITED_METRICS[column]}_p{limit_percentile}_s"
            bounds[metric] = min(limit, bounds.get(metric, limit))
    return bounds


def lower_bounds(slo: Slo) -> dict[str, float]:
    """Summary column -> the least it may be: success rate, and slo_attainment with an attainment floor."""
    floors = {METRIC_SUCCESS: slo.success_rate}
    if slo.attainment is not None:
        floors[METRIC_ATTAINMENT] = slo.attainment
    return floors


def tier_failures(row: pd.Series, slo: Slo) -> list[str]:
    """The SLO metrics this tier misses. A latency without a successful request to measure it (NaN) is
    no miss of its own: that tier misses the success rate."""
    failures = [metric for metric, bound in upper_bounds(slo).items() if row[metric] > bound]
    return failures + [metric for metric, floor in lower_bounds(slo).items() if not row[metric] >= floor]


def tier_misses(
    rows: pd.DataFrame, slo: Slo, conversation_slos: Mapping[str, Slo] | None = None
) -> list[tuple[str, str]]:
    """The bounds one tier of one target misses, as (persona or "", metric), in the order the capacity
    table names its binding metric; empty when the tier meets its SLO. `rows`: the tier's summary rows
    (a mix's whole-tier row with its personas' rows). A tier without a request misses the success rate."""
    slos = dict(conversation_slos or {})
    single, whole, personas = split_mixes(rows)
    if len(whole):
        tier, judge = whole.iloc[0], mix_judge(personas, slo, slos)
    else:
        tier = single.iloc[0]
        judge = SloJudge(slos.get(str(tier["conversation"]), slo), {})
    return [(persona, metric) for persona, _, _, metric in judge.failures(tier)]


def split_mixes(summary: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The rows of conversations on their own, the whole-tier rows of mixes, and the mixes' persona rows."""
    mix = summary["mix"].astype(str) if "mix" in summary else pd.Series("", index=summary.index)
    whole = summary["kind"].astype(str) == KIND_MIX if "kind" in summary else mix != ""
    return summary[mix == ""], summary[whole], summary[(mix != "") & ~whole]


def mix_judge(persona_rows: pd.DataFrame, slo: Slo, slos: Mapping[str, Slo]) -> SloJudge:
    """The judge of a mix's tiers: each persona's row by its conversation's SLO."""
    names = persona_rows["conversation"].unique()
    judge = SloJudge(slo, {str(name): slos.get(str(name), slo) for name in names})
    judge.persona_rows = persona_rows
    return judge


class SloJudge:
    """Whether a tier meets its SLO: a conversation's tier by its own row; a mix's whole tier by each of
    its personas' rows (`persona_slos`), each by its conversation's SLO."""

    def __init__(self, slo: Slo, persona_slos: dict[str, Slo]) -> None:
        self.slo = slo
        self.persona_slos = persona_slos
        self.persona_rows = pd.DataFrame()

    def judged_rows(self, tier: pd.Series) -> list[tuple[str, pd.Series, Slo]]:
        """(persona or "", row, SLO) of everything this tier is judged by."""
        if not self.persona_slos:
            return [("", tier, self.slo)]
        rows = self.persona_rows
        same_tier = rows[(rows["target"] == tier["target"]) & (rows["tier_index"] == tier["tier_index"])]
        return [
            (str(row["conversation"]), row, self.persona_slos[str(row["conversation"])])
            for _, row in same_tier.iterrows()
        ]

    def failures(self, tier: pd.Series) -> list[tuple[str, pd.Series, Slo, str]]:
        """(persona, its row, its SLO, metric) of each bound this tier misses."""
        return [
            (persona, row, slo, metric)
            for persona, row, slo in self.judged_rows(tier)
            for metric in tier_failures(row, slo)
        ]

    def crossing(self, last_pass: pd.Series | None, first_fail: pd.Series) -> tuple[float, str, str]:
        """Load (`_load`) at which the first bound is crossed, linear between the two tiers; its metric
        (the binding metric) and persona."""
        failures = self.failures(first_fail)
        if last_pass is None:
            return math.nan, failures[0][3], failures[0][0]
        passed = {persona: row for persona, row, _ in self.judged_rows(last_pass)}
        load_low, load_high = float(last_pass["_load"]), float(first_fail["_load"])
        crossings = []
        for persona, row, slo, metric in failures:
            low_row = passed.get(persona)  # a persona with no developer at the tier that passed: at once
            fraction = (
                0.0 if low_row is None else _fraction(float(low_row[metric]), float(row[metric]), metric, slo)
            )
            crossings.append(
                (load_low + min(max(fraction, 0.0), 1.0) * (load_high - load_low), metric, persona)
            )
        return min(crossings)


def _fraction(low: float, high: float, metric: str, slo: Slo) -> float:
    """Where between the passing tier's value `low` and the failing one's `high` the bound lies (0..1)."""
    floors = lower_bounds(slo)
    if metric in floors:
        return (low - floors[metric]) / (low - high) if low > high else 0.0
    limit = upper_bounds(slo)[metric]
    return (limit - low) / (high - low) if math.isfinite(high) and high > low else 0.0

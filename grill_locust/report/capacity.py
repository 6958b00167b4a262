"""Capacity at an SLO: how many concurrent users each backend holds on each conversation.

A tier meets the SLO when its TTFT p50, E2E p50 and success rate are all within bounds. The capacity
of a series (backend, or run x backend in a comparison) on a conversation is the largest tier below the
first failing one; the estimate interpolates linearly in users between that tier and the first failing
one, on the metric that crosses its bound first (the binding metric).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from grill_locust.config import Slo
from grill_locust.errors import GrillError

METRIC_TTFT = "ttft_p50_s"
METRIC_E2E = "e2e_p50_s"
METRIC_SUCCESS = "success_rate"

FLAG_NAMES = {"ttft_p50_s": "--slo-ttft-p50", "e2e_p50_s": "--slo-e2e-p50", "success_rate": "--slo-success"}
CAPACITY_COLUMNS: list[str] = [
    "conversation",
    "series",
    "max_users_meeting_slo",
    "estimated_users",
    "binding_metric",
    "first_failing_users",
    "tested_max_users",
    "note",
]


def slo_of_run(meta: dict[str, Any], **overrides: float | None) -> Slo:
    """The SLO a run is judged by: its own `slo` (run.json, or config.yaml), then flag overrides (None:
    not given); GrillError naming the key or the flag of a bad value."""
    values: dict[str, float] = {}
    places: dict[str, str] = {}
    own = meta.get("slo")
    if isinstance(own, dict):
        for name in Slo.model_fields:
            if own.get(name) is not None:
                places[name] = f"slo.{name}"
                values[name] = _positive(own[name], places[name])
    for name, value in overrides.items():
        if value is not None:
            places[name] = FLAG_NAMES.get(name, name)
            values[name] = _positive(value, places[name])
    success_rate = values.get("success_rate", 1.0)
    if success_rate > 1.0:
        raise GrillError(
            f"{places['success_rate']}: success rate {success_rate:g} is not a fraction in (0, 1] (e.g. 0.99)"
        )
    return Slo(**values)


def _positive(value: Any, place: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError) as error:
        raise GrillError(f"{place}: {value!r} is not a number") from error
    if not number > 0:
        raise GrillError(f"{place}: {value!r} must be greater than 0")
    return number


def tier_failures(row: pd.Series, slo: Slo) -> list[str]:
    """The SLO metrics this tier misses. A latency without a successful request to measure it (NaN) is
    no miss of its own: that tier misses the success rate."""
    failures = []
    if row[METRIC_TTFT] > slo.ttft_p50_s:
        failures.append(METRIC_TTFT)
    if row[METRIC_E2E] > slo.e2e_p50_s:
        failures.append(METRIC_E2E)
    if not row[METRIC_SUCCESS] >= slo.success_rate:
        failures.append(METRIC_SUCCESS)
    return failures


def capacity_at_slo(summary: pd.DataFrame, slo: Slo) -> pd.DataFrame:
    """One row per conversation x series (CAPACITY_COLUMNS), conversations in order, best series first."""
    rows = []
    for (conversation, series), tiers in summary.groupby(["conversation", "series"], sort=True):
        rows.append({"conversation": conversation, "series": series, **_series_capacity(tiers, slo)})
    capacity = pd.DataFrame(rows, columns=CAPACITY_COLUMNS)
    if not len(capacity):
        return capacity
    capacity["_rank"] = capacity["estimated_users"].fillna(0.0)
    capacity = capacity.sort_values(
        ["conversation", "_rank", "series"], ascending=[True, False, True], kind="stable"
    )
    return capacity.drop(columns="_rank").reset_index(drop=True)


def _series_capacity(tiers: pd.DataFrame, slo: Slo) -> dict[str, Any]:
    # several targets of one series on one conversation (e.g. two models) are not expected; take each tier once
    ordered = tiers.sort_values(["tier_users", "tier_index"]).drop_duplicates("tier_users")
    ordered = ordered[ordered["requests"] > 0]
    tested_max = int(ordered["tier_users"].max()) if len(ordered) else 0
    notes: list[str] = []
    last_pass: pd.Series | None = None
    for _, tier in ordered.iterrows():
        failures = tier_failures(tier, slo)
        if bool(tier.get("saturated", False)):
            notes.append(f"load generator saturated at {int(tier['tier_users'])} users")
        if not bool(tier.get("complete", True)):
            notes.append(f"tier {int(tier['tier_users'])} incomplete")
        if not failures:
            last_pass = tier
            continue
        estimate, binding = _interpolate(last_pass, tier, failures, slo)
        return {
            "max_users_meeting_slo": int(last_pass["tier_users"]) if last_pass is not None else 0,
            "estimated_users": estimate,
            "binding_metric": binding,
            "first_failing_users": int(tier["tier_users"]),
            "tested_max_users": tested_max,
            "note": "; ".join(notes),
        }
    if last_pass is not None:
        notes.append("meets the SLO at every tested tier")
    return {
        "max_users_meeting_slo": int(last_pass["tier_users"]) if last_pass is not None else 0,
        "estimated_users": float(last_pass["tier_users"]) if last_pass is not None else math.nan,
        "binding_metric": "",
        "first_failing_users": math.nan,
        "tested_max_users": tested_max,
        "note": "; ".join(notes),
    }


def _interpolate(
    last_pass: pd.Series | None, first_fail: pd.Series, failures: list[str], slo: Slo
) -> tuple[float, str]:
    """Users at which the first metric crosses its bound, linear between the two tiers."""
    if last_pass is None:
        return math.nan, failures[0]
    users_low = float(last_pass["tier_users"])
    users_high = float(first_fail["tier_users"])
    crossings: list[tuple[float, str]] = []
    for metric in failures:
        low, high = float(last_pass[metric]), float(first_fail[metric])
        if metric == METRIC_SUCCESS:
            fraction = (low - slo.success_rate) / (low - high) if low > high else 0.0
        else:
            limit = slo.ttft_p50_s if metric == METRIC_TTFT else slo.e2e_p50_s
            fraction = (limit - low) / (high - low) if math.isfinite(high) and high > low else 0.0
        crossings.append((users_low + min(max(fraction, 0.0), 1.0) * (users_high - users_low), metric))
    estimate, binding = min(crossings)
    return estimate, binding


def users_phrase(row: pd.Series) -> str:
    """'~37', '>= 200' (met at every tier), 'none (< 5)' (missed at the first tier)."""
    if pd.isna(row["first_failing_users"]):
        if row["max_users_meeting_slo"] > 0:
            return f">= {int(row['max_users_meeting_slo'])}"
        return "no data"
    if row["max_users_meeting_slo"] == 0:
        return f"none (< {int(row['first_failing_users'])})"
    return f"~{int(math.floor(row['estimated_users']))}"


def _holds(row: pd.Series) -> str:
    if row["max_users_meeting_slo"] == 0 and pd.isna(row["first_failing_users"]):
        return f"{row['series']}: no successful requests to judge"
    if row["max_users_meeting_slo"] == 0 and not pd.isna(row["first_failing_users"]):
        users = int(row["first_failing_users"])
        return f"{row['series']} misses it already at {users} user{'s' if users != 1 else ''}"
    phrase = users_phrase(row)
    plural = "" if phrase == "~1" else "s"
    return f"{row['series']} holds {phrase} developer{plural}"


def recommendations(capacity: pd.DataFrame) -> pd.DataFrame:
    """The seed's table 1.3 in sentences: per conversation, how many developers each series holds."""
    rows = []
    for conversation, group in capacity.groupby("conversation", sort=True):
        parts = [_holds(row) for _, row in group.iterrows()]
        best = group.iloc[0]
        rows.append(
            {
                "conversation": conversation,
                "best": best["series"] if best["max_users_meeting_slo"] > 0 else "",
                "recommendation": f"for {conversation}, " + ", ".join(parts),
            }
        )
    return pd.DataFrame(rows, columns=["conversation", "best", "recommendation"])

"""Capacity at an SLO: how many concurrent users each backend holds on each conversation.

A tier meets the SLO when each latency percentile the SLO bounds (TTFT and E2E p50, p90 or p99 where
given) and its success rate are within bounds, and, with per-request limits, when that SLO's percentile
of each limited metric is within its limit and/or its slo_attainment is at least the SLO's attainment; a
conversation's own SLO wins over the scenario's. A mix
target's tier meets it when every persona's row meets its conversation's SLO (the whole-tier figures
mix personas and are judged by nobody's). The capacity of a series (backend, or run x backend in a
comparison) on a conversation or mix is the largest tier below the first failing one; the estimate
interpolates linearly in users between that tier and the first failing one, on the metric (and, in a
mix, the persona) that crosses its bound first: the binding metric and persona. Those verdicts on a tier
are `grill_locust/verdicts.py`'s (`SloJudge`), which the run's capacity search asks too.

An open-loop campaign's tiers are rates: its capacity is the largest rate meeting the SLO, in the same
columns (`*_users` hold the load in `load_unit`: "users", "req/s" or "sessions/s"); tiers of users and
tiers of rates of one series are judged apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from grill_locust.config import ConversationSlo, Slo
from grill_locust.errors import GrillError
from grill_locust.report.load_axis import USERS, floor_text, load_text, with_load
from grill_locust.verdicts import SloJudge, mix_judge, split_mixes

FLAG_NAMES = {
    "ttft_p50_s": "--slo-ttft-p50",
    "e2e_p50_s": "--slo-e2e-p50",
    "success_rate": "--slo-success",
    "ttft_s": "--slo-ttft",
    "tpot_ms": "--slo-tpot-ms",
    "e2e_s": "--slo-e2e",
    "percentile": "--slo-percentile",
    "attainment": "--slo-attainment",
}
CAPACITY_COLUMNS: list[str] = [
    "conversation",
    "series",
    "load_unit",  # what the *_users columns count: "users", or an open-loop tier's rate unit
    "max_users_meeting_slo",
    "estimated_users",
    "binding_metric",
    "binding_persona",  # a mix's persona whose SLO the binding metric broke ("" for one conversation)
    "first_failing_users",
    "tested_max_users",
    # the first tier that is no verdict on its load (summary `not_served`): the walk stops below it
    "not_served_users",
    "not_served",
    "note",
]


def slo_of_run(meta: dict[str, object], **overrides: float | None) -> Slo:
    """The SLO a run is judged by: its own `slo` (run.json, or config.yaml), then flag overrides (None:
    not given); GrillError naming the key or the flag of a bad value."""
    values: dict[str, float | int] = {}
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
    if "percentile" in values and float(values["percentile"]).is_integer():
        values["percentile"] = int(values["percentile"])
    try:
        return Slo.parse(values)
    except GrillError as error:
        name, _, message = str(error).partition(": ")  # the key first: name the flag that gave it
        raise GrillError(f"{places.get(name, f'slo.{name}')}: {message}") from None


def _positive(value: Any, place: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError) as error:
        raise GrillError(f"{place}: {value!r} is not a number") from error
    if not number > 0:
        raise GrillError(f"{place}: {value!r} must be greater than 0")
    return number


def conversation_slos_of_run(meta: dict[str, object], base: Slo) -> dict[str, Slo]:
    """Each conversation's SLO where the run's scenario gave it one (run.json `conversation_slo`): its
    bounds over `base`; GrillError naming the bound when one is not valid."""
    own = meta.get("conversation_slo")
    slos: dict[str, Slo] = {}
    for conversation, bounds in (own or {}).items() if isinstance(own, dict) else ():
        try:
            slos[str(conversation)] = ConversationSlo.model_validate(bounds).over(base)
        except ValueError as error:
            raise GrillError(f"run.json conversation_slo.{conversation}: {error}") from None
    return slos


def capacity_at_slo(
    summary: pd.DataFrame, slo: Slo, conversation_slos: Mapping[str, Slo] | None = None
) -> pd.DataFrame:
    """One row per conversation (or mix) x series (CAPACITY_COLUMNS), conversations in order, best
    series first. `conversation_slos`: conversations judged by their own SLO rather than `slo`."""
    slos = dict(conversation_slos or {})
    single, whole, personas = split_mixes(with_load(summary))
    rows = []
    keys = ["conversation", "series", "_unit"]
    for (conversation, series, unit), tiers in single.groupby(keys, sort=True):
        judge = SloJudge(slos.get(str(conversation), slo), {})
        rows.append(
            {
                "conversation": conversation,
                "series": series,
                "load_unit": unit,
                **_series_capacity(tiers, judge),
            }
        )
    for (conversation, series, unit), tiers in whole.groupby(keys, sort=True):
        of_mix = personas[(personas["mix"] == conversation) & (personas["series"] == series)]
        judge = mix_judge(of_mix, slo, slos)
        rows.append(
            {
                "conversation": conversation,
                "series": series,
                "load_unit": unit,
                **_series_capacity(tiers, judge),
            }
        )
    capacity = pd.DataFrame(rows, columns=CAPACITY_COLUMNS)
    if not len(capacity):
        return capacity
    capacity["_rank"] = capacity["estimated_users"].fillna(0.0)
    capacity = capacity.sort_values(
        ["conversation", "_rank", "series"], ascending=[True, False, True], kind="stable"
    )
    return capacity.drop(columns="_rank").reset_index(drop=True)


def _series_capacity(tiers: pd.DataFrame, judge: SloJudge) -> dict[str, Any]:
    # several targets of one series on one conversation (e.g. two models) are not expected; take each tier once
    unit = str(tiers["_unit"].iloc[0])
    as_load = int if unit == USERS else float  # a count of users, or a rate
    ordered = tiers.sort_values(["_load", "tier_index"]).drop_duplicates("_load")
    ordered = ordered[ordered["requests"] > 0]
    tested_max = as_load(ordered["_load"].max()) if len(ordered) else 0
    notes: list[str] = []
    last_pass: pd.Series | None = None
    unserved = {"not_served_users": math.nan, "not_served": ""}
    for _, tier in ordered.iterrows():
        why = str(tier.get("not_served", "") or "")
        if not why and not bool(tier.get("complete", True)):  # a summary without the column
            why = "incomplete"
        if why:  # what it measured is not its load: capacity is what the tiers below it held
            unserved = {"not_served_users": as_load(tier["_load"]), "not_served": why}
            notes.append(f"{load_text(tier['_load'], unit)} {not_served_phrase(unit)} ({why})")
            break
        failures = judge.failures(tier)
        if bool(tier.get("saturated", False)):
            notes.append(f"load generator saturated at {load_text(tier['_load'], unit)}")
        if not failures:
            last_pass = tier
            continue
        estimate, binding, persona = judge.crossing(last_pass, tier)
        return {
            "max_users_meeting_slo": as_load(last_pass["_load"]) if last_pass is not None else 0,
            "estimated_users": estimate,
            "binding_metric": binding,
            "binding_persona": persona,
            "first_failing_users": as_load(tier["_load"]),
            "tested_max_users": tested_max,
            **unserved,
            "note": "; ".join(notes),
        }
    if last_pass is not None and not unserved["not_served"]:
        notes.append("meets the SLO at every tested tier")
    return {
        "max_users_meeting_slo": as_load(last_pass["_load"]) if last_pass is not None else 0,
        "estimated_users": float(last_pass["_load"]) if last_pass is not None else math.nan,
        "binding_metric": "",
        "binding_persona": "",
        "first_failing_users": math.nan,
        "tested_max_users": tested_max,
        **unserved,
        "note": "; ".join(notes),
    }


def not_served_phrase(unit: str) -> str:
    """What a tier that is no verdict on its load did not do: a rate's sends were not served on
    schedule, a tier of users did not run in full."""
    return "not run in full" if unit == USERS else "not served on schedule"


def users_phrase(row: pd.Series) -> str:
    """'~37', '>= 200' (met at every tier), 'none (< 5)' (missed at the first tier); a rate tier's with its
    unit: '~7.5 req/s'."""
    unit = str(row.get("load_unit", USERS))
    after = "" if unit == USERS else f" {unit}"
    if pd.isna(row["first_failing_users"]):
        if row["max_users_meeting_slo"] > 0:
            return f">= {row['max_users_meeting_slo']:g}{after}"
        return "no verdict" if row.get("not_served") else "no data"
    if row["max_users_meeting_slo"] == 0:
        return f"none (< {row['first_failing_users']:g}{after})"
    return f"~{floor_text(row['estimated_users'], unit)}{after}"


def _holds(row: pd.Series) -> str:
    unit = str(row.get("load_unit", USERS))
    why = str(row.get("not_served", "") or "")
    if why and row["max_users_meeting_slo"] == 0:
        load = load_text(row["not_served_users"], unit)
        return f"{row['series']}: {load} {not_served_phrase(unit)} ({why})"
    if row["max_users_meeting_slo"] == 0 and pd.isna(row["first_failing_users"]):
        return f"{row['series']}: no successful requests to judge"
    if row["max_users_meeting_slo"] == 0 and not pd.isna(row["first_failing_users"]):
        persona = row.get("binding_persona") or ""
        who = f" ({persona} first)" if persona else ""
        return f"{row['series']} misses it already at {load_text(row['first_failing_users'], unit)}{who}"
    phrase = users_phrase(row)
    plural = "" if phrase == "~1" else "s"
    held = (
        f"{row['series']} holds {phrase} developer{plural}"
        if unit == USERS
        else f"{row['series']} holds {phrase}"
    )
    persona = row.get("binding_persona") or ""
    held = f"{held} ({persona} breaks it first, on {row['binding_metric']})" if persona else held
    if why:
        held += f"; {load_text(row['not_served_users'], unit)} {not_served_phrase(unit)} ({why})"
    return held


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

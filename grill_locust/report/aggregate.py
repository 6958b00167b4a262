"""Tier statistics: one row per target x tier from a run's records, vectorised with pandas groupby.
A mix target's tier has a row per persona (its conversation's records, as a target of its own would)
beside its whole-tier row (conversation "whole tier: …", kind "mix"), both with the mix in `mix`.

Latency statistics use successful requests only (status "ok"), with the success rate beside them;
a request cut by the run's own stop (`stream_cut`, error "cancelled") counts in neither: it is the
tester's doing, not the engine's, and shows as `cancelled`; an autocomplete request the developer's
typing cancelled (`abandoned`) is one of the tier's requests but neither a success nor a failure;
percentiles are numpy's linear interpolation, as `grill_locust.record.percentile` (every verdict on a
tier, saturation among them, is grill_locust/verdicts.py's, as the run's). Throughput is
Σ output tokens of successful requests / tier span (phases.csv start..end, or first request start to
last request end when phases are missing). A rate tier's span runs from its first scheduled send to its
last request's end: not the phase, whose start waits for the workers' dispatchers and whose end for the
drain and its pause, so that its requests_per_s reads the rate the engine served.

Requests started in a tier's warmup (record `warmup` true, or among the tier's first `warmup_requests` of
run.json by send time: _tier_warmup) are left out of every tier figure and counted beside
(`warmup_requests`): the records are filtered once, where statistics read them (_Measured), and
the span of a tier with warmup starts at its first measured request; an agent session that started in
warmup is left out whole. Cooldown requests (`cooldown` true) stay in and are counted (`cooldown_requests`).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from grill_locust.config import KIND_MIX, Slo
from grill_locust.record import (
    CANCELLED,
    LABEL_COLUMNS,
    STATUS_ABANDONED,
    STATUS_OK,
    STATUS_STREAM_CUT,
)
from grill_locust.report.capacity import conversation_slos_of_run, slo_of_run
from grill_locust.report.confidence import (
    TierResamples,
    interval_row,
    resample_tier,
    tier_seed,
    with_interval_columns,
)
from grill_locust.report.goodput import GOODPUT_COLUMNS, goodput_columns, judged_slo_met, tier_goodput_counts
from grill_locust.report.load import RunData, load_run
from grill_locust.report.percentiles import (
    LATENCY_METRICS,
    QUANTILES,
    REQUEST_RATE_METRICS,
    percentile_figures,
)
from grill_locust.report.sessions import (
    SESSION_KEYS,
    SESSION_TIER_COLUMNS,
    STEP_COLUMNS,
    agent_sessions,
    agent_steps,
    session_tier_figures,
)
from grill_locust.verdicts import (
    SCHEDULE_LAG_P99_LIMIT_S,
    behind_schedule,
    saturation_causes,
    schedule_lag_p99_s,
    tier_cpu_pct,
    timing_lag_ms,
)
from grill_locust.workload.kinds import names_where

TIER_KEYS: list[str] = ["target", "tier_index"]

FLAG_INCOMPLETE = "incomplete"
FLAG_SATURATED = "saturated"
FLAG_NO_SUCCESS = "no successful requests"
FLAG_ALL_WARMUP = "no measured request"  # every request of the tier was warmup
FLAG_UNREADABLE = "unreadable record line"
SUMMARY_CSV = "summary.csv"

TIER_LABEL_COLUMNS: list[str] = [c for c in LABEL_COLUMNS if c not in TIER_KEYS]  # a tier's own labels


def summary_metric_columns() -> list[str]:
    """The percentile columns of a summary, in table order."""
    return list(percentile_figures())


# Autocomplete tiers (empty for tiers without autocomplete requests), over the tier's autocomplete
# requests: those the developer's typing cancelled, as a count and a percent; those whose completion was
# shown within the budget and before the next keystroke, percent of all of them (abandoned and failed
# included: the share of the developer's pauses that got a completion in time); the output tokens the
# client received before its cancels (a lower bound of the engine's wasted work); the conversation's
# budget_ms (config.yaml).
AUTOCOMPLETE_COLUMNS: list[str] = [
    "abandoned",
    "abandoned_pct",
    "shown_in_budget_pct",
    "abandoned_output_tokens",
    "budget_ms",
]

# each figure with a bootstrap interval has its `<figure>_lo`, `<figure>_hi` beside it (report.confidence)
SUMMARY_COLUMNS: list[str] = with_interval_columns(
    [
        "run_id",
        "series",
        *(c for c in LABEL_COLUMNS if c != "run_id"),  # the record's labels, in their order
        "mix",  # a mix target's whole-tier label on its persona rows and whole-tier row; "" otherwise
        "tier_index",
        "tier_users",
        "tier_rate",  # an open-loop tier's rate (tier_users 0); empty for a tier of users
        "developers",  # distinct developers that sent requests (a persona's share of a mix's tier)
        "requests",
        "ok_requests",
        "cancelled",
        "earlier_attempt_requests",  # requests of an attempt an engine outage cut short (the tier ran again)
        "warmup_requests",  # started in the tier's warmup: in no other figure of the row
        "cooldown_requests",  # still running at a rate tier's end (among the row's requests)
        "success_rate",  # ok requests / requests that were neither abandoned nor cut by our own stop
        *AUTOCOMPLETE_COLUMNS,
        *summary_metric_columns(),
        "output_tokens_per_s",
        "visible_output_tokens_per_s",  # output tokens less reasoning tokens, over the same span
        "requests_per_s",
        *GOODPUT_COLUMNS,  # per-request SLO (report/goodput.py): share of requests meeting it, their rates
        "cached_token_ratio",
        "prompt_tokens_mean",
        "output_tokens_mean",
        "span_s",
        "turns",
        "ttft_turn_ratio",
        "e2e_turn_ratio",
        "context_growth",
        *SESSION_TIER_COLUMNS,
        "worker_lag_p99_ms",
        "worker_read_lag_p99_ms",
        "worker_cpu_mean",
        "saturated",
        "unreadable_lines",
        "complete",
        # why the tier is no verdict on its load ("" when it is): a rate tier whose sends waited (for
        # max_in_flight, or a load generator behind its schedule), a tier cut short (its time cap)
        "not_served",
        "flags",
        "note",
    ]
)
INTERNAL_COLUMNS = (
    "ok_output_tokens",
    "ok_visible_tokens",
    "records_span_s",
    "slo_judged",
    "slo_met_requests",
    "slo_met_output_tokens",
    "sends_span_s",
)  # worked on, never shown
TURN_COLUMNS: list[str] = [
    "series",
    "target",
    "conversation",
    "kind",
    "mix",  # a mix target's persona rows: the mix's conversation (its rate counts the mix's sessions)
    "tier_index",
    "tier_users",
    "tier_rate",  # an open-loop tier's rate (tier_users 0); empty for a tier of users
    "turn",
    "ok_requests",
    "ttft_p50_s",
    "e2e_p50_s",
    "prompt_tokens_mean",
]


STAT_COLUMNS: list[str] = [
    "developer",
    "tier_index",
    "tier_users",
    "tier_rate",
    "turn",
    "wall_start",
    "scheduled_wall",
    "repeat",
    "ttft_s",
    "ttfo_s",
    "tpot_s",
    "e2e_s",
    "itl_mean_s",
    "tokens_per_s",
    "prompt_tokens",
    "cached_tokens",
    "output_tokens",
    "reasoning_tokens",
    "visible_tokens_per_s",
    "worker_lag_p99_ms",
    "worker_read_lag_p99_ms",
    "worker_cpu",
]


@dataclass(frozen=True)
class _Stats:
    """The numeric columns of the records, target as an integer code: fast to filter and group."""

    # "target": codes into `targets`; "ok": status == "ok"; "cancelled": cut by our own stop;
    # "autocomplete": of that kind; "abandoned": cancelled by typing; "shown_in_budget": a completion
    # shown in time; "cooldown": still running at its rate tier's end; "row": position in records
    frame: pd.DataFrame
    targets: pd.Index

    @classmethod
    def of(cls, records: pd.DataFrame) -> _Stats:
        codes, targets = pd.factorize(records["target"])
        columns = {
            "target": codes,
            "ok": (records["status"] == STATUS_OK).to_numpy(),
            "cancelled": (
                (records["status"] == STATUS_STREAM_CUT) & (records["error"] == CANCELLED)
            ).to_numpy(),
            "autocomplete": records["kind"].isin(names_where("typed_completions")).to_numpy(),
            "abandoned": (records["status"] == STATUS_ABANDONED).to_numpy(),
            "shown_in_budget": records["shown_in_budget"].eq(True).fillna(False).to_numpy(dtype=bool),
            "cooldown": records["cooldown"].eq(True).fillna(False).to_numpy(dtype=bool),
            "row": np.arange(len(records)),
            "worker": pd.factorize(records["worker_id"])[0],
            "slo_met": records["slo_met"]
            .astype("boolean")
            .astype("Float64")
            .to_numpy("float64", na_value=np.nan),
            # the unit the bootstrap resamples (report.confidence)
            "conversation": pd.factorize(records["conversation_id"], use_na_sentinel=False)[0],
        }
        columns.update({name: records[name].to_numpy(dtype="float64") for name in STAT_COLUMNS})
        return cls(pd.DataFrame(columns), pd.Index(targets))

    def by_name(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Replace target codes in the index of a per-tier result with target names."""
        codes = frame.index.get_level_values("target")
        names = self.targets.take(codes) if len(codes) else pd.Index([], dtype=object)
        arrays = [names.astype(object)] + [
            frame.index.get_level_values(i) for i in range(1, frame.index.nlevels)
        ]
        frame = frame.copy()
        frame.index = pd.MultiIndex.from_arrays(arrays, names=frame.index.names)
        return frame


Resamples = dict[tuple[str, int], TierResamples]  # (target, tier_index) -> its figures' bootstrap


@dataclass(frozen=True)
class RunTables:
    """Every table of one run's report: tiers, multi-turn turns, agent sessions and agent steps; and
    each tier's bootstrap resamples (a mix's whole tier, not its personas), which `grill compare` judges."""

    summary: pd.DataFrame
    turns: pd.DataFrame
    sessions: pd.DataFrame  # report.sessions.SESSION_COLUMNS, one row per agent session
    agent_steps: pd.DataFrame  # STEP_COLUMNS, one row per target x tier x agent step
    resamples: Resamples


@dataclass(frozen=True)
class _Measured:
    """What tier statistics read of a run: its records less those started in warmup (counted per tier in
    `warmup_requests`), the phases of tiers with warmup starting at their first measured request, the
    agent sessions that did not start in warmup."""

    run: RunData
    stats: _Stats
    sessions: pd.DataFrame  # report.sessions.SESSION_COLUMNS
    warmup_requests: Counter[tuple[str, int]]

    @classmethod
    def of(cls, run: RunData) -> _Measured:
        records = run.records
        warmup = records["warmup"].eq(True).fillna(False).to_numpy(dtype=bool)
        if not warmup.any():
            return cls(run, _Stats.of(records), agent_sessions(records), Counter())
        measured = records[~warmup].reset_index(drop=True)
        tiers = [records["target"].astype(str), records["tier_index"].astype("int64")]
        counts = Counter(records[warmup].groupby([t[warmup] for t in tiers]).size().to_dict())
        first_measured = measured.groupby(
            [measured["target"].astype(str), measured["tier_index"].astype("int64")]
        )["wall_start"].min()
        phases = run.phases.copy()
        if len(phases):
            tier_keys = zip(phases["target"].astype(str), phases["tier_index"].astype("int64"), strict=True)
            starts = [first_measured.get(key, np.nan) if key in counts else np.nan for key in tier_keys]
            phases["start_wall"] = np.fmax(phases["start_wall"].astype("float64").to_numpy(), starts)
        session_warmup = pd.Series(warmup).groupby(
            [records[key].to_numpy() for key in SESSION_KEYS], dropna=False
        )
        sessions = agent_sessions(records[~session_warmup.transform("any").to_numpy(dtype=bool)])
        measured_run = dataclasses.replace(run, records=measured, phases=phases)
        return cls(measured_run, _Stats.of(measured), sessions, counts)


def summarize(
    run: RunData,
    slo: Slo | None = None,
    conversation_slos: Mapping[str, Slo] | None = None,
    intervals: bool = True,
) -> pd.DataFrame:
    """One row per target x tier (SUMMARY_COLUMNS, then any telemetry columns), sorted by target and users;
    a mix target's persona rows before its whole-tier row. Requests are judged by `slo` and
    `conversation_slos` (default: the run's own). Without `intervals` the bootstrap is left out (the
    master's live tier row: its event loop takes records meanwhile)."""
    run = _tier_warmup(_judged(run, slo, conversation_slos))
    return _summary_and_turns(run, _Measured.of(run), turns=False, intervals=intervals)[0]


def summarize_all(
    run: RunData, slo: Slo | None = None, conversation_slos: Mapping[str, Slo] | None = None
) -> RunTables:
    """Every table of the run, sharing the work of reading the records once; SLOs as `summarize`."""
    run = _tier_warmup(_judged(run, slo, conversation_slos))
    measured = _Measured.of(run)
    steps = agent_steps(measured.run.records)
    if len(steps):
        steps["series"] = series_names(steps)
    summary, turns, resamples = _summary_and_turns(run, measured, turns=True)
    return RunTables(summary, turns, measured.sessions, steps[STEP_COLUMNS], resamples)


def _tier_warmup(run: RunData) -> RunData:
    """The run with each record's `warmup` as the report counts it: its worker's judgment (`warmup_s`,
    `warmup_requests_per_user`), or among its tier's first `warmup_requests` (run.json) by send time,
    ties by record id, over all the tier's users and workers (each repeat of a tier its own). A mix's
    tier is counted whole, before its personas are parted."""
    first = run.meta.get("warmup_requests")
    records = run.records
    if not first or not len(records):
        return run
    order = records.sort_values(["wall_start", "record_id"], kind="stable")
    tiers = [order["target"].astype(str), order["tier_index"], order["repeat"].fillna(0.0)]
    early = order.groupby(tiers, dropna=False).cumcount().reindex(records.index) < int(first)
    warmup = records["warmup"].eq(True).fillna(False).astype(bool) | early
    return dataclasses.replace(run, records=records.assign(warmup=warmup.to_numpy(dtype=bool)))


def _judged(run: RunData, slo: Slo | None, conversation_slos: Mapping[str, Slo] | None) -> RunData:
    """The run with each record's slo_met judged by the SLO the summary reports."""
    if slo is None:
        slo = slo_of_run(run.meta)
        conversation_slos = conversation_slos_of_run(run.meta, slo)
    met = judged_slo_met(run.records, slo, conversation_slos or {})
    return dataclasses.replace(run, records=run.records.assign(slo_met=met))


def _summary_and_turns(
    run: RunData, measured: _Measured, turns: bool, intervals: bool = True
) -> tuple[pd.DataFrame, pd.DataFrame, Resamples]:
    """The tier rows, a mix's persona rows among them, (`turns`) the per-turn rows, per persona, and
    the tiers' resamples."""
    summary, resamples = _summarize(measured, intervals)
    turn_rows = (
        _summarize_turns(measured.run, measured.stats) if turns else pd.DataFrame(columns=TURN_COLUMNS)
    )
    personas = _persona_run(run)
    if personas is None:
        return summary, turn_rows, resamples
    persona_run, mixes = personas
    persona_measured = _Measured.of(persona_run)
    persona_rows = _as_mix_targets(_summarize(persona_measured, intervals)[0])
    whole = summary["target"].isin(mixes)
    # turn ratios across personas of different kinds mean nothing: a persona's row has its own
    summary.loc[whole, ["turns", "ttft_turn_ratio", "e2e_turn_ratio", "context_growth"]] = np.nan
    summary["mix"] = np.where(whole, summary["conversation"], "")
    mix_of_target = summary.loc[whole].drop_duplicates("target").set_index("target")["conversation"]
    persona_rows["mix"] = persona_rows["target"].map(mix_of_target)
    if turns:
        persona_turns = _as_mix_targets(_summarize_turns(persona_measured.run, persona_measured.stats))
        persona_turns["mix"] = persona_turns["target"].map(mix_of_target)
        turn_rows = _concat_rows(turn_rows[~turn_rows["target"].isin(mixes)], persona_turns)
    return _concat_rows(persona_rows, summary), turn_rows, resamples


MIX_PERSONA_SEPARATOR = "\x1f"  # between a mix target's name and a persona's, in _persona_run's targets


def _persona_run(run: RunData) -> tuple[RunData, set[str]] | None:
    """The records of mix targets as one target per persona (`<target>\x1f<conversation>`), each with its
    tier's phase rows, so that each persona is summarised as a target is; and the mix targets' names.
    None when no target of the run is a mix."""
    phases = run.phases
    mixes = set(phases.loc[phases["kind"].astype(str) == KIND_MIX, "target"].astype(str))
    if not mixes:
        return None
    records = run.records[run.records["target"].astype(str).isin(mixes)].copy()
    records["target"] = (
        records["target"].astype(str) + MIX_PERSONA_SEPARATOR + records["conversation"].astype(str)
    )
    tiers = records[["target", "tier_index", "conversation", "kind"]].drop_duplicates(
        ["target", "tier_index"]
    )
    tiers["mix_target"] = tiers["target"].str.split(MIX_PERSONA_SEPARATOR).str[0]
    phase_rows = phases.drop(columns=["conversation", "kind"]).rename(columns={"target": "mix_target"})
    phase_rows = tiers.merge(phase_rows.astype({"mix_target": str}), on=["mix_target", "tier_index"])
    persona_phases = phase_rows.drop(columns="mix_target")[list(phases.columns)]
    persona_run = RunData(records.reset_index(drop=True), persona_phases, None, run.meta, run.run_dir)
    return persona_run, mixes


def _as_mix_targets(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows of _persona_run's targets under their mix target's name."""
    frame = frame.copy()
    frame["target"] = frame["target"].astype(str).str.split(MIX_PERSONA_SEPARATOR).str[0]
    return frame


def _concat_rows(first: pd.DataFrame, then: pd.DataFrame) -> pd.DataFrame:
    """Two tables of the same columns, sorted by target and users as a summary is (`first` first)."""
    frames = [frame for frame in (first, then) if len(frame)]
    if not frames:
        return then
    table = pd.concat(frames, ignore_index=True)
    keys = [key for key in ("target", "tier_users", "tier_index") if key in table]
    return table.sort_values(keys, kind="stable").reset_index(drop=True)


def _tier_lag_p99(frame: pd.DataFrame, column: str) -> pd.Series:
    """A tier's lag p99 (event loop or reads): each worker's, over all its samples in the tier, is on its
    last record of the tier (the self-check's window is the tier); the tier's is the highest of its
    workers'."""
    lagged = frame[frame["worker_lag_p99_ms"].notna()]
    ends = lagged["wall_start"] + lagged["e2e_s"].fillna(0.0)
    by_worker = lagged.assign(end=ends).sort_values("end", kind="stable").groupby([*TIER_KEYS, "worker"])
    return by_worker[column].last().groupby(level=TIER_KEYS).max(min_count=1)


def _tier_cpu_pct(frame: pd.DataFrame) -> pd.Series:
    """Each tier's CPU (verdicts.tier_cpu_pct, as the run's live verdict) from its records' readings."""
    read = frame[frame["worker_cpu"].notna()]
    by_worker = read.groupby([*TIER_KEYS, "worker"])["worker_cpu"].agg(["sum", "count"])
    tiers, cpu = [], []
    for tier, rows in by_worker.groupby(level=TIER_KEYS):
        workers = rows.index.get_level_values("worker")
        tiers.append(tier)
        cpu.append(
            tier_cpu_pct(
                dict(zip(workers, rows["sum"], strict=True)), dict(zip(workers, rows["count"], strict=True))
            )
        )
    return pd.Series(cpu, index=pd.MultiIndex.from_tuples(tiers, names=TIER_KEYS), dtype="float64")


def _summarize(measured: _Measured, intervals: bool = True) -> tuple[pd.DataFrame, Resamples]:
    run, stats = measured.run, measured.stats
    records = run.records
    if not len(records) and not len(run.phases):
        return pd.DataFrame(columns=SUMMARY_COLUMNS), {}
    frame = stats.frame
    phases = _one_row_per_tier(run.phases).set_index(TIER_KEYS)
    phases.index = phases.index.set_levels(phases.index.levels[0].astype(object), level=0)
    ok_frame = frame[frame["ok"]]
    by_tier = frame.groupby(TIER_KEYS, sort=False)
    ok_by_tier = ok_frame.groupby(TIER_KEYS, sort=False)

    # a tier's users: constant in a campaign; in a plain run each record has the count of its moment
    per_tier = pd.DataFrame({"first_row": by_tier["row"].first(), "users": by_tier["tier_users"].max()})
    per_tier["requests"] = frame[~frame["cancelled"]].groupby(TIER_KEYS).size()
    per_tier["cancelled"] = frame[frame["cancelled"]].groupby(TIER_KEYS).size()
    per_tier["ok_requests"] = ok_by_tier.size()
    per_tier["developers"] = by_tier["developer"].nunique().where(lambda n: n > 0)
    per_tier["cooldown_requests"] = by_tier["cooldown"].sum()
    per_tier["tier_rate"] = by_tier["tier_rate"].max()  # empty in a folder written before rate tiers
    per_tier = per_tier.join(_percentiles(ok_by_tier))
    sums = ok_by_tier[["output_tokens"]].sum()
    per_tier["ok_output_tokens"] = sums["output_tokens"]
    # empty for a folder written before records counted reasoning tokens
    visible = (ok_frame["output_tokens"] - ok_frame["reasoning_tokens"]).groupby(
        [ok_frame["target"], ok_frame["tier_index"]]
    )
    per_tier["ok_visible_tokens"] = visible.sum(min_count=1)
    # cached ratio over the requests that report both numbers (some engines never send cached_tokens)
    both = ok_frame[ok_frame["cached_tokens"].notna() & ok_frame["prompt_tokens"].notna()]
    cache_sums = both.groupby(TIER_KEYS)[["cached_tokens", "prompt_tokens"]].sum()
    per_tier["cached_token_ratio"] = cache_sums["cached_tokens"] / cache_sums["prompt_tokens"].where(
        cache_sums["prompt_tokens"] > 0
    )
    per_tier["prompt_tokens_mean"] = ok_by_tier["prompt_tokens"].mean()
    per_tier["output_tokens_mean"] = ok_by_tier["output_tokens"].mean()
    ends = frame["wall_start"] + frame["e2e_s"].fillna(0.0)
    per_tier["records_span_s"] = (
        ends.groupby([frame["target"], frame["tier_index"]]).max() - by_tier["wall_start"].min()
    )
    # each repeat of a rate tier (`--repeat`: run again later) from its first scheduled send to its last end
    by_repeat = frame.assign(end=ends, repeat=frame["repeat"].fillna(0.0)).groupby([*TIER_KEYS, "repeat"])
    sends_spans = by_repeat["end"].max() - by_repeat["scheduled_wall"].min()
    per_tier["sends_span_s"] = sends_spans.groupby(level=TIER_KEYS).sum(min_count=1)
    per_tier["worker_lag_p99_ms"] = _tier_lag_p99(frame, "worker_lag_p99_ms")
    per_tier["worker_read_lag_p99_ms"] = _tier_lag_p99(frame, "worker_read_lag_p99_ms")
    per_tier["worker_cpu_mean"] = _tier_cpu_pct(frame)
    per_tier = per_tier.join(_turn_ratios(frame))
    per_tier = per_tier.join(_autocomplete_figures(frame))
    per_tier = per_tier.join(tier_goodput_counts(frame, TIER_KEYS))
    per_tier = stats.by_name(per_tier)

    labels = records[TIER_LABEL_COLUMNS].iloc[per_tier["first_row"].to_numpy()].astype(object)
    labels.index = per_tier.index
    labels["tier_users"] = per_tier["users"].to_numpy()
    phase_labels = phases[[*TIER_LABEL_COLUMNS, "tier_users"]].astype(
        dict.fromkeys(TIER_LABEL_COLUMNS, object)
    )
    summary = phase_labels.replace("", np.nan).combine_first(labels)
    summary[TIER_LABEL_COLUMNS] = summary[TIER_LABEL_COLUMNS].fillna("")
    summary = summary.join(per_tier.drop(columns=["first_row", "users"]))
    counts = ["requests", "ok_requests", "cancelled"]
    summary[counts] = summary[counts].fillna(0).astype("int64")
    judged = summary["requests"] - summary["abandoned"].fillna(0).astype("int64")
    summary["success_rate"] = summary["ok_requests"] / judged.where(judged > 0)
    summary["abandoned"] = summary["abandoned"].astype("Int64")
    summary["budget_ms"] = _budgets_ms(summary, run.meta)

    from_phases = phases["span_s"].reindex(summary.index)
    summary["span_s"] = from_phases.where(from_phases > 0, summary["records_span_s"])
    summary["span_s"] = summary["sends_span_s"].where(summary["tier_rate"].notna(), summary["span_s"])
    span = summary["span_s"].where(summary["span_s"] > 0)
    summary["output_tokens_per_s"] = summary["ok_output_tokens"].fillna(0.0) / span
    summary["visible_output_tokens_per_s"] = summary["ok_visible_tokens"] / span
    summary["requests_per_s"] = summary["ok_requests"] / span
    summary[GOODPUT_COLUMNS] = goodput_columns(summary, span)
    summary["saturated"] = _saturation_causes(summary).map(bool)
    summary["complete"] = phases["complete"].reindex(summary.index).fillna(True).astype(bool)
    summary["note"] = phases["note"].reindex(summary.index).fillna("").astype(str)
    summary["unreadable_lines"] = _unreadable_per_tier(run, summary.index)
    summary["not_served"] = _not_served(summary, run.records, phases.reindex(summary.index))
    earlier = phases.get("earlier_attempt_requests", pd.Series(0, index=phases.index))
    summary["earlier_attempt_requests"] = earlier.reindex(summary.index).fillna(0).astype("int64")
    summary["warmup_requests"] = [measured.warmup_requests[(str(t), int(i))] for t, i in summary.index]
    summary["cooldown_requests"] = summary["cooldown_requests"].fillna(0).astype("int64")
    summary["flags"] = _flags(summary)
    summary = summary.join(_session_columns(summary.index, measured.sessions))
    resamples = _resamples(run, stats, summary["span_s"]) if intervals else {}
    rows = [interval_row(resamples.get((str(target), int(tier)))) for target, tier in summary.index]
    summary = summary.join(pd.DataFrame(rows, index=summary.index))

    summary = summary.reset_index()
    summary["series"] = series_names(summary)
    summary = _join_telemetry(summary, run)
    summary["tier_index"] = summary["tier_index"].astype("int64")
    summary["tier_users"] = summary["tier_users"].astype("int64")
    extra = [c for c in summary.columns if c not in SUMMARY_COLUMNS and c not in INTERNAL_COLUMNS]
    summary["mix"] = ""
    summary = summary[SUMMARY_COLUMNS + extra]
    for name in (*LABEL_COLUMNS, "series", "not_served", "flags", "note"):
        summary[name] = summary[name].astype(str)
    summary = summary.sort_values(["target", "tier_users", "tier_index"], kind="stable")
    return summary.reset_index(drop=True), resamples


def _resamples(run: RunData, stats: _Stats, span_s: pd.Series) -> Resamples:
    """Each tier's bootstrap over its conversations, seeded by the run, target and tier (report.confidence)."""
    resamples: Resamples = {}
    for (code, tier), tier_frame in stats.frame.groupby(TIER_KEYS, sort=False):
        target = str(stats.targets[code])
        span = span_s.get((target, tier), np.nan)
        tier_resamples = resample_tier(tier_frame, float(span), tier_seed(run.run_id, target, int(tier)))
        if tier_resamples is not None:
            resamples[(target, int(tier))] = tier_resamples
    return resamples


def _one_row_per_tier(phases: pd.DataFrame) -> pd.DataFrame:
    """The phase rows of each tier as one: its repeats (`--repeat`) together, their spans added (the
    time the tier ran, pauses between repeats left out), complete when every repeat is."""
    phases = phases.assign(span_s=phases["end_wall"] - phases["start_wall"])
    if not phases.duplicated(TIER_KEYS).any():
        return phases
    by_tier = phases.groupby(TIER_KEYS, sort=False)
    rows = by_tier.first()
    rows["span_s"] = by_tier["span_s"].sum(min_count=1)
    rows["complete"] = by_tier["complete"].all()
    rows["note"] = by_tier["note"].agg(lambda notes: "; ".join(dict.fromkeys(n for n in notes if n)))
    if "earlier_attempt_requests" in phases:
        rows["earlier_attempt_requests"] = by_tier["earlier_attempt_requests"].sum()
    return rows.reset_index()


def _session_columns(tiers: pd.MultiIndex, sessions: pd.DataFrame) -> pd.DataFrame:
    """SESSION_TIER_COLUMNS for each tier of `tiers` (empty where the tier has no agent sessions)."""
    keys = pd.MultiIndex.from_arrays(
        [tiers.get_level_values(0).astype(str), tiers.get_level_values(1).astype("int64")], names=TIER_KEYS
    )
    figures = session_tier_figures(sessions).reindex(keys).set_axis(tiers)
    return figures.astype({name: "Int64" if name.endswith("sessions") else "float64" for name in figures})


def _percentiles(ok_by_tier: pd.core.groupby.DataFrameGroupBy) -> pd.DataFrame:
    """p50/p90/p95/p99 of each latency metric and of the per-request rates, one column each."""
    source_columns = [*LATENCY_METRICS.values(), *REQUEST_RATE_METRICS.values()]
    expected = summary_metric_columns()
    if ok_by_tier.ngroups == 0:  # no successful request anywhere: every percentile is missing
        return pd.DataFrame(
            columns=expected, index=pd.MultiIndex.from_tuples([], names=TIER_KEYS), dtype="float64"
        )
    quantiles = ok_by_tier[source_columns].quantile([q / 100.0 for q in QUANTILES])
    wide = quantiles.unstack(level=-1)
    renamed = {}
    for name, column in LATENCY_METRICS.items():
        for q in QUANTILES:
            renamed[(column, q / 100.0)] = f"{name}_p{q}_s"
    for name, column in REQUEST_RATE_METRICS.items():
        for q in QUANTILES:
            renamed[(column, q / 100.0)] = f"{name}_p{q}"
    wide.columns = [renamed[column] for column in wide.columns]
    return wide[expected]


def summarize_turns(run: RunData) -> pd.DataFrame:
    """Multi-turn detail: TTFT and E2E p50 per turn, one row per target x tier x turn (TURN_COLUMNS).

    Only targets whose records have a turn > 0 appear; empty when the run has no multi-turn target.
    """
    measured = _Measured.of(_tier_warmup(run))
    return _summarize_turns(measured.run, measured.stats)


def _summarize_turns(run: RunData, stats: _Stats) -> pd.DataFrame:
    turns = _turn_table(stats.frame)
    if not len(turns):
        return pd.DataFrame(columns=TURN_COLUMNS)
    first_rows = turns.pop("first_row").to_numpy()
    turns = stats.by_name(turns).reset_index()
    for name in ("conversation", "kind", "backend", "model"):
        turns[name] = run.records[name].to_numpy()[first_rows].astype(str)
    for name in ("turn", "tier_index", "tier_users"):
        turns[name] = turns[name].astype("int64")
    turns["target"] = turns["target"].astype(str)
    turns["mix"] = ""
    turns["series"] = series_names(turns)
    return turns[TURN_COLUMNS].reset_index(drop=True)


def _turn_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per target x tier x turn of multi-turn targets (turn > 0 seen): p50s, mean prompt, a row of each.
    An autocomplete record's turn is its request's index while the developer types: no conversation turn."""
    ok_frame = frame[frame["ok"] & ~frame["autocomplete"]]
    multi_targets = ok_frame.loc[ok_frame["turn"] > 0, "target"].unique()
    multi = ok_frame[ok_frame["target"].isin(multi_targets)]
    if not len(multi):
        return pd.DataFrame()
    return multi.groupby([*TIER_KEYS, "turn"]).agg(
        first_row=("row", "first"),
        tier_users=("tier_users", "first"),
        tier_rate=("tier_rate", "first"),
        ok_requests=("ok", "size"),
        ttft_p50_s=("ttft_s", "median"),
        e2e_p50_s=("e2e_s", "median"),
        prompt_tokens_mean=("prompt_tokens", "mean"),
    )


def _turn_ratios(frame: pd.DataFrame) -> pd.DataFrame:
    """Turn-to-turn ratio (p50 of the last turn / p50 of the first) and context growth per tier."""
    turns = _turn_table(frame)
    columns = ["turns", "ttft_turn_ratio", "e2e_turn_ratio", "context_growth"]
    if not len(turns):
        return pd.DataFrame(
            columns=columns, index=pd.MultiIndex.from_tuples([], names=TIER_KEYS), dtype="float64"
        )
    turns = turns.reset_index()
    by_tier = turns.sort_values([*TIER_KEYS, "turn"]).groupby(TIER_KEYS)
    first = by_tier.first()
    last = by_tier.last()
    out = pd.DataFrame(index=first.index)
    out["turns"] = by_tier["turn"].max() + 1
    out["ttft_turn_ratio"] = last["ttft_p50_s"] / first["ttft_p50_s"].where(first["ttft_p50_s"] > 0)
    out["e2e_turn_ratio"] = last["e2e_p50_s"] / first["e2e_p50_s"].where(first["e2e_p50_s"] > 0)
    out["context_growth"] = last["prompt_tokens_mean"] / first["prompt_tokens_mean"].where(
        first["prompt_tokens_mean"] > 0
    )
    return out


def _autocomplete_figures(frame: pd.DataFrame) -> pd.DataFrame:
    """AUTOCOMPLETE_COLUMNS but the budget, per tier with autocomplete requests (our own stop's cuts left out)."""
    typed = frame[frame["autocomplete"] & ~frame["cancelled"]]
    by_tier = typed.groupby(TIER_KEYS)
    out = pd.DataFrame({"autocomplete_requests": by_tier.size()})
    out["abandoned"] = by_tier["abandoned"].sum()
    out["abandoned_pct"] = 100.0 * out["abandoned"] / out["autocomplete_requests"]
    out["shown_in_budget_pct"] = 100.0 * by_tier["shown_in_budget"].sum() / out["autocomplete_requests"]
    received = typed["output_tokens"].where(typed["abandoned"], 0.0)
    out["abandoned_output_tokens"] = received.groupby([typed["target"], typed["tier_index"]]).sum()
    if not len(out):
        out.index = pd.MultiIndex.from_tuples([], names=TIER_KEYS)
    return out.drop(columns=["autocomplete_requests"]).astype("float64")


def _budgets_ms(summary: pd.DataFrame, meta: dict) -> pd.Series:
    """The budget_ms of each autocomplete tier's conversation, from the run's scenario (NaN elsewhere)."""
    budgets = meta.get("budgets_ms") or {}
    by_conversation = summary["conversation"].map(lambda name: budgets.get(str(name), np.nan))
    return by_conversation.astype("float64").where(summary["abandoned"].notna())


def _unreadable_per_tier(run: RunData, tiers: pd.MultiIndex) -> list[int]:
    """Unreadable lines of records.jsonl per tier: those whose text names the tier, plus those naming
    none, which count against every tier of the run (any of them may have lost the record)."""
    named = Counter(
        (line.target, line.tier_index) for line in run.unreadable_lines if line.target is not None
    )
    unknown = sum(1 for line in run.unreadable_lines if line.target is None)
    return [named[(str(target), int(tier))] + unknown for target, tier in tiers]


# the phases.csv notes of a rate tier whose sends waited for a slot (read only in results folders written
# before phases.csv had a waited_for_max_in_flight column) and of a tier stopped at its time cap
# (run/campaign.py writes them)
_WAITED_NOTE = re.compile(r"max_in_flight (\d+) reached: (\d+) sends waited")
_TIME_CAP_NOTE = re.compile(r"time cap [^;]* reached")


def _waited_for_slots(row: pd.Series, phase: pd.Series) -> tuple[str, int]:
    """A rate tier's max_in_flight and the sends that waited for it: phases.csv's columns, or in a results
    folder written before them, its note."""
    waited = pd.to_numeric(phase.get("waited_for_max_in_flight"), errors="coerce")
    if pd.notna(waited):
        return f"{float(phase['max_in_flight']):g}", int(waited)
    found = _WAITED_NOTE.search(str(row["note"]))
    return (found.group(1), int(found.group(2))) if found else ("", 0)


def _not_served(summary: pd.DataFrame, records: pd.DataFrame, phases: pd.DataFrame) -> list[str]:
    """Why each tier is no verdict on the load it was given, or "": the load it offered is not what the
    engine was given. A rate tier whose sends went out late (schedule lag p99 past
    SCHEDULE_LAG_P99_LIMIT_S, as the run's LOAD-GENERATOR-BOUND flag): they waited for max_in_flight, or
    the load generator fell behind; a tier that did not run in full."""
    lags = records[records["schedule_lag_s"].notna()].groupby(TIER_KEYS)["schedule_lag_s"]
    reasons = []
    for key, row in summary.iterrows():
        parts = []
        note = str(row["note"])
        if not row["complete"]:
            cap = _TIME_CAP_NOTE.search(note)
            parts.append(f"incomplete: {cap.group(0)}" if cap else "incomplete")
        tier_lags = lags.get_group(key).to_numpy() if key in lags.groups else np.array([])
        p99_s = schedule_lag_p99_s(tier_lags)
        if behind_schedule(p99_s):  # as the run's flag
            late = int((tier_lags > SCHEDULE_LAG_P99_LIMIT_S).sum())
            slots, waited = _waited_for_slots(row, phases.loc[key])
            if waited >= late:
                parts.append(f"{waited} of {len(tier_lags)} sends waited for max_in_flight {slots}")
            else:
                also = f", {waited} waited for max_in_flight {slots}" if waited else ""
                parts.append(
                    f"{late} of {len(tier_lags)} sends late (schedule lag p99 {p99_s * 1000:.0f} ms{also}): "
                    "the load generator fell behind"
                )
        reasons.append("; ".join(parts))
    return reasons


def _saturation_causes(summary: pd.DataFrame) -> pd.Series:
    """Each tier's verdicts.saturation_causes (empty: not saturated), from its timing lag (its read lag
    where every read was stamped) and its CPU."""
    lags = zip(summary["worker_lag_p99_ms"], summary["worker_read_lag_p99_ms"], strict=True)
    causes = [
        saturation_causes(timing_lag_ms(*pair), cpu)
        for pair, cpu in zip(lags, summary["worker_cpu_mean"], strict=True)
    ]
    return pd.Series(causes, index=summary.index, dtype=object)


def _flags(summary: pd.DataFrame) -> pd.Series:
    """A short, human-readable list of what is wrong with each tier ('' when nothing is)."""
    parts = pd.DataFrame(index=summary.index)
    parts["incomplete"] = np.where(~summary["complete"], FLAG_INCOMPLETE, "")
    parts["saturated"] = _saturation_causes(summary).map(
        lambda causes: f"{FLAG_SATURATED} (load generator: {' '.join(causes)})" if causes else ""
    )
    all_warmup = (summary["requests"] == 0) & (summary["warmup_requests"] > 0)
    parts["no_success"] = np.where(
        all_warmup,
        FLAG_ALL_WARMUP + " (all " + summary["warmup_requests"].astype(str) + " were warmup)",
        np.where(summary["ok_requests"] == 0, FLAG_NO_SUCCESS, ""),
    )
    parts["unreadable"] = summary["unreadable_lines"].map(
        lambda n: f"{n} {FLAG_UNREADABLE}{'s' if n > 1 else ''}" if n else ""
    )
    return parts.apply(lambda row: "; ".join(p for p in row if p), axis=1).astype(str)


def series_names(frame: pd.DataFrame) -> pd.Series:
    """A line per backend; backend/model when one backend served several models in the run."""
    models_per_backend = frame.groupby("backend")["model"].transform("nunique")
    names = frame["backend"].astype(str)
    return names.where(models_per_backend <= 1, names + "/" + frame["model"].astype(str))


def _join_telemetry(summary: pd.DataFrame, run: RunData) -> pd.DataFrame:
    """Merge grill_locust.telemetry.tier_telemetry(...) columns when telemetry and that function exist."""
    if run.telemetry is None or not len(run.telemetry):
        return summary
    try:
        from grill_locust.telemetry import tier_telemetry
    except ImportError:  # telemetry package without the per-tier function: no telemetry columns
        return summary
    try:
        per_tier = tier_telemetry(run.telemetry, run.phases, run.records)
    except Exception as error:  # a telemetry bug must not cost the user the whole report
        print(f"grill report: telemetry skipped ({type(error).__name__}: {error})", file=sys.stderr)
        return summary
    if per_tier is None or not len(per_tier):
        return summary
    per_tier = per_tier.reset_index() if "target" not in per_tier.columns else per_tier.copy()
    per_tier = per_tier[
        [c for c in per_tier.columns if c == "target" or c == "tier_index" or c not in summary]
    ]
    for column in per_tier.columns:
        if column != "target":
            per_tier[column] = pd.to_numeric(per_tier[column], errors="coerce").astype("float64")
    per_tier["target"] = per_tier["target"].astype(str)
    if per_tier.duplicated(TIER_KEYS).any():  # a row per repeat (`--repeat`): their mean per tier
        per_tier = per_tier.groupby(TIER_KEYS, sort=False).mean().reset_index()
    summary = summary.assign(
        tier_index=summary["tier_index"].astype("float64"), target=summary["target"].astype(str)
    )
    return summary.merge(per_tier, on=TIER_KEYS, how="left")


def summarize_run(run_dir: str | Path, write: bool = True) -> pd.DataFrame:
    """Summary of a results folder; writes <run_dir>/summary.csv (the end of every run calls this)."""
    summary = summarize(load_run(run_dir))
    if write:
        summary.to_csv(Path(run_dir) / SUMMARY_CSV, index=False)
    return summary

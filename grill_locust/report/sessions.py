"""Agent sessions: the records of `agentic` conversations read as sessions and as steps.

A session is one iteration of one developer (target, tier, worker, user, iteration): its main trajectory
(the shortest conversation_id) and the sub-sessions it ran in parallel (ids that extend the main one).
The developer waits for the main trajectory's model calls one after another and for the longest
sub-session, so `wait_s` = Σ E2E of the main trajectory + the largest Σ E2E of one sub-session.
A step is judged by its last attempt (a 429 retried into an `ok` is an ok step). A session with a step
that failed is `failed`; one our own stop cut short is `cancelled` (neither ok nor failed); tier
percentiles of the wait are over `ok` sessions only.

Per step (the record's `turn`, sub-session steps at their own step number): the median context (prompt
tokens), TTFT p50/p90 and the cached ratio (cached / prompt tokens) mean and p10, over ok requests.
Percentiles are numpy's linear interpolation, as everywhere in the report.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from grill_locust.record import CANCELLED, STATUS_OK, STATUS_STREAM_CUT
from grill_locust.workload.kinds import names_where

SESSIONS_CSV = "sessions.csv"
SESSION_KEYS: list[str] = ["target", "tier_index", "worker_id", "user_id", "iteration"]
SESSION_OK = "ok"
SESSION_FAILED = "failed"
SESSION_CANCELLED = "cancelled"
SESSION_COLUMNS: list[str] = [
    "run_id",
    "target",
    "backend",
    "model",
    "conversation",
    "tier_index",
    "tier_users",
    "tier_rate",  # an open-loop tier's rate in sessions/s (tier_users 0); empty for a tier of users
    "conversation_id",
    "steps",
    "subsession_steps",
    "context_tokens_last",
    "wait_s",
    "cached_ratio_mean",
    "status",
]
# the per-tier session figures of summary.csv (empty for tiers without agent sessions)
SESSION_TIER_COLUMNS: list[str] = [
    "sessions",  # ok + failed; cancelled sessions are the tester's doing and count in neither
    "failed_sessions",
    "session_wait_p50_s",
    "session_wait_p90_s",
    "session_steps_mean",
]
STEP_COLUMNS: list[str] = [
    "series",
    "target",
    "conversation",
    "kind",  # agentic: with tier_rate, what a tier's load counts (report.load_axis)
    "tier_index",
    "tier_users",
    "tier_rate",
    "step",
    "ok_requests",
    "context_tokens_p50",
    "ttft_p50_s",
    "ttft_p90_s",
    "cached_ratio_mean",
    "cached_ratio_p10",
]
TIER_KEYS: list[str] = ["target", "tier_index"]


def agent_sessions(records: pd.DataFrame) -> pd.DataFrame:
    """One row per agent session of the run (SESSION_COLUMNS), sorted by target, tier and id."""
    agentic = records[records["kind"].isin(names_where("agent_steps"))]
    if not len(agentic):
        return pd.DataFrame(columns=SESSION_COLUMNS)
    frame = agentic[[*SESSION_KEYS, "conversation_id", "turn", "retries", "status", "error"]].copy()
    frame["session"] = frame.groupby(SESSION_KEYS, sort=False, dropna=False).ngroup().to_numpy()
    frame["e2e_s"] = agentic["e2e_s"].astype("float64").fillna(0.0)
    frame["prompt_tokens"] = agentic["prompt_tokens"].astype("float64")
    frame["cached_ratio"] = _cached_ratio(agentic).where(agentic["status"] == STATUS_OK)
    frame["cancelled"] = (agentic["status"] == STATUS_STREAM_CUT) & (agentic["error"] == CANCELLED)
    frame["id_length"] = frame["conversation_id"].astype(str).str.len()
    main_id = frame.sort_values("id_length", kind="stable").groupby("session")["conversation_id"].first()
    frame["main"] = frame["conversation_id"].to_numpy() == main_id.reindex(frame["session"]).to_numpy()

    # a step's outcome is its last attempt; a session failed when any step's last attempt failed
    last_attempts = frame.sort_values("retries", kind="stable").drop_duplicates(
        ["session", "conversation_id", "turn"], keep="last"
    )
    failed_step = (last_attempts["status"] != STATUS_OK) & ~last_attempts["cancelled"]
    failed = failed_step.groupby(last_attempts["session"]).any()
    cancelled = frame.groupby("session")["cancelled"].any()

    main = frame[frame["main"]]
    subs = frame[~frame["main"]]
    main_wait = main.groupby("session")["e2e_s"].sum()
    longest_sub = subs.groupby(["session", "conversation_id"])["e2e_s"].sum().groupby(level="session").max()
    main_steps = main[["session", "turn"]].drop_duplicates().groupby("session").size()
    sub_steps = subs[["session", "conversation_id", "turn"]].drop_duplicates().groupby("session").size()
    # groupby's last() would skip a missing value: take the row of the last step's last attempt
    last_rows = main.sort_values(["turn", "retries"], kind="stable").drop_duplicates("session", keep="last")
    context_last = last_rows.set_index("session")["prompt_tokens"]

    first = agentic.groupby(frame["session"]).first()
    sessions = pd.DataFrame(index=main_id.index)
    for name in ("run_id", *SESSION_KEYS[:2], "backend", "model", "conversation"):
        sessions[name] = first[name]
    sessions["tier_users"] = agentic.groupby(frame["session"])["tier_users"].max()
    sessions["tier_rate"] = agentic.groupby(frame["session"])["tier_rate"].max()
    sessions["conversation_id"] = main_id.astype(str)
    sessions["steps"] = main_steps.reindex(sessions.index).fillna(0).astype("int64")
    sessions["subsession_steps"] = sub_steps.reindex(sessions.index).fillna(0).astype("int64")
    sessions["context_tokens_last"] = context_last.reindex(sessions.index)
    sessions["wait_s"] = main_wait.reindex(sessions.index).fillna(0.0) + longest_sub.reindex(
        sessions.index
    ).fillna(0.0)
    sessions["cached_ratio_mean"] = frame.groupby("session")["cached_ratio"].mean()
    sessions["status"] = np.where(
        failed.reindex(sessions.index).fillna(False).to_numpy(dtype=bool),
        SESSION_FAILED,
        np.where(cancelled.reindex(sessions.index).to_numpy(dtype=bool), SESSION_CANCELLED, SESSION_OK),
    )
    sessions = sessions.astype({"tier_index": "int64", "tier_users": "int64"})
    return (
        sessions[SESSION_COLUMNS]
        .sort_values(["target", "tier_index", "conversation_id"], kind="stable")
        .reset_index(drop=True)
    )


def session_tier_figures(sessions: pd.DataFrame) -> pd.DataFrame:
    """SESSION_TIER_COLUMNS per (target, tier_index) that has agent sessions."""
    index = pd.MultiIndex.from_tuples([], names=TIER_KEYS)
    if not len(sessions):
        return pd.DataFrame(columns=SESSION_TIER_COLUMNS, index=index)
    counted = sessions[sessions["status"] != SESSION_CANCELLED]
    by_tier = counted.groupby(TIER_KEYS)
    ok_by_tier = counted[counted["status"] == SESSION_OK].groupby(TIER_KEYS)
    figures = pd.DataFrame({"sessions": by_tier.size()})
    figures["failed_sessions"] = (
        (counted["status"] == SESSION_FAILED).groupby([counted["target"], counted["tier_index"]]).sum()
    )
    figures["session_wait_p50_s"] = ok_by_tier["wait_s"].quantile(0.5)
    figures["session_wait_p90_s"] = ok_by_tier["wait_s"].quantile(0.9)
    figures["session_steps_mean"] = ok_by_tier["steps"].mean()
    for name in ("sessions", "failed_sessions"):
        figures[name] = figures[name].astype("Int64")
    return figures[SESSION_TIER_COLUMNS]


def agent_steps(records: pd.DataFrame) -> pd.DataFrame:
    """Per target x tier x step of agent sessions, over ok requests (STEP_COLUMNS but `series`)."""
    ok = records[records["kind"].isin(names_where("agent_steps")) & (records["status"] == STATUS_OK)]
    if not len(ok):
        return pd.DataFrame(columns=STEP_COLUMNS)
    frame = pd.DataFrame(
        {
            "target": ok["target"].astype(str),
            "tier_index": ok["tier_index"].astype("int64"),
            "step": ok["turn"].astype("int64"),
            "tier_users": ok["tier_users"].astype("float64"),
            "tier_rate": ok["tier_rate"].astype("float64"),
            "prompt_tokens": ok["prompt_tokens"].astype("float64"),
            "ttft_s": ok["ttft_s"].astype("float64"),
            "cached_ratio": _cached_ratio(ok),
        }
    )
    by_step = frame.groupby([*TIER_KEYS, "step"])
    steps = pd.DataFrame(
        {
            "tier_users": by_step["tier_users"].max(),
            "tier_rate": by_step["tier_rate"].max(),
            "ok_requests": by_step.size(),
            "context_tokens_p50": by_step["prompt_tokens"].median(),
            "ttft_p50_s": by_step["ttft_s"].quantile(0.5),
            "ttft_p90_s": by_step["ttft_s"].quantile(0.9),
            "cached_ratio_mean": by_step["cached_ratio"].mean(),
            "cached_ratio_p10": by_step["cached_ratio"].quantile(0.1),
        }
    ).reset_index()
    labels = ok.groupby(ok["target"].astype(str))[["backend", "model", "conversation", "kind"]].first()
    steps = steps.join(labels, on="target")
    steps["tier_users"] = steps["tier_users"].astype("int64")
    return steps


def _cached_ratio(records: pd.DataFrame) -> pd.Series:
    """cached / prompt tokens of each record; empty where either is missing (some engines never say)."""
    prompt = records["prompt_tokens"].astype("float64")
    return records["cached_tokens"].astype("float64") / prompt.where(prompt > 0)

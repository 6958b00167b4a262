"""Agentic sessions in a real headless Locust campaign against simulated engines: one run, three targets
(plain sessions; sessions that compact and run sub-agents; an engine that fails a share of requests),
its records read by the tests below."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from grill_locust.workload.tools import TOOLS_APPROX_TOKENS
from tests.run.conftest import only_run_dir, run_locust, write_scenario

pytestmark = pytest.mark.slow

USERS = 2
SIZES = {"system_tokens": 1200, "step_max_tokens": 16, "final_max_tokens": 24}
CONVERSATIONS = [
    {"name": "agent", "kind": "agentic", "steps": [3, 4], "tool_result_tokens": {"median": 200, "p95": 800}},
    {
        "name": "agent-long",
        "kind": "agentic",
        "steps": 6,
        "tool_result_tokens": 300,
        "context_limit_tokens": 1700,
        "subagents": 2,
    },
    {"name": "agent-faulty", "kind": "agentic", "steps": 4, "tool_result_tokens": 100},
]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, pd.DataFrame]:
    tmp_path = tmp_path_factory.mktemp("agentic")
    faulty_args = {"fault_rate": 0.3, "fault_kinds": "500", "fault_seed": 3}
    data: dict[str, Any] = {
        "name": "agentic",
        "backends": [
            {"name": "sim", "engine": "sim", "profile": "vllm"},
            {"name": "faulty", "engine": "sim", "profile": "vllm", "sim_args": faulty_args},
        ],
        "models": [{"name": "grill-sim", "max_tokens": 16, "ignore_eos": True}],
        "conversations": [{**SIZES, **conversation} for conversation in CONVERSATIONS],
        "targets": [
            {"name": "plain", "backend": "sim", "conversation": "agent"},
            {"name": "long", "backend": "sim", "conversation": "agent-long"},
            {"name": "faulty", "backend": "faulty", "conversation": "agent-faulty"},
        ],
        "load": {"tiers": [USERS], "iterations": 1, "pause_s": 0.2, "think_time_s": 0.05, "engine_wait_s": 0},
    }
    scenario = write_scenario(tmp_path / "s.yaml", data)
    done = run_locust(["--scenario", str(scenario), "--results-dir", str(tmp_path / "results")], tmp_path)
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: the faulty engine's failed requests
    run_dir = only_run_dir(tmp_path / "results")
    return pd.read_parquet(run_dir / "records.parquet"), pd.read_csv(run_dir / "phases.csv")


def test_every_step_is_one_ok_record_and_the_context_grows(
    campaign: tuple[pd.DataFrame, pd.DataFrame],
) -> None:
    records, phases = campaign
    plain = records[records.target == "plain"]
    assert (plain["status"] == "ok").all() and (plain["kind"] == "agentic").all()
    sessions = plain.groupby("conversation_id")
    assert sessions.ngroups == USERS
    for _, session in sessions:
        assert list(session.sort_values("turn")["turn"]) == list(range(len(session)))
        assert 3 <= len(session) <= 4
        prompt_tokens = session.sort_values("turn")["prompt_tokens"]
        assert prompt_tokens.is_monotonic_increasing and prompt_tokens.is_unique
        # the system message at least (the simulator's chat template may not render the tools' JSON)
        assert prompt_tokens.iloc[0] > SIZES["system_tokens"] - TOOLS_APPROX_TOKENS
        assert session["e2e_s"].notna().all()  # the developer's wait is their sum
        # each step's context is the last one's, served from the prefix cache
        assert (session.sort_values("turn")["cached_tokens"].iloc[1:] > 0).all()
    assert list(phases[phases.target == "plain"]["iterations_done"]) == [USERS]


def test_sub_agents_run_in_parallel_and_a_long_session_compacts(
    campaign: tuple[pd.DataFrame, pd.DataFrame],
) -> None:
    records, _ = campaign
    long = records[records.target == "long"]
    assert (long["status"] == "ok").all()
    parents = long[~long.conversation_id.str.contains("/sub")]
    assert parents.conversation_id.nunique() == USERS
    for parent_id, parent in parents.groupby("conversation_id"):
        parent = parent.sort_values("turn")
        assert list(parent["turn"]) == list(range(len(parent)))
        # a compaction: one extra request, and the context restarts smaller
        assert len(parent) > 6 and (parent["prompt_tokens"].diff() < 0).any()
        subs = long[long.conversation_id.str.startswith(f"{parent_id}/sub")]
        assert set(subs.conversation_id) == {f"{parent_id}/sub0", f"{parent_id}/sub1"}
        spans = {}
        for sub_id, sub in subs.groupby("conversation_id"):
            assert list(sub.sort_values("turn")["turn"]) == list(range(len(sub)))
            spans[sub_id] = (sub["wall_start"].min(), (sub["wall_start"] + sub["e2e_s"]).max())
        (start_0, end_0), (start_1, end_1) = spans.values()
        assert start_0 < end_1 and start_1 < end_0  # their wall times overlap
        # the parent waits for both: its next request starts after they end
        after = parent[parent.wall_start > min(start_0, start_1)]
        assert after["wall_start"].min() >= max(end_0, end_1)


def test_a_failed_step_ends_its_session_and_the_tier_still_completes(
    campaign: tuple[pd.DataFrame, pd.DataFrame],
) -> None:
    records, phases = campaign
    faulty = records[records.target == "faulty"]
    assert (faulty["status"] == "http_500").any()
    for _, session in faulty.groupby("conversation_id"):
        session = session.sort_values("turn")
        assert list(session["turn"]) == list(range(len(session)))
        failed = list(session["status"] != "ok")
        # a failure is the session's last request; a session without one made all its steps
        assert failed == [False] * (len(session) - 1) + [failed[-1]]
        assert failed[-1] or len(session) == 4
    assert faulty.conversation_id.nunique() == USERS
    assert list(phases[phases.target == "faulty"]["iterations_done"]) == [USERS]

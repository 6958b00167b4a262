"""Agent sessions in the report: session wait, failed and cancelled sessions, per-step figures, sessions.csv."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_report_cli import grill

from grill_locust.config import Slo
from grill_locust.report import format_table, load_run, summarize
from grill_locust.report.aggregate import summarize_all
from grill_locust.report.build import assemble, load_runs
from grill_locust.report.sessions import SESSION_COLUMNS, SESSION_TIER_COLUMNS, SESSIONS_CSV
from grill_locust.report.tables import MISSING, display_tiers
from tests.synthetic import (
    AGENT_CONVERSATION,
    START_WALL,
    make_record,
    synthetic_agent_records,
    write_results_folder,
)

AGENT_TARGET = "vllm/m/agent"
SESSION_ID = "agent:u{user}:0"


def step(user: int, turn: int, e2e_s: float, suffix: str = "", **values) -> dict:
    """One model call of the session of developer `user` (sub-sessions: the main id plus `suffix`)."""
    conversation_id = SESSION_ID.format(user=user) + suffix
    fields = {
        "record_id": f"{conversation_id}#{turn}#{values.get('retries', 0)}",
        "target": AGENT_TARGET,
        "backend": "vllm",
        "engine": "vllm",
        "model": "m",
        "conversation": "agent",
        "kind": "agentic",
        "tier_users": 8,
        "user_id": user,
        "conversation_id": conversation_id,
        "turn": turn,
        "wall_start": START_WALL + user * 100 + turn,
        "ttft_s": e2e_s / 10,
        "e2e_s": e2e_s,
    }
    fields.update(values)
    return make_record(**fields)


def agent_tier() -> list[dict]:
    """Seven sessions of one tier: five ok, one failed, one our stop cut short."""
    records = [
        step(1, t, e2e, prompt_tokens=1000 * (t + 1), cached_tokens=c)  # wait 6
        for t, (e2e, c) in enumerate([(1.0, 0), (2.0, 900), (3.0, 1800)])
    ]
    records += [step(2, t, e2e) for t, e2e in enumerate([2.0, 3.0, 5.0])]  # wait 10
    records += [step(3, t, 1.0) for t in range(2)]  # wait 2
    records += [step(4, 0, 1.0), step(4, 1, 50.0, status="http_500")]  # failed: not in the percentiles
    records += [step(5, 0, 1.0), step(5, 1, 0.3, status="stream_cut", error="cancelled")]  # ours
    # a 429 retried into an ok step: the step is ok; the developer waited for both attempts
    records += [step(6, 0, 1.0), step(6, 1, 0.5, status="http_429"), step(6, 1, 1.5, retries=1)]  # wait 3
    # two sub-sessions in parallel at step 1: the developer waits for the longer one (4 s), not both
    records += [step(7, t, 1.0) for t in range(3)]
    records += [step(7, t, 2.0, suffix="/sub0") for t in range(2)]
    records += [step(7, 0, 3.0, suffix="/sub1")]  # wait 3 + 4 = 7
    return records  # fmt: skip


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory) -> Path:
    """The agent tier beside a short-baseline target of the same run."""
    folder = tmp_path_factory.mktemp("agent-run")
    return write_results_folder(folder, [*agent_tier(), make_record(record_id="plain")])


def test_session_wait_is_the_sum_of_e2e_over_ok_sessions_and_failed_ones_count_apart(agent_run):
    summary = summarize(load_run(agent_run)).set_index("target")
    agent = summary.loc[AGENT_TARGET]
    assert (agent["sessions"], agent["failed_sessions"]) == (6, 1)  # the cancelled one in neither
    ok_waits = [6.0, 10.0, 2.0, 3.0, 7.0]
    assert agent["session_wait_p50_s"] == pytest.approx(float(np.percentile(ok_waits, 50)))
    assert agent["session_wait_p90_s"] == pytest.approx(8.8)  # linear: 7 + 0.6 * (10 - 7)
    assert agent["session_steps_mean"] == pytest.approx((3 + 3 + 2 + 2 + 3) / 5)
    plain = summary.loc["sim/grill-sim/short-baseline"]
    assert plain[SESSION_TIER_COLUMNS].isna().all()  # no agent sessions: empty, not zero


def test_one_row_per_session_with_its_steps_context_wait_and_status(agent_run):
    sessions = summarize_all(load_run(agent_run)).sessions
    assert list(sessions.columns) == SESSION_COLUMNS
    sessions = sessions.set_index("conversation_id")
    assert len(sessions) == 7
    first = sessions.loc[SESSION_ID.format(user=1)]
    assert (first["steps"], first["context_tokens_last"], first["wait_s"]) == (3, 3000, 6.0)
    assert first["cached_ratio_mean"] == pytest.approx((0 + 0.45 + 0.6) / 3)
    statuses = {user: sessions.loc[SESSION_ID.format(user=user), "status"] for user in range(1, 8)}
    assert statuses == {1: "ok", 2: "ok", 3: "ok", 4: "failed", 5: "cancelled", 6: "ok", 7: "ok"}
    with_subs = sessions.loc[SESSION_ID.format(user=7)]
    assert (with_subs["steps"], with_subs["subsession_steps"], with_subs["wait_s"]) == (3, 3, 7.0)
    assert sessions.loc[SESSION_ID.format(user=6), "wait_s"] == pytest.approx(3.0)


def test_per_step_context_ttft_and_cached_ratio_over_ok_requests(tmp_path):
    records = []
    for user, (prompts, cached, ttfts) in enumerate(
        [
            ([8000, 9000], [0, 7200], [0.5, 0.2]),
            ([8000, 9400], [0, 8000], [0.7, 0.4]),
            ([8000, 9800], [0, 4000], [0.9, 0.6]),
        ]
    ):
        for turn in range(2):
            records.append(
                step(
                    user,
                    turn,
                    1.0,
                    prompt_tokens=prompts[turn],
                    cached_tokens=cached[turn],
                    ttft_s=ttfts[turn],
                )
            )
    records.append(step(9, 1, 1.0, prompt_tokens=99_000, cached_tokens=0, status="http_500"))  # not ok
    write_results_folder(tmp_path, records)
    steps = summarize_all(load_run(tmp_path)).agent_steps
    assert steps["step"].tolist() == [0, 1] and steps["ok_requests"].tolist() == [3, 3]
    second = steps.iloc[1]
    assert second["context_tokens_p50"] == 9400
    assert (second["ttft_p50_s"], second["ttft_p90_s"]) == pytest.approx((0.4, 0.56))
    ratios = [7200 / 9000, 8000 / 9400, 4000 / 9800]
    assert second["cached_ratio_mean"] == pytest.approx(np.mean(ratios))
    assert second["cached_ratio_p10"] == pytest.approx(float(np.percentile(ratios, 10)))
    assert steps.iloc[0]["cached_ratio_mean"] == 0.0
    assert steps["series"].tolist() == ["vllm", "vllm"]


@pytest.fixture(scope="module")
def synthetic_agent_run(tmp_path_factory) -> Path:
    """A synthetic agent run of two engines: vLLM with and without prefix caching."""
    return write_results_folder(tmp_path_factory.mktemp("agents"), synthetic_agent_records(seed=4))


@pytest.fixture(scope="module")
def agent_report(synthetic_agent_run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("agent-report")
    run = synthetic_agent_run
    assert grill("report", str(run), "--out", str(out), "--no-progress") == 0
    return out


def test_the_report_of_an_agent_run_has_sessions_csv_figures_and_the_step_table(agent_report):
    names = sorted(p.name for p in agent_report.iterdir())
    slug = AGENT_CONVERSATION
    assert f"agent-steps-{slug}.png" in names and f"sessions-{slug}.png" in names
    sessions = pd.read_csv(agent_report / SESSIONS_CSV)
    assert list(sessions.columns) == ["run_label", *SESSION_COLUMNS]
    assert len(sessions) == 2 * (1 + 4) * 2  # engines x users over the tiers x sessions per user
    assert set(sessions["status"]) == {"ok"}
    summary = json.loads((agent_report / "summary.json").read_text())
    steps = pd.DataFrame(summary["agent_steps"])
    # the synthetic engines' shapes: prefix caching keeps TTFT flat as the context grows
    cached_steps = steps[(steps["series"] == "vllm") & (steps["step"] >= 1)]
    assert cached_steps["cached_ratio_mean"].min() > 0.5
    uncached = steps[steps["series"] == "vllm-no-prefix-cache"]
    assert (uncached["cached_ratio_mean"] == 0).all()
    tiers = pd.DataFrame(summary["tiers"])
    assert tiers["sessions"].tolist() == [2, 8, 2, 8]
    page = (agent_report / "report.html").read_text()
    assert "Agent sessions: per step" in page and "session wait p50 s" in page
    assert page.count('<img alt="') == 4  # metrics, grid, agent steps, sessions


def test_format_table_prints_the_session_columns_and_the_step_table(synthetic_agent_run, capsys):
    assert grill("report", str(synthetic_agent_run), "--format", "table") == 0
    printed = capsys.readouterr().out
    assert "session wait p50 s" in printed and "steps/session" in printed
    assert f"vllm · {AGENT_CONVERSATION} (per agent step)" in printed and "cached % p10" in printed


def test_compare_puts_session_wait_beside_each_runs_tier_figures(tmp_path):
    runs = []
    for label, backend in (("cache-on", "vllm"), ("cache-off", "vllm-no-prefix-cache")):
        records = synthetic_agent_records(backends=(backend,), run_id=label, seed=5)
        records["backend"] = "vllm"  # the same backend name in two runs: the label tells them apart
        runs.append((label, write_results_folder(tmp_path / label, records)))
    report = assemble(load_runs(runs), Slo(), compare=True)
    waits = report.summary.set_index(["series", "tier_users"])["session_wait_p50_s"]
    assert set(waits.index) == {(s, u) for s in ("cache-on/vllm", "cache-off/vllm") for u in (1, 4)}
    assert waits.notna().all()
    assert set(report.sessions["run_label"]) == {"cache-on", "cache-off"}
    assert set(report.agent_steps["series"]) == {"cache-on/vllm", "cache-off/vllm"}
    blocks = format_table(report.summary).split("\n\n")
    for series in ("cache-on/vllm", "cache-off/vllm"):
        block = next(b for b in blocks if b.startswith(f"{series} · {AGENT_CONVERSATION}\n"))
        assert "session wait p50 s  session wait p90 s" in block.splitlines()[1]


def test_the_tier_table_shows_sessions_on_agent_rows_and_none_on_the_others(tmp_path: Path) -> None:
    """Session counts are whole numbers only agent rows have (a column of integers with gaps)."""
    records = [
        make_record(
            record_id=f"r{index}",
            target=f"vllm/m/{conversation}",
            conversation=conversation,
            kind=kind,
            conversation_id=f"c{index}",
            wall_start=START_WALL + index * 0.01,
        )
        for index, (conversation, kind) in enumerate((("chat", "short-baseline"), ("agent", "agentic")))
    ]
    table = display_tiers(summarize(load_run(write_results_folder(tmp_path, records)))).set_index(
        "conversation"
    )
    assert table.loc["agent", "sessions"] == "1"
    assert table.loc["chat", "sessions"] == table.loc["chat", "failed sessions"] == MISSING

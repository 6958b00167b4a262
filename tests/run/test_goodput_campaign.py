"""Goodput in a real headless Locust campaign: a simulated engine with one running slot (its knee: a
second developer already queues behind the first), two conversations, the scenario's per-request TTFT
limit and a conversation's own looser one. Every record carries slo_met as the run judged it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from grill_locust.report import load_run, summarize
from grill_locust.report.capacity import capacity_at_slo, conversation_slos_of_run, slo_of_run
from tests.run.conftest import only_run_dir, run_locust, write_scenario

pytestmark = pytest.mark.slow

TTFT_LIMIT_S = 0.25  # alone: a few engine steps (~20 ms); behind another developer's answer: ~0.3 s more
PATIENT_TTFT_LIMIT_S = 5.0  # the patient conversation's own limit
TPOT_LIMIT_MS = 500.0
MAX_TOKENS = 24
TIERS = [1, 4]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, Path]:
    tmp_path = tmp_path_factory.mktemp("goodput")
    data: dict[str, Any] = {
        "name": "goodput",
        "backends": [{"name": "sim", "engine": "sim", "profile": "vllm", "sim_args": {"max_num_seqs": 1}}],
        "models": [{"name": "grill-sim", "max_tokens": MAX_TOKENS, "ignore_eos": True}],
        "conversations": [
            {"name": "hasty", "kind": "unique-prompts", "prompt_tokens": 40},
            {
                "name": "patient",
                "kind": "unique-prompts",
                "prompt_tokens": 40,
                "slo": {"ttft_s": PATIENT_TTFT_LIMIT_S},
            },
        ],
        "targets": [
            {"name": "hasty", "backend": "sim", "conversation": "hasty"},
            {"name": "patient", "backend": "sim", "conversation": "patient"},
        ],
        "load": {"tiers": TIERS, "iterations": 2, "pause_s": 0.2, "think_time_s": 0.0, "engine_wait_s": 0},
        "slo": {"ttft_s": TTFT_LIMIT_S, "tpot_ms": TPOT_LIMIT_MS, "percentile": 90},
    }
    scenario = write_scenario(tmp_path / "s.yaml", data)
    done = run_locust(["--scenario", str(scenario), "--results-dir", str(tmp_path / "results")], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "results")
    return pd.read_parquet(run_dir / "records.parquet"), run_dir


def test_each_record_carries_slo_met_by_its_conversation_s_limits(
    campaign: tuple[pd.DataFrame, Path],
) -> None:
    records, _ = campaign
    assert (records["status"] == "ok").all() and len(records) == 2 * 2 * sum(TIERS)
    limit = records["conversation"].map({"hasty": TTFT_LIMIT_S, "patient": PATIENT_TTFT_LIMIT_S})
    within = (records["ttft_s"] <= limit) & (records["tpot_s"] <= TPOT_LIMIT_MS / 1000.0)
    assert records["slo_met"].tolist() == within.tolist()
    hasty = records[records["conversation"] == "hasty"]
    # the knee: alone, a developer meets the limit; four of them queue behind each other's answers
    assert hasty[hasty["tier_users"] == 1]["slo_met"].all()
    assert not hasty[hasty["tier_users"] == 4]["slo_met"].all()
    assert records[records["conversation"] == "patient"]["slo_met"].all()


def test_the_summary_s_goodput_is_the_records_and_capacity_is_at_the_knee(
    campaign: tuple[pd.DataFrame, Path],
) -> None:
    records, run_dir = campaign
    run = load_run(run_dir)
    summary = summarize(run)
    for row in summary.itertuples():
        tier = records[(records["target"] == row.target) & (records["tier_index"] == row.tier_index)]
        met = tier[tier["slo_met"]]
        assert row.slo_attainment == pytest.approx(len(met) / len(tier))
        assert row.goodput_rps == pytest.approx(len(met) / row.span_s)
        assert row.goodput_tokens_per_s == pytest.approx(met["output_tokens"].sum() / row.span_s)
    slo = slo_of_run(run.meta)
    capacity = capacity_at_slo(summary, slo, conversation_slos_of_run(run.meta, slo)).set_index(
        "conversation"
    )
    assert capacity.loc["hasty", "max_users_meeting_slo"] == 1
    assert capacity.loc["hasty", "binding_metric"] == "ttft_p90_s"
    assert capacity.loc["patient", "max_users_meeting_slo"] == 4

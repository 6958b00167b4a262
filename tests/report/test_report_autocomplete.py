"""Autocomplete tiers in the report: `abandoned` is neither a success nor a failure, and the summary,
tables, HTML and figures carry abandoned %, shown-in-budget %, completions' latencies and wasted work."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from grill_locust.config import Slo
from grill_locust.record import STATUS_ABANDONED, STATUS_OK
from grill_locust.report import format_table, load_run, summarize
from grill_locust.report.build import LabelledRun, assemble
from grill_locust.report.figures import write_figures
from grill_locust.report.html import render_html
from grill_locust.workload.kinds import KIND_AUTOCOMPLETE
from tests.synthetic import (
    AUTOCOMPLETE_CONVERSATION,
    START_WALL,
    make_record,
    synthetic_autocomplete_records,
    synthetic_records,
    write_results_folder,
)

TARGET = f"sim/grill-sim/{AUTOCOMPLETE_CONVERSATION}"
BUDGET_MS = 400
CONFIG_YAML = f"conversations:\n  - name: {AUTOCOMPLETE_CONVERSATION}\n    kind: autocomplete\n    budget_ms: {BUDGET_MS}\n"


def typed(record_id: str, status: str, ttft_s: float | None, e2e_s: float, **values) -> dict:
    return make_record(
        record_id=record_id,
        target=TARGET,
        conversation=AUTOCOMPLETE_CONVERSATION,
        kind=KIND_AUTOCOMPLETE,
        status=status,
        ttft_s=ttft_s,
        ttfo_s=ttft_s,
        e2e_s=e2e_s,
        wall_start=START_WALL + len(record_id),
        **values,
    )


def one_tier(tmp_path: Path) -> pd.Series:
    """4 completed (3 shown in budget), 5 abandoned (slow ones: their TTFTs would lift any percentile they
    entered), 1 failure: of 10 requests."""
    records = [
        typed(f"ok{i}", STATUS_OK, 0.1 * i, 0.2 * i, output_tokens=20, shown_in_budget=i < 4)
        for i in range(1, 5)
    ]
    received = [0, 3, 5, 7, 11]
    records += [
        typed(
            f"ab{i}",
            STATUS_ABANDONED,
            9.0 if tokens else None,
            9.5,
            output_tokens=tokens,
            shown_in_budget=None,
            finish_reason=None,
        )
        for i, tokens in enumerate(received)
    ]
    records.append(typed("bad", "http_500", None, 0.05, output_tokens=0, http_status=500, error="boom"))
    folder = write_results_folder(tmp_path / "run", records)
    (folder / "config.yaml").write_text(CONFIG_YAML)
    summary = summarize(load_run(folder))
    assert len(summary) == 1
    return summary.iloc[0]


def test_abandoned_requests_count_as_requests_but_neither_success_nor_failure(tmp_path: Path) -> None:
    tier = one_tier(tmp_path)
    assert tier["requests"] == 10 and tier["ok_requests"] == 4 and tier["abandoned"] == 5
    assert tier["success_rate"] == pytest.approx(4 / 5)  # 4 ok of the 5 that were not abandoned
    assert "no successful requests" not in tier["flags"]


def test_latency_percentiles_are_of_completed_requests_only(tmp_path: Path) -> None:
    tier = one_tier(tmp_path)
    ttfts = [0.1, 0.2, 0.3, 0.4]
    for q in (50, 90, 99):
        assert tier[f"ttft_p{q}_s"] == pytest.approx(np.percentile(ttfts, q))
        assert tier[f"e2e_p{q}_s"] == pytest.approx(np.percentile([2 * t for t in ttfts], q))


def test_abandoned_and_shown_in_budget_are_percent_of_all_autocomplete_requests(tmp_path: Path) -> None:
    tier = one_tier(tmp_path)
    assert tier["abandoned_pct"] == pytest.approx(50.0)
    assert tier["shown_in_budget_pct"] == pytest.approx(30.0)
    assert tier["abandoned_output_tokens"] == 0 + 3 + 5 + 7 + 11  # what the client got before its cancels
    assert tier["budget_ms"] == BUDGET_MS  # the conversation's, from config.yaml


def test_tiers_of_other_kinds_have_no_autocomplete_figures_and_keep_their_success_rate(
    tmp_path: Path,
) -> None:
    records = synthetic_records(200, backends=("vllm",), tiers=(1, 4), conversations=("short-baseline",))
    records.loc[records.index[:5], ["status", "error"]] = ["http_503", "service unavailable"]
    summary = summarize(load_run(write_results_folder(tmp_path / "other", records)))
    for column in (
        "abandoned",
        "abandoned_pct",
        "shown_in_budget_pct",
        "abandoned_output_tokens",
        "budget_ms",
    ):
        assert summary[column].isna().all(), column
    ok = records["status"] == STATUS_OK
    expected = ok.groupby(records["tier_index"]).mean().to_numpy()
    assert summary["success_rate"].to_numpy() == pytest.approx(expected)
    assert "abandoned" not in format_table(summary)


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, pd.DataFrame, Path]:
    records = synthetic_autocomplete_records(tiers=(1, 4, 16), requests_per_user=10)
    folder = write_results_folder(tmp_path_factory.mktemp("autocomplete") / "run", records)
    (folder / "config.yaml").write_text(CONFIG_YAML)
    return records, summarize(load_run(folder)), folder


def test_synthetic_tiers_match_the_records_counted_by_hand(synthetic_run) -> None:
    records, summary, _ = synthetic_run
    assert set(records["status"]) >= {STATUS_OK, STATUS_ABANDONED}
    for row in summary.itertuples():
        mine = records[(records["target"] == row.target) & (records["tier_index"] == row.tier_index)]
        abandoned = mine[mine["status"] == STATUS_ABANDONED]
        completed = mine[mine["status"] == STATUS_OK]
        assert row.requests == len(mine)
        assert row.abandoned_pct == pytest.approx(100 * len(abandoned) / len(mine))
        assert row.shown_in_budget_pct == pytest.approx(
            100 * sum(shown is True for shown in mine["shown_in_budget"]) / len(mine)
        )
        assert row.abandoned_output_tokens == abandoned["output_tokens"].sum()
        if len(completed):
            assert row.ttft_p90_s == pytest.approx(np.percentile(completed["ttft_s"], 90))
        else:
            assert np.isnan(row.ttft_p90_s)


def test_autocomplete_turns_are_no_multi_turn_conversation(synthetic_run) -> None:
    _, summary, folder = synthetic_run
    assert summary["turns"].isna().all() and summary["context_growth"].isna().all()
    report = assemble([LabelledRun("a", load_run(folder))], Slo(), compare=False)
    assert not len(report.turns)


def test_table_html_and_figure_show_the_autocomplete_columns(synthetic_run, tmp_path: Path) -> None:
    _, summary, folder = synthetic_run
    text = format_table(summary)
    assert "abandoned %" in text and "shown in budget %" in text
    report = assemble([LabelledRun("a", load_run(folder))], Slo(), compare=False)
    figures = write_figures(report.summary, tmp_path / "figures")
    autocomplete = [f for f in figures if f.path.name == f"autocomplete-{AUTOCOMPLETE_CONVERSATION}.png"]
    assert len(autocomplete) == 1 and autocomplete[0].path.stat().st_size > 0
    html = render_html(report, figures)
    assert "abandoned tokens (client)" in html and "Shown in budget %" in html

"""Bootstrap intervals over conversations, and `grill compare`'s verdict, on synthetic records."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from grill_locust.report.aggregate import summarize_all, summarize_run
from grill_locust.report.build import assemble, load_runs
from grill_locust.report.capacity import slo_of_run
from grill_locust.report.cli import print_tables, print_verdicts
from grill_locust.report.confidence import (
    FIGURES,
    NO_SIGNIFICANT_DIFFERENCE,
    _multinomial_weights,
    _SortedColumn,
    resample_tier,
)
from grill_locust.report.load import load_run
from grill_locust.report.write import write_report
from tests.synthetic import ENGINE_SHAPES, make_record, synthetic_records, write_results_folder

TURNS = 3


def exponential_tier(conversations: int, seed: int) -> pd.DataFrame:
    """One tier of `conversations` x TURNS requests whose TTFT is exponential with mean 1 s: its
    true median is ln 2, its p90 ln 10."""
    rng = np.random.default_rng(seed)
    n = conversations * TURNS
    return pd.DataFrame(
        {
            "conversation": np.repeat(np.arange(conversations), TURNS),
            "ok": True,
            "cancelled": False,
            "abandoned": False,
            "autocomplete": False,
            "shown_in_budget": False,
            "output_tokens": rng.integers(50, 150, n).astype(float),
            "reasoning_tokens": 0.0,
            "prompt_tokens": 400.0,
            "cached_tokens": np.nan,
            "slo_met": np.nan,  # no per-request SLO
            **{
                column: rng.exponential(1.0, n)
                for column in ("ttft_s", "ttfo_s", "tpot_s", "itl_mean_s", "e2e_s", "tokens_per_s")
            },
            "visible_tokens_per_s": np.nan,
        }
    )


def test_intervals_cover_the_true_percentiles_about_95_times_in_100() -> None:
    covered = {"ttft_p50_s": 0, "ttft_p90_s": 0}
    truth = {"ttft_p50_s": np.log(2.0), "ttft_p90_s": np.log(10.0)}
    trials = 40
    for trial in range(trials):
        resamples = resample_tier(exponential_tier(150, seed=trial), span_s=60.0, seed=trial)
        assert resamples is not None
        for figure in covered:
            low, high = np.percentile(resamples.figures[figure], [2.5, 97.5])
            covered[figure] += int(low <= truth[figure] <= high)
    # 95 % nominal: 40 trials cover 38 on average; fewer than 34 would be 1 chance in ~100
    assert min(covered.values()) >= 34, covered


def test_intervals_narrow_with_more_conversations() -> None:
    def width(conversations: int) -> float:
        resamples = resample_tier(exponential_tier(conversations, seed=1), span_s=60.0, seed=1)
        assert resamples is not None
        low, high = np.percentile(resamples.figures["ttft_p50_s"], [2.5, 97.5])
        return float(high - low)

    # 16 times the conversations: a quarter of the width, give or take the draw
    assert width(800) < 0.4 * width(50)


def test_resampled_percentiles_are_numpys_of_the_resampled_requests() -> None:
    """The windowed search gives each resample's exact percentile: numpy's of its requests repeated as
    drawn, ties, a resample far outside the window (all of the fastest or slowest unit) and an empty
    one included."""
    rng = np.random.default_rng(5)
    units = 400
    codes = rng.integers(0, units, 3000)
    values = np.round(rng.exponential(1.0, len(codes)), 2)  # rounded: many ties
    weights = _multinomial_weights(rng, 300, units)
    weights[:, :3] = 0.0
    weights[codes[np.argmin(values)], 0] = units  # only the unit holding the fastest request
    weights[codes[np.argmax(values)], 1] = units
    quantiles = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}
    column = _SortedColumn.of(values, codes, units, quantiles)
    totals = np.vstack(column.per_unit_rows()).astype("float32") @ weights
    found = column.resampled_quantiles(weights, totals)
    for b in range(weights.shape[1]):
        drawn = np.repeat(values, weights[codes, b].astype(int))
        for q, resampled in zip(quantiles.values(), found, strict=True):
            expected = np.percentile(drawn, 100.0 * q) if len(drawn) else np.nan
            assert resampled[b] == pytest.approx(expected, rel=1e-12, abs=1e-12, nan_ok=True), (b, q)


def test_summary_has_an_interval_beside_each_figure_holding_the_figure(tmp_path: Path) -> None:
    run_dir = write_results_folder(tmp_path / "run", synthetic_records(4000, tiers=(1, 5)))
    summary = summarize_run(run_dir)
    written = pd.read_csv(run_dir / "summary.csv")
    columns = list(written.columns)
    assert columns.index("ttft_p50_s_lo") == columns.index("ttft_p50_s") + 1
    assert columns.index("ttft_p50_s_hi") == columns.index("ttft_p50_s") + 2
    for figure in ("ttft_p50_s", "e2e_p50_s", "output_tokens_per_s", "success_rate", "cached_token_ratio"):
        assert (summary[f"{figure}_lo"] <= summary[figure] + 1e-12).all(), figure
        assert (summary[figure] <= summary[f"{figure}_hi"] + 1e-12).all(), figure
        assert (summary[f"{figure}_hi"] > summary[f"{figure}_lo"]).any(), figure
    again = summarize_run(run_dir, write=False)
    pd.testing.assert_frame_equal(summary, again)  # a fixed seed: the same intervals every time


def test_p95_and_goodput_have_intervals_holding_them(tmp_path: Path) -> None:
    from grill_locust.config import Slo

    run = load_run(write_results_folder(tmp_path / "run", synthetic_records(4000, tiers=(1, 5))))
    limit_s = float(run.records["ttft_s"].median())  # about half the requests meet it
    summary = summarize_all(run, Slo(ttft_s=limit_s)).summary
    for figure in ("ttft_p95_s", "slo_attainment", "goodput_rps", "goodput_tokens_per_s"):
        assert summary[figure].notna().all(), figure
        assert (summary[f"{figure}_lo"] <= summary[figure] + 1e-12).all(), figure
        assert (summary[figure] <= summary[f"{figure}_hi"] + 1e-12).all(), figure
        assert (summary[f"{figure}_hi"] > summary[f"{figure}_lo"]).any(), (
            figure
        )  # all met, or none: no spread


def test_a_tier_of_one_conversation_has_no_interval(tmp_path: Path) -> None:
    records = [
        make_record(conversation_id="c0", turn=turn, ttft_s=0.1 * (turn + 1), wall_start=1000.0 + turn)
        for turn in range(4)
    ]
    summary = summarize_run(write_results_folder(tmp_path / "run", records), write=False)
    assert summary.loc[0, "ttft_p50_s"] > 0
    assert summary[[f"{f}_{end}" for f in FIGURES for end in ("lo", "hi")]].isna().all(axis=None)


def compared(tmp_path: Path, other_ttft_factor: float, other_seed: int, capsys: pytest.CaptureFixture[str]):
    """Two synthetic runs of one engine at 5 and 10 users, the second's TTFT scaled; their report."""
    shape = ENGINE_SHAPES["vllm"]
    slower = replace(
        shape,
        ttft_base_s=shape.ttft_base_s * other_ttft_factor,
        ttft_per_user_s=shape.ttft_per_user_s * other_ttft_factor,
    )
    folders = []
    for name, engine_shape, seed in (("a", shape, 0), ("b", slower, other_seed)):
        records = synthetic_records(
            3000,
            backends=("vllm",),
            conversations=("short-baseline",),
            tiers=(5, 10),
            seed=seed,
            run_id=name,
            shapes={"vllm": engine_shape},
        )
        folders.append((name, write_results_folder(tmp_path / name, records)))
    runs = load_runs(folders)
    report = assemble(runs, slo_of_run(runs[0].run.meta), compare=True)
    print_tables(report)
    return report, capsys.readouterr().out


def test_compare_names_a_real_30_percent_ttft_difference(tmp_path: Path, capsys) -> None:
    report, printed = compared(tmp_path, other_ttft_factor=1.3, other_seed=1, capsys=capsys)
    ttft = report.comparisons[report.comparisons["figure"] == "ttft_p50_s"]
    assert list(ttft["tier"]) == ["5 users", "10 users"]
    assert ttft["significant"].all()
    assert ((ttft["change_pct"] > 25) & (ttft["change_pct"] < 35)).all()
    assert (ttft["change_lo_pct"] > 0).all()
    assert len(report.verdicts) == 2 and not (report.verdicts["verdict"] == NO_SIGNIFICANT_DIFFERENCE).any()
    assert "TTFT p50 +3" in printed and NO_SIGNIFICANT_DIFFERENCE not in printed
    written = write_report(report, tmp_path / "out")
    html = next(p for p in written if p.name == "report.html").read_text()
    assert "Differences between runs" in html and "TTFT p50 +3" in html


def test_compare_of_two_draws_of_one_engine_finds_no_significant_difference(tmp_path: Path, capsys) -> None:
    report, printed = compared(tmp_path, other_ttft_factor=1.0, other_seed=1, capsys=capsys)
    assert len(report.comparisons) == 2 * 5  # two tiers x the five headline figures
    assert list(report.verdicts["verdict"]) == [NO_SIGNIFICANT_DIFFERENCE] * 2
    assert printed.count(NO_SIGNIFICANT_DIFFERENCE) == 2


def test_a_tiers_repeats_are_one_row_with_their_spans_added(tmp_path: Path) -> None:
    records = synthetic_records(2000, backends=("vllm",), conversations=("short-baseline",), tiers=(4,))
    second = records.assign(
        repeat=1,
        wall_start=records["wall_start"] + 1000.0,
        conversation_id="r1-" + records["conversation_id"],
        record_id="r1-" + records["record_id"],
    )
    both = pd.concat([records, second], ignore_index=True)
    once = summarize_all(load_run(write_results_folder(tmp_path / "once", records))).summary
    twice = summarize_all(load_run(write_results_folder(tmp_path / "twice", both))).summary
    assert len(twice) == 1 and twice.loc[0, "requests"] == 2 * once.loc[0, "requests"]
    assert twice.loc[0, "span_s"] == pytest.approx(2 * once.loc[0, "span_s"])
    assert twice.loc[0, "output_tokens_per_s"] == pytest.approx(once.loc[0, "output_tokens_per_s"])
    once_width = once.loc[0, "ttft_p50_s_hi"] - once.loc[0, "ttft_p50_s_lo"]
    twice_width = twice.loc[0, "ttft_p50_s_hi"] - twice.loc[0, "ttft_p50_s_lo"]
    assert twice_width < once_width  # twice the conversations, resampled across both repeats


def correlated_tier(conversations: int, turns: int, seed: int, shared: bool = True) -> pd.DataFrame:
    """A tier whose conversations each have their own latency and length (a conversation-level effect
    that all its turns share, ten times the turns' own noise): its turns are not independent. TTFT's and
    output length's true means (and TTFT's true median) are 1 s and 100 tokens. `shared=False` labels
    every request a conversation of its own: what resampling requests would see."""
    rng = np.random.default_rng(seed)
    n = conversations * turns
    offset = np.repeat(rng.normal(0.0, 1.0, conversations), turns)  # the conversation's own
    noise = rng.normal(0.0, 0.1, n)
    ttft = 1.0 + 0.2 * (offset + noise)
    frame = exponential_tier(conversations, seed)  # the other columns, the same shape
    frame = frame.iloc[np.repeat(np.arange(conversations), turns)].reset_index(drop=True)
    frame["conversation"] = np.repeat(np.arange(conversations), turns) if shared else np.arange(n)
    frame["ttft_s"] = ttft
    frame["output_tokens"] = 100.0 + 20.0 * (offset + noise)
    return frame


def test_intervals_resample_conversations_so_correlated_turns_widen_them() -> None:
    """Turns of one conversation move together: an interval over resampled requests would be about a
    third as wide as the spread of the figure across datasets and miss the truth most of the time; over
    resampled conversations it covers it about 95 times in 100."""
    truth = {"ttft_p50_s": 1.0, "output_tokens_mean": 100.0}
    trials, conversations, turns = 40, 30, 10
    covered = dict.fromkeys(truth, 0)
    covered_per_request = dict.fromkeys(truth, 0)
    widths, widths_per_request = [], []
    for trial in range(trials):
        for shared, hits, width in (
            (True, covered, widths),
            (False, covered_per_request, widths_per_request),
        ):
            tier = correlated_tier(conversations, turns, seed=trial, shared=shared)
            resamples = resample_tier(tier, span_s=60.0, seed=trial, resamples=400)
            assert resamples is not None
            for figure, true_value in truth.items():
                low, high = np.percentile(resamples.figures[figure], [2.5, 97.5])
                hits[figure] += int(low <= true_value <= high)
            low, high = np.percentile(resamples.figures["output_tokens_mean"], [2.5, 97.5])
            width.append(high - low)
    # the data has the effect: requests taken apart give intervals far too narrow, which miss the truth
    assert np.median(widths) > 2.5 * np.median(widths_per_request)
    assert max(covered_per_request.values()) <= 28, covered_per_request
    # 95 % nominal over 30 conversations: 40 trials cover ~37; fewer than 33 would be 1 chance in ~100
    assert min(covered.values()) >= 33, covered


def two_runs(
    tmp_path: Path,
    edit_other=lambda records: records,
    other_tiers: tuple[int, ...] = (5, 10),
    fixed_length: bool = False,
):
    """Two synthetic runs of one engine and workload at 5 and 10 users (the second a different draw, at
    `other_tiers`, its records changed by `edit_other`); `fixed_length`: every request the same output
    length. Their comparison."""
    folders = []
    for name, seed, tiers in (("a", 0, (5, 10)), ("b", 1, other_tiers)):
        records = synthetic_records(
            2000, backends=("vllm",), conversations=("short-baseline",), tiers=tiers, seed=seed, run_id=name
        )
        if fixed_length:
            records["output_tokens"] = 100
        if name == "b":
            records = edit_other(records)
        folders.append((name, write_results_folder(tmp_path / name, records)))
    runs = load_runs(folders)
    return assemble(runs, slo_of_run(runs[0].run.meta), compare=True)


def test_a_figure_with_no_spread_in_its_resamples_is_not_called_different(tmp_path: Path) -> None:
    """Every request of both runs the same length: every resample has the same tokens, so system tok/s
    differs only by the two spans, one measurement each, which no interval measures."""
    report = two_runs(tmp_path, fixed_length=True)
    throughput = report.comparisons[report.comparisons["figure"] == "output_tokens_per_s"]
    assert len(throughput) == 2 and (throughput["change_pct"] != 0).all()
    assert (throughput["change_lo_pct"] == throughput["change_hi_pct"]).all()  # no spread
    assert not throughput["significant"].any()
    assert not report.verdicts["verdict"].str.contains("system tok/s [+-]", regex=True).any()
    assert report.verdicts["verdict"].str.contains("system tok/s not judged").all()


def test_success_rate_is_judged_with_its_interval(tmp_path: Path, capsys) -> None:
    def all_failed(records: pd.DataFrame) -> pd.DataFrame:
        return records.assign(status="http_500", ttft_s=np.nan, ttfo_s=np.nan, output_tokens=0)

    report = two_runs(tmp_path, edit_other=all_failed)
    success = report.comparisons[report.comparisons["figure"] == "success_rate"]
    assert list(success["tier"]) == ["5 users", "10 users"] and success["significant"].all()
    assert list(success["baseline_value"]) == [1.0, 1.0] and list(success["value"]) == [0.0, 0.0]
    assert (
        report.verdicts["verdict"]
        .str.contains("success rate 100 % -> 0 % (-100 pts [-100, -100])", regex=False)
        .all()
    )
    print_verdicts(report)
    assert "success rate 100 % -> 0 % (-100 pts [-100, -100])" in capsys.readouterr().out


def test_runs_with_no_tier_in_common_say_so(tmp_path: Path, capsys) -> None:
    report = two_runs(tmp_path, other_tiers=(20,))
    assert not len(report.comparisons)
    print_verdicts(report)
    printed = capsys.readouterr().out
    # `grill compare` says it and exits 1: a script gating on the verdict must not read "nothing" as "same"
    from tests.report.test_report_cli import grill

    assert (
        grill("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "table", "--no-progress") == 1
    )
    assert "b: no tier in common with a" in capsys.readouterr().out
    assert (
        printed.strip()
        == "b: no tier in common with a (a ran 5 users, 10 users; b ran 20 users): nothing compared"
    )

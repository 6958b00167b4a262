"""Goodput: each request judged by its conversation's per-request SLO (slo_met), the tier's attainment
and goodput, and capacity at a percentile of the limited metrics or at an attainment floor."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from grill_locust.cli import main
from grill_locust.config import Slo
from grill_locust.errors import GrillError
from grill_locust.record import CANCELLED, STATUS_ABANDONED, STATUS_OK, STATUS_STREAM_CUT
from grill_locust.report import load_run, summarize
from grill_locust.report.capacity import capacity_at_slo, conversation_slos_of_run, slo_of_run
from grill_locust.scenario import parse_scenario
from grill_locust.workload.kinds import KIND_AUTOCOMPLETE
from tests.synthetic import START_WALL, make_record, write_results_folder

LIMITS = Slo(ttft_s=1.0, tpot_ms=50.0, e2e_s=10.0)


@pytest.mark.parametrize(
    ("ttft_s", "tpot_s", "e2e_s", "met"),
    [
        (1.0, 0.05, 10.0, True),  # each exactly at its limit
        (math.nextafter(1.0, 2.0), 0.05, 10.0, False),
        (1.0, math.nextafter(0.05, 1.0), 10.0, False),
        (1.0, 0.05, math.nextafter(10.0, 11.0), False),
        (0.2, None, 0.3, True),  # one output token: no TPOT, judged by TTFT and E2E
        (0.2, math.nan, 0.3, True),  # as a results folder reads it
        (2.0, None, 2.5, False),
    ],
)
def test_a_request_meets_the_slo_when_it_is_within_every_limit(
    ttft_s: float, tpot_s: float | None, e2e_s: float, met: bool
) -> None:
    assert LIMITS.judge(STATUS_OK, ttft_s, tpot_s, e2e_s) is met


def test_a_failed_request_misses_and_an_abandoned_or_unlimited_one_is_not_judged() -> None:
    assert LIMITS.judge("http_503", 0.1, 0.01, 0.2) is False
    assert LIMITS.judge(STATUS_STREAM_CUT, 0.1, 0.01, 0.2) is False
    assert LIMITS.judge(STATUS_ABANDONED, 0.1, 0.01, 0.2) is None
    assert Slo().judge(STATUS_OK, 0.1, 0.01, 0.2) is None
    assert Slo(ttft_s=0.5).judge(STATUS_OK, 0.4, 9.0, 99.0) is True  # only the limits given count


def test_per_request_limits_replace_the_default_p50_bounds_and_keep_written_ones() -> None:
    assert Slo().latency_bounds() == {"ttft_p50_s": 2.0, "e2e_p50_s": 10.0}
    assert Slo(ttft_s=1.0, percentile=90).latency_bounds() == {}
    assert Slo(ttft_s=1.0, e2e_p90_s=8.0).latency_bounds() == {"e2e_p90_s": 8.0}
    assert Slo(ttft_s=1.0).limit_percentile() == 50  # limits alone: the median
    assert Slo(ttft_s=1.0, attainment=0.9).limit_percentile() is None
    assert Slo(ttft_s=1.0, attainment=0.9, percentile=99).limit_percentile() == 99
    assert Slo(ttft_s=1.0, tpot_ms=40, percentile=90, attainment=0.95).describe() == (
        "per request TTFT <= 1 s, TPOT <= 40 ms (at p90 and for >= 95 % of requests), success >= 99 %"
    )


def test_a_conversation_s_limit_wins_over_the_scenario_s_limit_by_limit() -> None:
    scenario = parse_scenario(
        {
            "backends": [{"name": "a", "engine": "vllm", "url": "http://h:1"}],
            "models": [{"name": "m"}],
            "conversations": [
                {"name": "chat", "kind": "multi-turn", "slo": {"ttft_s": 3, "attainment": 0.9}}
            ],
            "targets": [{"conversation": "chat"}, {"conversation": "short-baseline"}],
            "slo": {"ttft_s": 0.5, "tpot_ms": 40, "percentile": 90},
        },
        "inline",
    )
    chat = scenario.slo_of("chat")
    assert (chat.ttft_s, chat.tpot_ms, chat.percentile, chat.attainment) == (3.0, 40.0, 90, 0.9)
    assert scenario.slo_of("short-baseline") == scenario.slo
    assert chat.judge(STATUS_OK, 2.0, 0.03, 5.0) is True
    assert scenario.slo_of("short-baseline").judge(STATUS_OK, 2.0, 0.03, 5.0) is False
    # run.json keeps both: the report reads back the same SLOs
    meta = {"slo": scenario.slo.model_dump(), "conversation_slo": scenario.conversation_slos()}
    assert slo_of_run(meta) == scenario.slo
    assert conversation_slos_of_run(meta, slo_of_run(meta)) == {"chat": chat}


def test_flags_set_limits_and_bad_ones_name_the_flag() -> None:
    assert slo_of_run({}, ttft_s=1.0, percentile=90.0) == Slo(ttft_s=1.0, percentile=90)
    with pytest.raises(GrillError, match=r"^--slo-attainment: expected a value <= 1"):
        slo_of_run({}, ttft_s=1.0, attainment=95.0)
    with pytest.raises(GrillError, match=r"^--slo-percentile: expected 50, 90, 95 or 99"):
        slo_of_run({}, ttft_s=1.0, percentile=80.0)
    with pytest.raises(GrillError, match=r"^--slo-attainment: judges per-request limits, and none is given"):
        slo_of_run({}, attainment=0.9)
    with pytest.raises(GrillError, match=r"^--slo-tpot-ms: .* must be greater than 0"):
        slo_of_run({}, tpot_ms=0.0)
    with pytest.raises(GrillError, match=r"^slo\.percentile: expected 50, 90, 95 or 99"):
        slo_of_run({"slo": {"ttft_s": 1.0, "percentile": 42}})


def mixed_tier_records(seed: int) -> list[dict[str, Any]]:
    """Two tiers of short-baseline requests, random latencies around the limits, and in each a failed
    request, an abandoned autocomplete request and one our own stop cut."""
    rng = np.random.default_rng(seed)
    records = []
    for tier_index, users in enumerate((2, 6)):
        start = START_WALL + 1000.0 * tier_index
        for n in range(40):
            ttft = float(rng.uniform(0.2, 1.6))
            output_tokens = int(rng.integers(1, 60))
            tpot = float(rng.uniform(0.02, 0.07)) if output_tokens > 1 else math.nan
            e2e = ttft + (0.0 if math.isnan(tpot) else tpot * (output_tokens - 1))
            records.append(
                make_record(
                    record_id=f"{users}-{n}",
                    tier_index=tier_index,
                    tier_users=users,
                    wall_start=start + float(rng.uniform(0, 30)),
                    ttft_s=ttft,
                    tpot_s=tpot,
                    e2e_s=e2e,
                    output_tokens=output_tokens,
                )
            )
        broken = {"tier_index": tier_index, "tier_users": users, "wall_start": start + 5.0, "ttft_s": 0.1}
        records += [
            make_record(record_id=f"{users}-fail", status="http_500", output_tokens=0, e2e_s=0.2, **broken),
            make_record(
                record_id=f"{users}-cut", status=STATUS_STREAM_CUT, error=CANCELLED, e2e_s=0.5, **broken
            ),
            make_record(
                record_id=f"{users}-typed-on",
                status=STATUS_ABANDONED,
                kind=KIND_AUTOCOMPLETE,
                e2e_s=0.3,
                **broken,
            ),
        ]
    return records


def expected_goodput(
    records: list[dict[str, Any]], ttft_s: float, tpot_s: float
) -> dict[int, dict[str, float]]:
    """Attainment and goodput per tier, computed here from the records and the limits."""
    out = {}
    for tier_index in {r["tier_index"] for r in records}:
        tier = [r for r in records if r["tier_index"] == tier_index]
        span_s = max(r["wall_start"] + r["e2e_s"] for r in tier) - min(r["wall_start"] for r in tier)
        judged = [r for r in tier if r["status"] != STATUS_ABANDONED and r["error"] != CANCELLED]
        met = [
            r
            for r in judged
            if r["status"] == STATUS_OK
            and r["ttft_s"] <= ttft_s
            and (math.isnan(r["tpot_s"]) or r["tpot_s"] <= tpot_s)
        ]
        out[tier_index] = {
            "slo_attainment": len(met) / len(judged),
            "goodput_rps": len(met) / span_s,
            "goodput_tokens_per_s": sum(r["output_tokens"] for r in met) / span_s,
        }
    return out


def test_attainment_and_goodput_per_tier_match_the_records(tmp_path: Path) -> None:
    records = mixed_tier_records(seed=7)
    write_results_folder(tmp_path, records, meta={"slo": {"ttft_s": 1.0, "tpot_ms": 50.0}})
    summary = summarize(load_run(tmp_path)).set_index("tier_index")
    expected = expected_goodput(records, ttft_s=1.0, tpot_s=0.05)
    assert 0.2 < expected[0]["slo_attainment"] < 0.8  # the limits cut through the tier
    for tier_index, figures in expected.items():
        for column, value in figures.items():
            assert summary.loc[tier_index, column] == pytest.approx(value), (tier_index, column)


def test_the_report_judges_by_other_limits_when_asked_and_leaves_goodput_empty_without_any(
    tmp_path: Path,
) -> None:
    records = mixed_tier_records(seed=8)
    write_results_folder(tmp_path, records, meta={"slo": {"ttft_p50_s": 2.0}})
    run = load_run(tmp_path)
    unlimited = summarize(run)
    assert unlimited[["slo_attainment", "goodput_rps", "goodput_tokens_per_s"]].isna().all().all()
    judged = summarize(run, Slo(ttft_s=0.6, tpot_ms=30.0), {}).set_index("tier_index")
    for tier_index, figures in expected_goodput(records, ttft_s=0.6, tpot_s=0.03).items():
        assert judged.loc[tier_index, "slo_attainment"] == pytest.approx(figures["slo_attainment"])


def test_each_conversation_is_judged_by_its_own_limit(tmp_path: Path) -> None:
    records = [
        make_record(
            record_id=f"{conversation}-{n}", conversation=conversation, target=conversation, ttft_s=ttft
        )
        for conversation in ("chat", "short-baseline")
        for n, ttft in enumerate((0.3, 0.8, 1.5, 2.5))
    ]
    meta = {"slo": {"ttft_s": 0.5}, "conversation_slo": {"chat": {"ttft_s": 2.0}}}
    write_results_folder(tmp_path, records, meta=meta)
    summary = summarize(load_run(tmp_path)).set_index("conversation")
    assert summary.loc["chat", "slo_attainment"] == pytest.approx(3 / 4)
    assert summary.loc["short-baseline", "slo_attainment"] == pytest.approx(1 / 4)


# TTFTs spread evenly from 0.1 s to each tier's maximum: p90 and the share under 1 s are known
KNEE_TIERS = {1: 0.5, 2: 1.0, 4: 2.0, 8: 4.0}
KNEE_REQUESTS = 21


@pytest.fixture(scope="module")
def knee_summary(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, Path]:
    folder = tmp_path_factory.mktemp("knee")
    records = [
        make_record(
            record_id=f"{users}-{n}",
            tier_index=index,
            tier_users=users,
            wall_start=START_WALL + 100.0 * index + n,
            ttft_s=float(ttft),
            tpot_s=0.01 * users,
            e2e_s=float(ttft) + 1.0,
        )
        for index, (users, top) in enumerate(KNEE_TIERS.items())
        for n, ttft in enumerate(np.linspace(0.1, top, KNEE_REQUESTS))
    ]
    write_results_folder(folder, records, meta={"slo": {"ttft_s": 1.0}})
    return summarize(load_run(folder)), folder


def ttfts(users: int) -> np.ndarray:
    return np.linspace(0.1, KNEE_TIERS[users], KNEE_REQUESTS)


def test_capacity_at_p90_interpolates_on_the_ttft_p90(knee_summary: tuple[pd.DataFrame, Path]) -> None:
    summary, _ = knee_summary
    slo = Slo(ttft_s=1.0, percentile=90)
    low, high = np.percentile(ttfts(2), 90), np.percentile(ttfts(4), 90)
    row = capacity_at_slo(summary, slo).iloc[0]
    assert (row["max_users_meeting_slo"], row["first_failing_users"]) == (2, 4)
    assert row["binding_metric"] == "ttft_p90_s"
    assert row["estimated_users"] == pytest.approx(2 + (1.0 - low) / (high - low) * 2)


def test_capacity_at_p95_on_tpot(knee_summary: tuple[pd.DataFrame, Path]) -> None:
    summary, _ = knee_summary
    row = capacity_at_slo(summary, Slo(tpot_ms=30.0, percentile=95)).iloc[0]
    # TPOT is 10 ms per user in every request of a tier: p95 = 10 ms x users
    assert (row["max_users_meeting_slo"], row["binding_metric"]) == (2, "tpot_p95_s")
    assert row["estimated_users"] == pytest.approx(2 + (0.03 - 0.02) / (0.04 - 0.02) * 2)


def test_capacity_at_an_attainment_floor_binds_on_the_share(knee_summary: tuple[pd.DataFrame, Path]) -> None:
    summary, _ = knee_summary
    shares = {users: float(np.mean(ttfts(users) <= 1.0)) for users in KNEE_TIERS}
    assert shares[1] == shares[2] == 1.0 and shares[4] < 0.8
    row = capacity_at_slo(summary, Slo(ttft_s=1.0, attainment=0.8)).iloc[0]
    assert (row["max_users_meeting_slo"], row["binding_metric"]) == (2, "slo_attainment")
    assert row["estimated_users"] == pytest.approx(2 + (1.0 - 0.8) / (1.0 - shares[4]) * 2)
    # both: the p90 crosses its limit before the share falls under 80 %
    both = capacity_at_slo(summary, Slo(ttft_s=1.0, percentile=90, attainment=0.8)).iloc[0]
    assert both["binding_metric"] == "ttft_p90_s" and both["estimated_users"] < row["estimated_users"]


def test_grill_report_takes_the_limits_from_flags(
    knee_summary: tuple[pd.DataFrame, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, folder = knee_summary
    assert (
        main(
            ["report", str(folder), "--format", "table", "--slo-percentile", "90", "--slo-attainment", "0.8"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "SLO: per request TTFT <= 1 s (at p90 and for >= 80 % of requests), success >= 99 %" in out
    assert "SLO met %" in out and "TTFT p90" in out
    assert main(["report", str(folder), "--format", "table", "--slo-percentile", "80"]) == 2
    assert "--slo-percentile: expected 50, 90, 95 or 99, got 80" in capsys.readouterr().err

"""Capacity at an SLO: largest passing tier, interpolated estimate, binding metric, recommendations."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from grill_locust.config import Slo
from grill_locust.errors import GrillError
from grill_locust.report import load_run, summarize
from grill_locust.report.capacity import capacity_at_slo, recommendations, slo_of_run
from tests.synthetic import make_record, write_results_folder

DEFAULT_SLO = Slo()


def tiers(series: str, conversation: str, rows: list[tuple[int, float, float, float]]) -> pd.DataFrame:
    """(users, ttft_p50_s, e2e_p50_s, success_rate) per tier."""
    return pd.DataFrame(
        [
            {
                "series": series,
                "conversation": conversation,
                "tier_index": index,
                "tier_users": users,
                "requests": 100,
                "ttft_p50_s": ttft,
                "e2e_p50_s": e2e,
                "success_rate": success,
                "saturated": False,
                "complete": True,
            }
            for index, (users, ttft, e2e, success) in enumerate(rows)
        ]
    )


def test_estimate_interpolates_linearly_on_the_binding_metric():
    summary = tiers(
        "vllm", "multi-turn-session", [(1, 0.5, 3, 1), (5, 1.0, 4, 1), (10, 1.5, 5, 1), (20, 3.0, 6, 1)]
    )
    row = capacity_at_slo(summary, DEFAULT_SLO).iloc[0]
    assert row["max_users_meeting_slo"] == 10
    assert row["first_failing_users"] == 20
    assert row["binding_metric"] == "ttft_p50_s"
    assert row["estimated_users"] == pytest.approx(10 + (2.0 - 1.5) / (3.0 - 1.5) * 10)


def test_the_metric_that_crosses_first_binds():
    # at 20 users TTFT crosses 2 s at 13.3 users, success crosses 99 % at 12 users
    summary = tiers("vllm", "shared-prefix", [(10, 1.5, 5, 1.0), (20, 3.0, 6, 0.95)])
    row = capacity_at_slo(summary, DEFAULT_SLO).iloc[0]
    assert row["binding_metric"] == "success_rate"
    assert row["estimated_users"] == pytest.approx(10 + (1.0 - 0.99) / (1.0 - 0.95) * 10)


def test_e2e_binds_when_ttft_holds():
    summary = tiers("sglang", "unique-prompts", [(50, 1.0, 8.0, 1.0), (100, 1.2, 12.0, 1.0)])
    row = capacity_at_slo(summary, DEFAULT_SLO).iloc[0]
    assert row["binding_metric"] == "e2e_p50_s"
    assert row["estimated_users"] == pytest.approx(75.0)


def test_meeting_every_tier_reports_at_least_the_largest():
    summary = tiers("vllm", "short-baseline", [(1, 0.2, 2, 1), (200, 0.9, 9, 1)])
    row = capacity_at_slo(summary, DEFAULT_SLO).iloc[0]
    assert row["max_users_meeting_slo"] == 200
    assert math.isnan(row["first_failing_users"])
    assert "every tested tier" in row["note"]
    assert recommendations(capacity_at_slo(summary, DEFAULT_SLO))["recommendation"].iloc[0] == (
        "for short-baseline, vllm holds >= 200 developers"
    )


def test_failing_the_first_tier_means_no_capacity():
    summary = tiers("llamacpp", "multi-turn-session", [(1, 2.5, 12, 1), (5, 9.0, 20, 1)])
    row = capacity_at_slo(summary, DEFAULT_SLO).iloc[0]
    assert row["max_users_meeting_slo"] == 0
    assert math.isnan(row["estimated_users"])
    text = recommendations(capacity_at_slo(summary, DEFAULT_SLO))["recommendation"].iloc[0]
    assert text == "for multi-turn-session, llamacpp misses it already at 1 user"


AT_THE_LIMIT = [
    # (metric, its value exactly at the default SLO's limit, the next float on the wrong side)
    ("ttft_p50_s", DEFAULT_SLO.ttft_p50_s, math.nextafter(DEFAULT_SLO.ttft_p50_s, math.inf)),
    ("e2e_p50_s", DEFAULT_SLO.e2e_p50_s, math.nextafter(DEFAULT_SLO.e2e_p50_s, math.inf)),
    ("success_rate", DEFAULT_SLO.success_rate, math.nextafter(DEFAULT_SLO.success_rate, 0.0)),
]


@pytest.mark.parametrize(("metric", "at_limit", "one_ulp_beyond"), AT_THE_LIMIT)
def test_a_tier_exactly_at_the_limit_meets_the_slo_and_one_ulp_beyond_does_not(
    metric: str, at_limit: float, one_ulp_beyond: float
) -> None:
    """The bounds are inclusive, as `Slo.describe` says: TTFT p50 <= limit, success >= floor."""
    passing = {"ttft_p50_s": 0.5, "e2e_p50_s": 3.0, "success_rate": 1.0}
    for value, meets in ((at_limit, True), (one_ulp_beyond, False)):
        tier = {**passing, metric: value}
        summary = tiers(
            "vllm",
            "shared-prefix",
            [(1, 0.5, 3.0, 1.0), (5, tier["ttft_p50_s"], tier["e2e_p50_s"], tier["success_rate"])],
        )
        row = capacity_at_slo(summary, DEFAULT_SLO).iloc[0]
        assert row["max_users_meeting_slo"] == (5 if meets else 1), (metric, value)
        assert row["binding_metric"] == ("" if meets else metric)


def test_capacity_stops_at_the_first_failing_tier_even_if_a_later_one_passes():
    summary = tiers("vllm", "shared-prefix", [(1, 0.5, 3, 1), (5, 2.5, 4, 1), (10, 1.0, 4, 1)])
    assert capacity_at_slo(summary, DEFAULT_SLO).iloc[0]["max_users_meeting_slo"] == 1


def test_recommendation_names_each_backend_best_first():
    summary = pd.concat(
        [
            tiers("llamacpp", "multi-turn-session", [(1, 1.0, 8, 1), (5, 6.0, 20, 1)]),
            tiers("vllm", "multi-turn-session", [(50, 1.0, 8, 1), (100, 3.0, 9, 1)]),
        ]
    )
    capacity = capacity_at_slo(summary, DEFAULT_SLO)
    assert capacity["series"].tolist() == ["vllm", "llamacpp"]
    recommendation = recommendations(capacity).iloc[0]
    assert recommendation["best"] == "vllm"
    # vllm: 50 + (2-1)/(3-1)*50 = 75; llamacpp: 1 + (2-1)/(6-1)*4 = 1.8
    assert recommendation["recommendation"] == (
        "for multi-turn-session, vllm holds ~75 developers, llamacpp holds ~1 developer"
    )


def test_saturated_tiers_are_noted():
    summary = tiers("vllm", "short-baseline", [(1, 0.5, 3, 1), (5, 3.0, 4, 1)])
    summary.loc[1, "saturated"] = True
    assert "load generator saturated at 5 users" in capacity_at_slo(summary, DEFAULT_SLO).iloc[0]["note"]


def test_slo_comes_from_the_run_then_from_flags():
    meta = {"slo": {"ttft_p50_s": 1.0, "e2e_p50_s": 5.0}}
    assert slo_of_run(meta) == Slo(ttft_p50_s=1.0, e2e_p50_s=5.0, success_rate=0.99)
    assert slo_of_run(meta, ttft_p50_s=3.0, success_rate=0.9) == Slo(
        ttft_p50_s=3.0, e2e_p50_s=5.0, success_rate=0.9
    )
    assert slo_of_run({}) == Slo(ttft_p50_s=2.0, e2e_p50_s=10.0, success_rate=0.99)
    with pytest.raises(GrillError, match="success rate"):
        slo_of_run({}, success_rate=99.0)
    with pytest.raises(GrillError, match="--slo-ttft-p50"):
        slo_of_run({}, ttft_p50_s=-1.0)


def test_capacity_from_hand_made_records_is_exact(tmp_path):
    # two requests per tier; TTFT p50 = mean of the two: 1 user 1.0 s, 10 users 1.8 s, 20 users 2.6 s
    records = []
    for index, (users, ttfts) in enumerate([(1, (0.9, 1.1)), (10, (1.7, 1.9)), (20, (2.4, 2.8))]):
        for n, ttft in enumerate(ttfts):
            records.append(
                make_record(
                    record_id=f"{users}-{n}", tier_index=index, tier_users=users, ttft_s=ttft, e2e_s=5.0
                )
            )
    write_results_folder(tmp_path, records, meta={"slo": {"ttft_p50_s": 2.0}})
    run = load_run(tmp_path)
    capacity = capacity_at_slo(summarize(run), slo_of_run(run.meta))
    row = capacity.iloc[0]
    assert row["series"] == "sim" and row["conversation"] == "short-baseline"
    assert row["max_users_meeting_slo"] == 10
    assert row["estimated_users"] == pytest.approx(10 + (2.0 - 1.8) / (2.6 - 1.8) * 10)


def test_a_tier_where_every_request_failed_binds_on_the_success_rate():
    # no successful request: its latencies are NaN, not a measured miss
    summary = tiers("vllm", "short-baseline", [(1, 0.5, 3, 1.0), (5, math.nan, math.nan, 0.0)])
    row = capacity_at_slo(summary, DEFAULT_SLO).iloc[0]
    assert row["binding_metric"] == "success_rate"
    assert row["estimated_users"] == pytest.approx(1 + (1.0 - 0.99) / 1.0 * 4)
    first = tiers("vllm", "short-baseline", [(1, math.nan, math.nan, 0.0)])
    assert capacity_at_slo(first, DEFAULT_SLO).iloc[0]["binding_metric"] == "success_rate"


def test_a_tier_exactly_at_every_limit_meets_the_slo():
    slo = Slo(ttft_p50_s=1.0, e2e_p50_s=5.0, success_rate=0.9)
    summary = tiers("vllm", "short-baseline", [(1, 1.0, 5.0, 0.9), (2, 1.0 + 1e-9, 5.0, 0.9)])
    capacity = capacity_at_slo(summary, slo).iloc[0]
    assert capacity["max_users_meeting_slo"] == 1 and capacity["first_failing_users"] == 2
    assert capacity["binding_metric"] == "ttft_p50_s"


def test_the_scenario_slo_is_the_one_the_report_judges_by():
    from grill_locust.scenario import parse_scenario

    scenario = parse_scenario(
        {
            "backends": [{"name": "a", "engine": "vllm", "url": "http://h:1"}],
            "models": [{"name": "m"}],
            "targets": [{"conversation": "short-baseline"}],
            "slo": {"ttft_p50_s": 0.5, "success_rate": 0.95},
        },
        "inline",
    )
    # run.json keeps the scenario's slo as plain data; the report reads back the same object
    assert slo_of_run({"slo": scenario.slo.model_dump()}) == scenario.slo
    assert scenario.slo.describe() == "TTFT p50 <= 0.5 s, E2E p50 <= 10 s, success >= 95 %"
    with pytest.raises(GrillError, match=r"^slo\.success_rate: success rate 2 is not a fraction"):
        slo_of_run({"slo": {"success_rate": 2}})

"""grill_locust/verdicts.py on its own: one percentile, the tier's CPU, the outage and refusal rule."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

from grill_locust.record import percentile
from grill_locust.verdicts import (
    OUTAGE_MIN_FAILED,
    TierFailures,
    behind_schedule,
    judge_failures,
    saturation_causes,
    schedule_lag_p99_s,
    tier_cpu_pct,
)


def test_every_percentile_is_numpys_linear_interpolation() -> None:
    """record.percentile, numpy's default and pandas' quantile (the summary's) are one definition."""
    rng = np.random.default_rng(3)
    for values in (rng.exponential(2.0, 137), rng.normal(5.0, 1.0, 8), np.array([4.0])):
        ordered = sorted(values.tolist())
        for q in (1, 50, 90, 95, 99):
            expected = float(np.percentile(values, q))
            assert percentile(ordered, q) == pytest.approx(expected, rel=1e-12)
            assert float(pd.Series(values).quantile(q / 100)) == pytest.approx(expected, rel=1e-12)
    # a rate tier's schedule lag p99 too: 1 late send in 100 is not a p99 past the limit, 2 are
    lags = [0.001] * 99 + [0.5]
    assert schedule_lag_p99_s(lags) == pytest.approx(float(np.percentile(lags, 99)))
    assert not behind_schedule(schedule_lag_p99_s(lags))
    assert behind_schedule(schedule_lag_p99_s([0.001] * 98 + [0.5] * 2))
    assert schedule_lag_p99_s([]) == 0.0


def test_a_tiers_cpu_is_its_busiest_workers_mean() -> None:
    # one busy second among twenty idle ones is no saturated tier; one busy worker beside an idle one is
    assert tier_cpu_pct({"a": 95.0 + 20 * 30.0}, {"a": 21}) == pytest.approx(33.1, abs=0.05)
    assert tier_cpu_pct({"a": 20 * 30.0, "b": 5 * 90.0}, {"a": 20, "b": 5}) == 90.0
    assert np.isnan(tier_cpu_pct({}, {}))
    assert saturation_causes(0.5, tier_cpu_pct({"a": 95.0 + 20 * 30.0}, {"a": 21})) == []
    assert saturation_causes(6.0, 90.0) == ["lag p99 6.0 ms", "cpu 90%"]
    assert saturation_causes(0.5, float("nan")) == []  # no reading is no saturation


def engine_not_asked() -> bool:
    raise AssertionError("the rule needed no probe of the engine")


def test_failures_all_refused_by_their_status_are_a_refusal_not_an_outage() -> None:
    refused = TierFailures(0, 4, 4, Counter({("http_400", "tools need --jinja"): 4}))
    verdict = judge_failures(refused, "sim", engine_not_asked)
    assert (verdict.outage, verdict.refusal) == ("", "tools need --jinja")
    # connections refused are an outage, whatever the other failures were
    down = TierFailures(2, 4, 4, Counter({("http_400", "bad"): 2, ("connect", ""): 2}))
    assert judge_failures(down, "sim", engine_not_asked).outage.startswith("engine outage: 2 requests")
    # many failures of several kinds: an outage
    many = TierFailures(0, 6, 8, Counter({("http_500", "a"): 3, ("timeout", ""): 3}))
    assert judge_failures(many, "sim", engine_not_asked).outage == (
        "engine outage: 6 of 8 requests failed (more than 50 %)"
    )
    assert judge_failures(TierFailures(0, 1, 4, Counter({("timeout", ""): 1})), "sim", engine_not_asked) == (
        judge_failures(TierFailures(0, 0, 4, Counter()), "sim", engine_not_asked)
    )


def test_too_few_failures_ask_the_engine() -> None:
    few = TierFailures(0, OUTAGE_MIN_FAILED - 1, OUTAGE_MIN_FAILED - 1, Counter({("timeout", ""): 2}))
    answered = judge_failures(few, "sim", lambda: True)
    assert (answered.outage, answered.refusal) == ("", "")
    assert (
        answered.remark
        == "2 of 2 requests failed: too few to call an outage, and backend sim answers its model list"
    )
    silent = judge_failures(few, "sim", lambda: False)
    assert silent.outage.endswith("; backend sim does not answer its model list")
    # one server error message on every failure, the engine up: the engine refuses these requests
    one_error = TierFailures(0, 3, 3, Counter({("http_500", "template error"): 3}))
    assert judge_failures(one_error, "sim", lambda: True).refusal == "template error"

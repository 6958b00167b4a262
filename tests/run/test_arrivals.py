"""The open-loop arrival processes: counts and inter-arrival spread as each process has them."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from grill_locust.run.arrivals import Send, arrival_gaps, arrival_schedule

RATE = 20.0
SAMPLES = 20_000


def gaps(arrival: str, burstiness: float = 1.0, seed: int = 1) -> list[float]:
    return list(itertools.islice(arrival_gaps(arrival, RATE, burstiness, seed), SAMPLES))  # type: ignore[arg-type]


def cv(values: list[float]) -> float:
    return statistics.pstdev(values) / statistics.fmean(values)


def test_poisson_counts_per_window_are_poisson_distributed() -> None:
    windows, window_s = 1000, 1.0
    counts = [0] * windows
    for send in arrival_schedule("poisson", RATE, windows * window_s, seed=7):
        counts[int(send.at_s // window_s)] += 1
    mean = statistics.fmean(counts)
    expected = RATE * window_s
    # the mean of 1000 Poisson(20) counts lies within 4 standard errors of 20
    assert abs(mean - expected) < 4 * math.sqrt(expected / windows)
    # a Poisson count's variance equals its mean: the index of dispersion is 1 (std error ~ sqrt(2/n))
    assert abs(statistics.variance(counts) / mean - 1.0) < 4 * math.sqrt(2 / (windows - 1))


def test_poisson_gaps_have_mean_one_over_rate_and_cv_one() -> None:
    values = gaps("poisson")
    assert statistics.fmean(values) == pytest.approx(1 / RATE, rel=4 / math.sqrt(SAMPLES))
    assert cv(values) == pytest.approx(1.0, abs=0.04)


def test_constant_gaps_do_not_vary() -> None:
    values = gaps("constant")
    assert cv(values) < 1e-9
    assert values[0] == pytest.approx(1 / RATE)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_gaps_keep_the_rate_with_cv_one_over_sqrt_burstiness(burstiness: float) -> None:
    values = gaps("gamma", burstiness)
    assert statistics.fmean(values) == pytest.approx(1 / RATE, rel=0.06)
    assert cv(values) == pytest.approx(1 / math.sqrt(burstiness), rel=0.08)


def test_a_schedule_is_seeded_numbered_and_ends_before_its_duration() -> None:
    first = list(arrival_schedule("poisson", 50.0, 3.0, seed=3))
    assert first == list(arrival_schedule("poisson", 50.0, 3.0, seed=3))
    assert first != list(arrival_schedule("poisson", 50.0, 3.0, seed=4))
    assert [send.iteration for send in first] == list(range(len(first)))
    assert all(0 < send.at_s < 3.0 for send in first)
    assert all(a.at_s <= b.at_s for a, b in itertools.pairwise(first))
    assert list(arrival_schedule("constant", 2.0, 2.0)) == [Send(0.5, 0), Send(1.0, 1), Send(1.5, 2)]


def test_a_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        next(arrival_gaps("poisson", 0.0))

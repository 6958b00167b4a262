"""Capacity search: the bisection against monotone pass/fail oracles, and its bad input."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from grill_locust.config import ConfigError, Search
from grill_locust.errors import GrillError
from grill_locust.report.build import SEARCH_COLUMNS
from grill_locust.report.tables import display_searches
from grill_locust.run.estimate import ASSUMED_TPOT_MS, ASSUMED_TTFT_S, estimate_campaign, format_estimate
from grill_locust.run.search import Bisection, Probe, check_search_runnable, probes_at_most
from grill_locust.scenario import load_scenario


def search_with(bisection: Bisection, passes: Callable[[float], bool]) -> list[float]:
    """Run the search to its end against `passes`; the loads probed, in order."""
    while (load := bisection.next_load()) is not None:
        ok = passes(load)
        bisection.record(Probe(load, ok, "" if ok else "ttft_p50_s"))
        assert len(bisection.probes) < 100, "the search does not end"
    return [probe.load for probe in bisection.probes]


@pytest.mark.parametrize("knee", [1, 2, 3, 7, 37, 100, 255, 256])
def test_a_users_search_finds_the_knee_to_one_user(knee: int) -> None:
    bisection = Bisection.of(Search(users=[1, 256]))
    loads = search_with(bisection, lambda users: users <= knee)
    assert (bisection.largest_passing, bisection.smallest_failing) == (knee, knee + 1 if knee < 256 else None)
    assert loads[0] == 1 and all(load == int(load) and 1 <= load <= 256 for load in loads)
    assert len(set(loads)) == len(loads), "no load probed twice"
    assert len(loads) <= probes_at_most(Search(users=[1, 256])) == 16  # doubling to the knee, then bisecting
    assert [p.passed for p in bisection.probes] == [load <= knee for load in loads]  # every probe recorded


def test_a_users_search_stops_within_its_precision() -> None:
    bisection = Bisection.of(Search(users=[1, 256], precision=8))
    search_with(bisection, lambda users: users <= 100)
    passing, failing = bisection.largest_passing, bisection.smallest_failing
    assert passing is not None and failing is not None
    assert passing <= 100 < failing and failing - passing <= 8


def test_the_doubling_never_probes_past_twice_the_knee() -> None:
    bisection = Bisection.of(Search(users=[1, 256]))
    loads = search_with(bisection, lambda users: users <= 5)
    assert loads[:4] == [1, 2, 4, 8] and max(loads) == 8  # then 6 and 5 (or 6 alone)
    assert (bisection.largest_passing, bisection.smallest_failing) == (5, 6)


def test_a_low_end_that_fails_ends_the_search_at_once() -> None:
    bisection = Bisection.of(Search(users=[4, 64]))
    assert search_with(bisection, lambda users: False) == [4]
    assert (bisection.largest_passing, bisection.smallest_failing) == (None, 4)
    assert bisection.as_json("t")["probes"] == [
        {"tier_index": 0, "users": 4, "passed": False, "binding_metric": "ttft_p50_s", "binding_persona": ""}
    ]


def test_a_high_end_that_passes_ends_the_search_there() -> None:
    bisection = Bisection.of(Search(users=[3, 20]))
    assert search_with(bisection, lambda users: True) == [3, 6, 12, 20]
    found = bisection.as_json("t")
    assert (found["largest_passing"], found["smallest_failing"], found["done"]) == (20, None, True)


@pytest.mark.parametrize("knee", [0.7, 3.3, 12.0, 63.0])
def test_a_rate_search_finds_the_knee_within_its_relative_precision(knee: float) -> None:
    bisection = Bisection.of(Search(rate=[0.5, 64], precision=0.05))
    search_with(bisection, lambda rate: rate <= knee)
    passing, failing = bisection.largest_passing, bisection.smallest_failing
    assert passing is not None and failing is not None
    assert passing <= knee < failing and failing / passing <= 1.05 + 1e-9
    assert len(bisection.probes) <= probes_at_most(Search(rate=[0.5, 64], precision=0.05))


def test_a_pass_above_a_failure_is_recorded_and_the_bracket_stays_below_the_failure() -> None:
    """Noise can break monotonicity: the probe is kept, the bracket is the largest pass below a failure."""
    bisection = Bisection(by="users", low=1, high=16, precision=1)
    for load, ok in [(1, True), (2, True), (4, False), (3, True), (16, True)]:
        bisection.record(Probe(load, ok))
    assert (bisection.largest_passing, bisection.smallest_failing, bisection.next_load()) == (3, 4, None)


SCENARIO = """
backends: [{name: sim, engine: sim}]
models: [{name: m}]
targets: [{conversation: short-baseline}]
load: LOAD
"""


@pytest.mark.parametrize(
    ("load", "message"),
    [
        ("{search: {users: [8, 2]}}", "load.search.users: bracket upside down or empty: [8, 2]"),
        ("{search: {users: [0, 8]}}", "load.search.users: the bracket's low end must be above 0, got 0"),
        ("{search: {rate: [-1, 8]}}", "load.search.rate: the bracket's low end must be above 0, got -1"),
        ("{search: {users: [1, 8], rate: [1, 2]}}", "load.search: expected one of users: [lo, hi] or rate"),
        ("{search: {users: [1, 8]}, tiers: [1, 2]}", "load.search: a capacity search picks its own tiers"),
        ("{search: {users: [1, 8], probe_s: 0}}", "load.search.probe_s: expected a value > 0"),
        ("{search: {users: [1, 8], precision: 0.5}}", "load.search.precision: a users search steps by whole"),
        ("{search: {users: [4]}}", "load.search.users: expected a bracket [lo, hi] of two numbers"),
    ],
)
def test_a_bad_search_is_one_line_naming_its_key(tmp_path: Path, load: str, message: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(SCENARIO).replace("LOAD", load))
    with pytest.raises(ConfigError, match=r"^" + str(path).replace(".", r"\.") + ": ") as raised:
        load_scenario(path)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_a_tiers_override_of_a_search_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(SCENARIO).replace("LOAD", "{search: {users: [1, 8]}, iterations: 2}"))
    scenario = load_scenario(path)
    assert scenario.with_overrides(pause_s=1).load.search == scenario.load.search
    with pytest.raises(ConfigError, match="search: a capacity search picks its own tiers; remove tiers"):
        scenario.with_overrides(tiers=[1, 2])


def test_a_resumed_search_is_refused_before_the_run() -> None:
    check_search_runnable(Search(rate=[0.5, 64]), resuming=False)
    with pytest.raises(GrillError, match="--repeat: a capacity search .* runs once"):
        check_search_runnable(Search(users=[1, 8]), resuming=False, repeats=2)
    check_search_runnable(Search(users=[1, 8]), resuming=False, repeats=1)
    with pytest.raises(GrillError, match="--resume: a capacity search .* cannot be resumed"):
        check_search_runnable(Search(users=[1, 8]), resuming=True)
    check_search_runnable(Search(users=[1, 8]), resuming=False)
    check_search_runnable(None, resuming=True)


def test_validate_gives_a_searchs_bounds_not_the_default_tiers(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        textwrap.dedent(SCENARIO).replace("LOAD", "{search: {users: [1, 8], probe_s: 3}, pause_s: 1}")
    )
    scenario = load_scenario(path)
    text = format_estimate(estimate_campaign(scenario), ASSUMED_TTFT_S, ASSUMED_TPOT_MS)
    assert "capacity search of users 1 to 8 on 1 targets" in text and "probes of 3 s, precision 1" in text
    assert "at most 6 probes: ~23 s at most" in text and "tiers (users)" not in text


def test_the_search_table_names_a_bracket_edge_never_reached_and_a_search_cut_short() -> None:
    bisection = Bisection.of(Search(users=[2, 64]))
    bisection.record(Probe(2, False, "success_rate"))
    low_fails = {
        "run_label": "r",
        **bisection.as_json("a"),
        "by": "users",
        "unit": "users",
        "bracket": [2, 64],
    }
    bisection = Bisection.of(Search(users=[1, 64]))
    bisection.record(Probe(1, True))
    cut = {"run_label": "r", **bisection.as_json("b"), "by": "users", "unit": "users", "bracket": [1, 64]}
    shown = display_searches(pd.DataFrame([low_fails, cut], columns=SEARCH_COLUMNS))
    assert shown.to_dict("records") == [
        {
            "target": "a",
            "searched": "users 2 to 64",
            "largest passing": "none",
            "smallest failing": "2 users",
            "probes in order": "2 misses (success rate)",
        },
        {
            "target": "b",
            "searched": "users 1 to 64",
            "largest passing": "1 user",
            "smallest failing": "none",
            "probes in order": "1 meets (search cut short)",
        },
    ]

"""The campaign's planner on its own: outcomes fed in, the steps it yields checked (no Locust, no engine)."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import pytest

from grill_locust.run.messages import Dispatched
from grill_locust.run.phase import RateProbe, RateTier, UsersProbe, UsersTier
from grill_locust.run.plan import Hold, Outcome, Plan, Step
from grill_locust.run.progress import PhaseProgress
from grill_locust.run.search import Probe
from grill_locust.scenario import parse_scenario

DONE = Outcome()


def scenario(load: dict[str, Any], targets: int = 2) -> Any:
    return parse_scenario(
        {
            "name": "plan",
            "backends": [{"name": "b", "url": "http://127.0.0.1:9", "engine": "vllm"}],
            "models": [{"name": f"m{n}"} for n in range(targets)],
            "targets": [
                {"backend": "b", "model": f"m{n}", "conversation": "short-baseline"} for n in range(targets)
            ],
            "load": {"pause_s": 0, **load},
        },
        source="test",
    )


def walk(plan: Plan, outcome_of: Callable[[Step], Outcome | None]) -> list[Step]:
    """Drive the planner to its end: each step it yields, answered by `outcome_of` (a hold by None)."""
    steps: list[Step] = []
    planner: Generator[Step, Outcome | None, None] = plan.steps()
    answer: Outcome | None = None
    while True:
        try:
            step = planner.send(answer)
        except StopIteration:
            return steps
        steps.append(step)
        assert len(steps) < 100, "the plan does not end"
        answer = None if isinstance(step, Hold) else outcome_of(step)


def where(step: Step) -> tuple[str, int, int, int] | str:
    """A step as (model of the target, tier_index, attempt, repeat), or "hold"."""
    if isinstance(step, Hold):
        return "hold"
    phase = step.phase
    return (phase.target.split("/")[1], phase.tier_index, phase.attempt, phase.repeat)


def test_the_ladder_walks_targets_then_tiers_with_their_users() -> None:
    plan = Plan.of(scenario({"tiers": [1, 4], "iterations": 2}), "run", "run.0")
    steps = walk(plan, lambda step: DONE)
    assert [where(s) for s in steps] == [("m0", 0, 0, 0), ("m0", 1, 0, 0), ("m1", 0, 0, 0), ("m1", 1, 0, 0)]
    assert all(isinstance(s, UsersTier) and not s.judged for s in steps)
    assert [s.users for s in steps if isinstance(s, UsersTier)] == [1, 4, 1, 4]
    assert [s.phase.phase_id for s in steps if isinstance(s, UsersTier)] == [0, 1, 2, 3]
    assert plan.tier_count == 4 and plan.ahead() == []


def test_repeat_walks_the_whole_ladder_again_with_new_phase_ids() -> None:
    plan = Plan.of(scenario({"tiers": [1, 2]}, targets=1), "run", "run.0", repeats=2)
    steps = walk(plan, lambda step: DONE)
    assert [where(s) for s in steps] == [("m0", 0, 0, 0), ("m0", 1, 0, 0), ("m0", 0, 0, 1), ("m0", 1, 0, 1)]
    first = steps[0]
    assert isinstance(first, UsersTier)
    assert plan.label(first.phase) == "1/4, repeat 1/2"


def test_an_outage_holds_for_the_engine_then_runs_the_tier_once_more() -> None:
    plan = Plan.of(scenario({"tiers": [1, 2], "engine_wait_s": 30}, targets=1), "run", "run.0")
    steps = walk(plan, lambda step: Outcome(outage=where(step) == ("m0", 0, 0, 0)))
    assert [where(s) for s in steps] == [("m0", 0, 0, 0), "hold", ("m0", 0, 1, 0), ("m0", 1, 0, 0)]
    hold, again = steps[1], steps[2]
    assert isinstance(hold, Hold) and hold.after is steps[0] and hold.then is again
    assert isinstance(again, UsersTier) and again.phase.key == "run.0/0/1"
    assert plan.label(again.phase) == "1/2, attempt 2"


def test_a_re_run_that_measures_an_outage_again_is_not_run_a_third_time_but_the_next_tier_waits() -> None:
    plan = Plan.of(scenario({"tiers": [1, 2], "engine_wait_s": 30}, targets=1), "run", "run.0")
    steps = walk(plan, lambda step: Outcome(outage=where(step)[1:2] == (0,)))
    assert [where(s) for s in steps] == [("m0", 0, 0, 0), "hold", ("m0", 0, 1, 0), "hold", ("m0", 1, 0, 0)]


def test_an_outage_in_the_last_tier_is_neither_held_for_nor_run_again_with_no_wait() -> None:
    plan = Plan.of(scenario({"tiers": [1], "engine_wait_s": 0}, targets=1), "run", "run.0")
    assert [where(s) for s in walk(plan, lambda step: Outcome(outage=True))] == [("m0", 0, 0, 0)]
    plan = Plan.of(scenario({"tiers": [1], "engine_wait_s": 30}, targets=1), "run", "run.0")
    steps = walk(plan, lambda step: Outcome(outage=True))
    assert [where(s) for s in steps] == [("m0", 0, 0, 0), "hold", ("m0", 0, 1, 0)]  # nothing follows: no hold


def test_a_refused_target_s_remaining_tiers_are_skipped_and_the_next_target_runs() -> None:
    plan = Plan.of(scenario({"tiers": [1, 2, 3], "engine_wait_s": 30}), "run", "run.0")
    seen: list[list[int]] = []

    def refuse_m0(step: Step) -> Outcome:
        seen.append(
            [t.phase.tier_index for t in plan.ahead() if t.phase.target.endswith("m0/short-baseline")]
        )
        return Outcome(refused=where(step) == ("m0", 0, 0, 0))

    steps = walk(plan, refuse_m0)
    assert [where(s) for s in steps] == [("m0", 0, 0, 0), ("m1", 0, 0, 0), ("m1", 1, 0, 0), ("m1", 2, 0, 0)]
    assert seen[0] == [1, 2]  # what a refusal skips, as the campaign reads it before telling the planner
    assert plan.refused == {steps[0].phase.target} and seen[1] == []


def test_a_stop_ends_the_plan_even_after_an_outage() -> None:
    plan = Plan.of(scenario({"tiers": [1, 2], "engine_wait_s": 30}), "run", "run.0")
    steps = walk(plan, lambda step: Outcome(outage=True, stopped=True))
    assert [where(s) for s in steps] == [("m0", 0, 0, 0)]


def test_a_resumed_plan_leaves_out_complete_tiers_but_numbers_against_the_whole_campaign() -> None:
    plan = Plan.of(
        scenario({"tiers": [1, 2]}, targets=1), "run", "run.1", skip={("b/m0/short-baseline", 0, 0)}
    )
    steps = walk(plan, lambda step: DONE)
    assert [where(s) for s in steps] == [("m0", 1, 0, 0)]
    assert isinstance(steps[0], UsersTier) and plan.label(steps[0].phase) == "2/2"


def judged(passes: Callable[[float], bool]) -> Callable[[Step], Outcome]:
    """A probe's outcome whose verdict passes below the knee; the planner asks for it once per probe."""

    def outcome(step: Step) -> Outcome:
        assert isinstance(step, (UsersProbe, RateProbe))
        return Outcome(verdict=lambda: Probe(step.load, passes(step.load)))

    return outcome


def test_a_users_search_doubles_then_bisects_each_target_in_turn() -> None:
    plan = Plan.of(scenario({"search": {"users": [1, 64], "probe_s": 5}}), "run", "run.0")
    steps = walk(plan, judged(lambda users: users <= 5))
    loads = [(where(s)[0], s.load) for s in steps if isinstance(s, UsersProbe)]
    per_target = [1.0, 2.0, 4.0, 8.0, 6.0, 5.0]
    assert loads == [("m0", load) for load in per_target] + [("m1", load) for load in per_target]
    assert all(isinstance(s, UsersProbe) and s.judged and s.phase.duration_s == 5 for s in steps)
    assert [s.phase.tier_index for s in steps][:6] == list(range(6))
    assert [s.phase.phase_id for s in steps] == list(range(12))
    assert (plan.searches[steps[0].phase.target].largest_passing, plan.tier_count) == (5.0, 12)
    assert isinstance(steps[0], UsersProbe) and plan.label(steps[0].phase) == "1/?"


def test_a_rate_search_probes_rate_tiers() -> None:
    plan = Plan.of(scenario({"search": {"rate": [1, 4], "probe_s": 5}}, targets=1), "run", "run.0")
    steps = walk(plan, judged(lambda rate: rate <= 3))
    assert all(isinstance(s, RateProbe) and isinstance(s, RateTier) for s in steps)
    assert [s.phase.tier_rate for s in steps][:3] == [1.0, 2.0, 4.0]
    bisection = plan.searches[steps[0].phase.target]
    passing, failing = bisection.largest_passing, bisection.smallest_failing
    assert passing is not None and failing is not None and passing <= 3 < failing <= passing * 1.1
    assert [s.load for s in steps] == [p.load for p in bisection.probes]  # each probe judged once


def test_a_probe_run_again_after_an_outage_is_judged_once_on_its_re_run() -> None:
    plan = Plan.of(
        scenario({"search": {"users": [1, 4], "probe_s": 5}, "engine_wait_s": 30}, targets=1), "run", "run.0"
    )
    asked: list[tuple[float, int]] = []

    def outcome(step: Step) -> Outcome:
        assert isinstance(step, UsersProbe)

        def verdict() -> Probe:
            asked.append((step.load, step.phase.attempt))
            return Probe(step.load, True)

        return Outcome(outage=step.load == 2 and step.phase.attempt == 0, verdict=verdict)

    steps = walk(plan, outcome)
    assert [where(s) for s in steps] == [
        ("m0", 0, 0, 0),
        ("m0", 1, 0, 0),
        "hold",
        ("m0", 1, 1, 0),
        ("m0", 2, 0, 0),
    ]
    assert asked == [(1.0, 0), (2.0, 1), (4.0, 0)]  # the outage's attempt measured nothing to judge
    # a re-run's phase_id is its tier's; the probe after it counts it (as the phase keys do)
    assert [s.phase.phase_id for s in steps if not isinstance(s, Hold)] == [0, 1, 1, 3]


def test_a_refused_probe_ends_its_target_s_search_unjudged() -> None:
    plan = Plan.of(scenario({"search": {"users": [1, 4], "probe_s": 5}}), "run", "run.0")
    first = plan.steps()
    probe = first.send(None)
    assert isinstance(probe, UsersProbe) and where(probe) == ("m0", 0, 0, 0)

    def never() -> Probe:
        raise AssertionError("a refused probe measured nothing")

    following = first.send(Outcome(refused=True, verdict=never))
    assert isinstance(following, UsersProbe) and where(following) == ("m1", 0, 0, 0)
    assert plan.searches[probe.phase.target].probes == []


@pytest.mark.parametrize("stopped_at", [0, 2])
def test_a_stopped_search_keeps_the_verdict_of_its_last_probe(stopped_at: int) -> None:
    plan = Plan.of(scenario({"search": {"users": [1, 64], "probe_s": 5}}, targets=1), "run", "run.0")
    steps = walk(
        plan,
        lambda step: Outcome(
            stopped=step.phase.tier_index == stopped_at, verdict=lambda: Probe(step.load, True)
        ),
    )
    assert len(steps) == stopped_at + 1
    assert [p.load for p in plan.searches[steps[0].phase.target].probes] == [1.0, 2.0, 4.0][: stopped_at + 1]


def test_each_tier_variant_says_when_it_is_done() -> None:
    users = Plan.of(scenario({"tiers": [2], "iterations": 3}, targets=1), "run", "run.0").ladder[0]
    progress = PhaseProgress(users)
    assert users.iterations_target(progress) == 6 and not users.done(progress, 0.0, set())
    progress.count_iterations("c1", "w1", 6)
    assert users.done(progress, 0.0, set())

    search = Plan.of(scenario({"search": {"users": [2, 8], "probe_s": 5}}, targets=1), "run", "run.0")
    probe = search.steps().send(None)
    assert isinstance(probe, UsersProbe)
    progress = PhaseProgress(probe, started=100.0)
    assert not probe.done(progress, 104.9, set()) and probe.done(progress, 105.0, set())

    rates = Plan.of(scenario({"rates": [4], "duration_s": 10}, targets=1), "run", "run.0").ladder[0]
    rate = rates.started(("a", "b"))
    assert isinstance(rate, RateTier) and rate.users == 2 and rate.load_label == "4 req/s"
    progress = PhaseProgress(rate)
    progress.dispatched["a"] = Dispatched(sends=3, waited=0)
    progress.count_iterations("a", "wa", 3)
    assert not rate.done(progress, 0.0, set())  # b has not reported its sends
    assert rate.done(progress, 0.0, {"b"})  # b is gone: what it sent was lost with it
    assert rate.row(progress) == {"max_in_flight": rate.max_in_flight, "waited_for_max_in_flight": 0}

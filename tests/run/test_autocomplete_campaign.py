"""Typing developers in a real headless Locust campaign against the simulated engine: every request a
record, the ones the next keystroke cancelled `abandoned` (in flight until that keystroke, their output
so far kept, closed on the engine's side too), the completed ones saying whether they were shown in
budget, each sent on its planned time."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from grill_locust.scenario import validate_conversation
from grill_locust.workload.autocomplete import AutocompletePlan
from grill_locust.workload.generators import build_workload
from tests.run.conftest import only_run_dir, run_locust, truth_once_it_holds, write_scenario

pytestmark = pytest.mark.slow

USERS = 2
REQUESTS = 10
CONVERSATION: dict[str, Any] = {
    "name": "completions",
    "kind": "autocomplete",
    "prefix_tokens": 600,
    "suffix_tokens": 200,
    "requests": REQUESTS,
    # keystrokes ~250 ms apart: most pauses outlast the 150 ms debounce, and the ~120 ms a completion
    # takes on the simulator after it about half the time (the plans differ from run to run: the
    # users' keys hold the run's session)
    "typing_cps": 4,
    "max_tokens": 8,
    "budget_ms": 400,
}
SCHEDULE_TOLERANCE_S = 0.03  # a loaded CI machine's timer lateness, on a schedule of seconds


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, dict[str, dict[str, Any]]]:
    tmp_path = tmp_path_factory.mktemp("autocomplete")
    truth_path = tmp_path / "truth.jsonl"
    data: dict[str, Any] = {
        "name": "autocomplete",
        "backends": [
            {"name": "sim", "engine": "sim", "profile": "vllm", "sim_args": {"truth_log": str(truth_path)}}
        ],
        "models": [{"name": "grill-sim", "max_tokens": 256, "ignore_eos": True}],
        "conversations": [CONVERSATION],
        "targets": [{"name": "typing", "backend": "sim", "conversation": "completions"}],
        "load": {"tiers": [USERS], "iterations": 1, "pause_s": 0.2, "think_time_s": 0.05, "engine_wait_s": 0},
    }
    scenario = write_scenario(tmp_path / "s.yaml", data)
    done = run_locust(["--scenario", str(scenario), "--results-dir", str(tmp_path / "results")], tmp_path)
    # 0: an abandoned request is no failure (Locust would exit 1 on one)
    assert done.returncode == 0, done.stderr[-3000:]
    records = pd.read_parquet(only_run_dir(tmp_path / "results") / "records.parquet")
    truth = truth_once_it_holds(truth_path, set(records["record_id"]))
    return records, {line["request_id"]: line for line in truth}


def plan_of(conversation_id: str) -> AutocompletePlan:
    """The plan the user played: the same in every process for its (seed, user key, iteration)."""
    _, user_key, iteration = conversation_id.split(":")
    plan = build_workload(validate_conversation(CONVERSATION)).script(user_key, int(iteration))
    assert isinstance(plan, AutocompletePlan)
    return plan


def test_every_request_is_one_record_abandoned_or_completed(
    campaign: tuple[pd.DataFrame, dict[str, dict[str, Any]]],
) -> None:
    records, _ = campaign
    assert len(records) == USERS * REQUESTS and (records["kind"] == "autocomplete").all()
    for _, developer in records.groupby("conversation_id"):
        assert sorted(developer["turn"]) == list(range(REQUESTS))
    assert set(records["status"]) == {"ok", "abandoned"}  # typing this fast leaves some of each
    assert (records["error"] == "").all()


def test_abandoned_requests_keep_their_time_in_flight_and_output_and_the_engine_saw_them_go(
    campaign: tuple[pd.DataFrame, dict[str, dict[str, Any]]],
) -> None:
    records, truth = campaign
    abandoned = records[records["status"] == "abandoned"]
    assert abandoned["shown_in_budget"].isna().all()
    seen_closing = 0
    for _, record in abandoned.iterrows():
        planned = plan_of(record["conversation_id"]).requests[record["turn"]]
        in_flight_s = planned.next_keystroke_at_s - planned.send_at_s
        assert in_flight_s - SCHEDULE_TOLERANCE_S <= record["e2e_s"] <= in_flight_s + SCHEDULE_TOLERANCE_S
        assert pd.isna(record["ttft_s"]) == (record["output_tokens"] == 0)
        engine = truth.get(record["record_id"])
        if engine is None:  # closed before the engine read the request (a loaded machine): no answer
            assert record["output_tokens"] == 0
            continue
        if engine["outcome"] == "ok":
            # the engine finished it, but its end arrived after the keystroke (the record's end: what the
            # kernel received by then counts, read or not), so the engine wrote it after the keystroke
            assert engine["end"] > record["wall_start"] + record["e2e_s"], (record, engine)
            continue
        assert engine["outcome"] == "client_closed"
        # what the client read before it closed, at most what the engine wrote before it heard of the
        # close, at most all it generated for the request (the engine aborts it at a later step)
        assert record["output_tokens"] <= engine["output_tokens"] <= engine["wasted_tokens"]
        assert engine["wasted_tokens"] <= CONVERSATION["max_tokens"]
        seen_closing += 1
    assert seen_closing >= len(abandoned) // 2


def test_completed_requests_say_whether_they_were_shown_in_budget(
    campaign: tuple[pd.DataFrame, dict[str, dict[str, Any]]],
) -> None:
    records, truth = campaign
    completed = records[records["status"] == "ok"]
    assert completed["shown_in_budget"].notna().all()
    budget_s = CONVERSATION["budget_ms"] / 1000.0
    assert (completed["output_tokens"] == CONVERSATION["max_tokens"]).all()
    for _, record in completed.iterrows():
        planned = plan_of(record["conversation_id"]).requests[record["turn"]]
        # it arrived before the next keystroke (on the planned clock, within the timers' lateness)
        left_s = planned.next_keystroke_at_s - planned.send_at_s - record["e2e_s"]
        assert left_s > -SCHEDULE_TOLERANCE_S
        if record["shown_in_budget"]:
            assert record["e2e_s"] <= budget_s
        elif left_s > SCHEDULE_TOLERANCE_S:  # clearly before the keystroke: only the budget can miss
            assert record["e2e_s"] > budget_s
        assert truth[record["record_id"]]["outcome"] == "ok"
    assert completed["shown_in_budget"].any()
    # prefix and suffix at their sizes, and the simulator's FIM markers around them
    sizes = CONVERSATION["prefix_tokens"] + CONVERSATION["suffix_tokens"]
    assert completed["prompt_tokens"].between(sizes, sizes + 20).all()


def test_each_request_goes_out_at_its_planned_time(
    campaign: tuple[pd.DataFrame, dict[str, dict[str, Any]]],
) -> None:
    records, _ = campaign
    for conversation_id, developer in records.groupby("conversation_id"):
        plan = plan_of(str(conversation_id))
        developer = developer.sort_values("turn")
        sent_s = developer["wall_start"] - developer["wall_start"].iloc[0]
        planned_s = [request.send_at_s - plan.requests[0].send_at_s for request in plan.requests]
        lateness_s = [sent - planned for sent, planned in zip(sent_s, planned_s, strict=True)]
        assert all(abs(late) < SCHEDULE_TOLERANCE_S for late in lateness_s), lateness_s

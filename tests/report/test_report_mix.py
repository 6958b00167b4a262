"""Capacity of a team's mix: a tier holds only when every persona meets its own conversation's SLO, and
the report says which persona broke it; persona rows stand beside the whole-tier row."""

from __future__ import annotations

from pathlib import Path

import pytest

from grill_locust.config import Slo
from grill_locust.report.build import LabelledRun, assemble, report_json
from grill_locust.report.capacity import conversation_slos_of_run, slo_of_run
from grill_locust.report.load import load_run
from grill_locust.report.tables import format_capacity, format_table
from tests.synthetic import START_WALL, make_record, write_results_folder

MIX_TARGET = "sim/grill-sim/mix"
WHOLE = "whole tier: complete 70, chat 30"
# (tier users, persona) -> TTFT of each of its requests: `complete` passes its own TTFT p90 bound of
# 0.4 s at 5 users and misses it at 10; chat, judged by the scenario's SLO, meets it at both
TTFT_S = {(5, "complete"): 0.1, (5, "chat"): 0.5, (10, "complete"): 0.6, (10, "chat"): 0.5}
KIND = {"complete": "short-baseline", "chat": "multi-turn"}


def mix_run(folder: Path) -> Path:
    records, phases = [], []
    for tier_index, users in enumerate((5, 10)):
        counts = {"complete": users * 7 // 10, "chat": users - users * 7 // 10}
        developer = 0
        for persona, developers in counts.items():
            for _ in range(developers):
                records.append(
                    make_record(
                        record_id=f"r{len(records)}",
                        target=MIX_TARGET,
                        conversation=persona,
                        kind=KIND[persona],
                        tier_index=tier_index,
                        tier_users=users,
                        developer=developer,
                        user_id=developer,
                        wall_start=START_WALL + 100 * tier_index + developer * 0.01,
                        ttft_s=TTFT_S[(users, persona)],
                        ttfo_s=TTFT_S[(users, persona)],
                    )
                )
                developer += 1
        phases.append(
            {
                "run_id": "run",
                "target": MIX_TARGET,
                "backend": "sim",
                "engine": "sim",
                "model": "grill-sim",
                "conversation": WHOLE,
                "kind": "mix",
                "tier_index": tier_index,
                "tier_users": users,
                "attempt": 0,
                "session": "run.0",
                "start_wall": START_WALL + 100 * tier_index,
                "end_wall": START_WALL + 100 * tier_index + 2.0,
                "iterations_target": users,
                "iterations_done": users,
                "complete": True,
                "note": "",
            }
        )
    meta = {"slo": Slo().model_dump(), "conversation_slo": {"complete": {"ttft_p90_s": 0.4}}}
    return write_results_folder(folder, records, phases, meta)


def test_a_mix_tier_holds_only_while_every_persona_meets_its_own_slo(tmp_path: Path) -> None:
    run = load_run(mix_run(tmp_path / "run"))
    slo = slo_of_run(run.meta)
    conversation_slos = conversation_slos_of_run(run.meta, slo)
    assert conversation_slos["complete"].ttft_p90_s == 0.4
    report = assemble([LabelledRun("run", run)], slo, compare=False, conversation_slos=conversation_slos)

    capacity = report.capacity
    assert list(capacity["conversation"]) == [WHOLE]  # a mix is judged as a whole, not per persona
    row = capacity.iloc[0]
    assert row["max_users_meeting_slo"] == 5 and row["first_failing_users"] == 10
    assert (row["binding_metric"], row["binding_persona"]) == ("ttft_p90_s", "complete")
    # TTFT p90 of `complete` crosses 0.4 s at 60 % of the way from 0.1 s (5 users) to 0.6 s (10 users)
    assert row["estimated_users"] == pytest.approx(8.0)
    assert "complete breaks it first, on ttft_p90_s" in report.recommendations["recommendation"].iloc[0]
    assert "binding persona" in format_capacity(capacity) and "TTFT p90" in format_capacity(capacity)

    tiers = report.summary
    whole = tiers[tiers["kind"] == "mix"]
    assert list(whole["tier_users"]) == [5, 10] and list(whole["requests"]) == [5, 10]
    persona_rows = tiers[tiers["kind"] != "mix"]
    assert sorted(
        zip(persona_rows["tier_users"], persona_rows["conversation"], persona_rows["developers"], strict=True)
    ) == [
        (5, "chat", 2),
        (5, "complete", 3),
        (10, "chat", 3),
        (10, "complete", 7),
    ]
    assert set(tiers["mix"]) == {WHOLE}
    text = format_table(tiers)
    assert f"sim · complete (a persona of mix target {MIX_TARGET})" in text and f"sim · {WHOLE}" in text
    assert report_json(report)["conversation_slo"]["complete"]["ttft_p90_s"] == 0.4


def test_the_same_records_judged_by_the_scenario_slo_alone_hold_both_tiers(tmp_path: Path) -> None:
    run = load_run(mix_run(tmp_path / "run"))
    report = assemble([LabelledRun("run", run)], slo_of_run(run.meta), compare=False)
    row = report.capacity.iloc[0]
    assert row["max_users_meeting_slo"] == 10 and row["binding_persona"] == ""


def test_a_conversation_slo_judges_a_target_of_that_conversation_alone(tmp_path: Path) -> None:
    records = [
        make_record(record_id=f"r{tier}-{k}", tier_index=tier, tier_users=users, ttft_s=ttft, ttfo_s=ttft)
        for tier, (users, ttft) in enumerate(((1, 0.2), (4, 0.5)))
        for k in range(users)
    ]
    run = load_run(write_results_folder(tmp_path / "run", records, meta={"slo": Slo().model_dump()}))
    slo = slo_of_run(run.meta)
    own = {"short-baseline": Slo(ttft_p50_s=0.3)}
    judged = assemble([LabelledRun("run", run)], slo, compare=False, conversation_slos=own).capacity.iloc[0]
    assert (judged["max_users_meeting_slo"], judged["binding_metric"]) == (1, "ttft_p50_s")
    assert (
        assemble([LabelledRun("run", run)], slo, compare=False).capacity.iloc[0]["max_users_meeting_slo"] == 4
    )

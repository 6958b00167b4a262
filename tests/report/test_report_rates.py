"""A campaign of open-loop rate tiers in the report: the load axis, tier labels and capacity are rates, and
a rate tier's throughput is measured over its sends, not over the phase with its spawn and drain."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import pytest
from test_report_cli import grill

from grill_locust.config import Search, Slo
from grill_locust.report import cli, load_run, summarize
from grill_locust.report.aggregate import summarize_all
from grill_locust.report.build import SEARCH_COLUMNS, LabelledRun, assemble, load_runs
from grill_locust.report.capacity import capacity_at_slo, recommendations
from grill_locust.report.figures import figure_count, figure_metrics, write_figures
from grill_locust.report.load import phases_from_records
from grill_locust.report.sessions import SESSIONS_CSV
from grill_locust.report.tables import (
    MISSING,
    display_agent_steps,
    display_capacity,
    display_searches,
    display_tiers,
    display_turns,
)
from grill_locust.run.arrivals import arrival_schedule
from grill_locust.run.search import Bisection, Probe
from tests.synthetic import START_WALL, make_record, write_results_folder

DURATION_S = 10.0
E2E_S = 0.2
SPAWN_S, DRAIN_S = 3.0, 6.0  # what a real rate tier's phase holds beside its sends
# rate -> TTFT: the engine keeps up at 2 and 4 req/s and queues at 8
TTFT_BY_RATE_S = {2.0: 0.1, 4.0: 0.5, 8.0: 3.5}
SLO = Slo(ttft_p50_s=2.0)


def rate_records(
    run_id: str = "rates", kind: str = "short-baseline", conversation: str = "short-baseline"
) -> list[dict]:
    """One tier per rate of TTFT_BY_RATE_S, sent at a constant rate for DURATION_S, each request E2E_S long."""
    records = []
    tier_start = START_WALL
    for tier_index, (rate, ttft_s) in enumerate(TTFT_BY_RATE_S.items()):
        for send in arrival_schedule("constant", rate, DURATION_S):
            scheduled = tier_start + send.at_s
            records.append(
                make_record(
                    record_id=f"{tier_index}-{send.iteration}",
                    run_id=run_id,
                    conversation=conversation,
                    kind=kind,
                    tier_index=tier_index,
                    tier_users=0,
                    tier_rate=rate,
                    iteration=send.iteration,
                    conversation_id=f"c{tier_index}-{send.iteration}",
                    scheduled_wall=scheduled,
                    schedule_lag_s=0.001,
                    wall_start=scheduled + 0.001,
                    ttft_s=ttft_s,
                    ttfo_s=ttft_s,
                    e2e_s=max(E2E_S, ttft_s + 0.05),
                )
            )
        tier_start += DURATION_S + 30.0
    return records


def write_rate_run(folder: Path, **kwargs) -> Path:
    """A results folder whose phases, as a real run's, open before the first send and close after the drain."""
    records = rate_records(**kwargs)
    phases = phases_from_records(pd.DataFrame(records).pipe(_normalized)).assign(note="")
    phases["start_wall"] -= SPAWN_S
    phases["end_wall"] += DRAIN_S
    return write_results_folder(folder, records, phases=phases, meta={"slo": {"ttft_p50_s": SLO.ttft_p50_s}})


def _normalized(frame: pd.DataFrame) -> pd.DataFrame:
    from grill_locust.report.load import normalize_records

    return normalize_records(frame)


@pytest.fixture(scope="module")
def rate_run(tmp_path_factory) -> Path:
    return write_rate_run(tmp_path_factory.mktemp("rates") / "run")


@pytest.fixture(scope="module")
def rate_summary(rate_run) -> pd.DataFrame:
    return summarize(load_run(rate_run))


def test_a_rate_tiers_requests_per_s_is_its_rate(rate_summary):
    # the span runs from the first scheduled send to the last end: the phase's spawn and drain are not in it
    short = rate_summary[rate_summary["tier_rate"] < 8]
    assert list(short["requests_per_s"]) == pytest.approx(list(short["tier_rate"]), rel=0.05)
    for _, tier in rate_summary.iterrows():
        sends = [s.at_s for s in arrival_schedule("constant", tier["tier_rate"], DURATION_S)]
        e2e_s = max(E2E_S, TTFT_BY_RATE_S[tier["tier_rate"]] + 0.05)
        assert tier["span_s"] == pytest.approx(sends[-1] + 0.001 + e2e_s - sends[0])
        assert tier["requests_per_s"] == pytest.approx(len(sends) / tier["span_s"])
        assert tier["output_tokens_per_s"] == pytest.approx(
            tier["requests_per_s"] * tier["output_tokens_mean"], rel=1e-9
        )


def test_a_repeated_rate_tiers_span_adds_its_repeats_sends(tmp_path):
    first = rate_records()
    later = [
        {**r, "record_id": f"again-{r['record_id']}", "repeat": 1, "wall_start": r["wall_start"] + 500.0,
         "scheduled_wall": r["scheduled_wall"] + 500.0}
        for r in first
    ]  # fmt: skip
    summary = summarize(
        load_run(write_results_folder(tmp_path / "run", [*(r | {"repeat": 0} for r in first), *later]))
    )
    once = summarize(load_run(write_results_folder(tmp_path / "once", first)))
    assert list(summary["span_s"]) == pytest.approx(list(2 * once["span_s"]))
    assert list(summary["requests_per_s"]) == pytest.approx(list(once["requests_per_s"]))


def test_a_rate_campaigns_figures_have_the_rates_on_their_axis(rate_summary):
    figure = figure_metrics(rate_summary, "short-baseline", band=False)
    ttft_panel = figure.axes[0]
    assert list(ttft_panel.lines[0].get_xdata()) == [2.0, 4.0, 8.0]
    assert list(ttft_panel.lines[0].get_ydata()) == pytest.approx([0.1, 0.5, 3.5])
    assert ttft_panel.get_xlabel() == "rate (req/s)"
    assert "against rate (req/s)" in figure._suptitle.get_text()


def test_a_rate_campaigns_capacity_is_the_largest_rate_meeting_the_slo(rate_summary):
    capacity = capacity_at_slo(rate_summary, SLO)
    row = capacity.iloc[0]
    assert row["load_unit"] == "req/s"
    assert (row["max_users_meeting_slo"], row["first_failing_users"], row["tested_max_users"]) == (4, 8, 8)
    # TTFT crosses 2 s half way from 0.5 s (4/s) to 3.5 s (8/s)
    assert row["estimated_users"] == pytest.approx(6.0)
    shown = display_capacity(capacity).iloc[0]
    assert shown["largest tier meeting SLO"] == "4 req/s" and shown["estimated load"] == "~6 req/s"
    assert shown["first failing tier"] == "8 req/s"
    assert recommendations(capacity).iloc[0]["recommendation"] == "for short-baseline, sim holds ~6 req/s"


def test_the_tier_table_labels_rate_tiers_by_their_rate(rate_summary):
    table = display_tiers(rate_summary)
    assert list(table["rate"]) == ["2 req/s", "4 req/s", "8 req/s"] and "users" not in table


def test_a_session_kinds_rate_counts_sessions(tmp_path):
    run = write_rate_run(tmp_path / "run", kind="multi-turn", conversation="multi-turn-session")
    summary = summarize(load_run(run))
    assert display_tiers(summary)["rate"].iloc[0] == "2 sessions/s"
    assert (
        figure_metrics(summary, "multi-turn-session", band=False).axes[0].get_xlabel() == "rate (sessions/s)"
    )


def test_users_and_rates_of_a_comparison_get_figures_and_capacity_rows_apart(rate_summary, tmp_path):
    users = rate_summary.copy()
    users["tier_rate"] = float("nan")
    users["tier_users"] = [1, 2, 4]
    users["series"] = "users-run/sim"
    both = pd.concat([users, rate_summary], ignore_index=True)
    files = write_figures(both, tmp_path / "figures", band=False)
    assert sorted(f.path.name for f in files) == [
        "grid-rate.png",
        "grid.png",
        "metrics-short-baseline-rate.png",
        "metrics-short-baseline.png",
    ]
    assert figure_count(both) == len(files)
    capacity = capacity_at_slo(both, SLO).set_index("series")
    assert (
        capacity.loc["sim", "load_unit"] == "req/s" and capacity.loc["users-run/sim", "load_unit"] == "users"
    )
    assert capacity.loc["users-run/sim", "max_users_meeting_slo"] == 2
    tiers = display_tiers(both)
    assert list(tiers["users"]) == ["1", "2", "4", "-", "-", "-"]
    assert list(tiers["rate"]) == ["-", "-", "-", "2 req/s", "4 req/s", "8 req/s"]


def test_the_report_of_a_rate_campaign_renders(rate_run, tmp_path):
    parser = argparse.ArgumentParser(prog="grill")
    cli.configure_parser(parser.add_subparsers(dest="command").add_parser("report"), "report")
    out = tmp_path / "report"
    assert cli.run(parser.parse_args(["report", str(rate_run), "--out", str(out), "--no-progress"])) == 0
    assert sorted(p.name for p in out.glob("*.png")) == ["grid-rate.png", "metrics-short-baseline-rate.png"]
    page = (out / "report.html").read_text()
    assert "8 req/s" in page and "~6 req/s" in page
    summary = json.loads((out / "summary.json").read_text())
    assert [t["tier_rate"] for t in summary["tiers"]] == [2.0, 4.0, 8.0]
    assert summary["capacity"][0]["load_unit"] == "req/s"


def test_compare_names_rate_tiers_by_their_rate(rate_run, tmp_path):
    other = write_rate_run(tmp_path / "other", run_id="other")
    runs = load_runs([("base", rate_run), ("other", other)])
    report = assemble(runs, SLO, compare=True)
    assert list(dict.fromkeys(report.comparisons["tier"])) == ["2 req/s", "4 req/s", "8 req/s"]


def session_records(
    backend: str, kind: str, tier_loads: list[tuple[int, float | None]], conversation: str = ""
) -> list[dict]:
    """Two sessions of three turns (steps) per tier of `tier_loads` (tier_users, tier_rate): a rate tier's
    sessions are sent by the arrival process, their turns closed-loop (the session's scheduled_wall)."""
    conversation = conversation or ("agent" if kind == "agentic" else "chat")
    records = []
    for tier_index, (users, rate) in enumerate(tier_loads):
        for session in range(2):
            start = START_WALL + 100.0 * tier_index + session
            for turn in range(3):
                records.append(
                    make_record(
                        record_id=f"{backend}-{tier_index}-{session}-{turn}",
                        target=f"{backend}/grill-sim/{conversation}",
                        backend=backend,
                        conversation=conversation,
                        kind=kind,
                        tier_index=tier_index,
                        tier_users=users,
                        tier_rate=rate,
                        user_id=session,
                        conversation_id=f"{conversation}:{session}",
                        turn=turn,
                        scheduled_wall=start if rate else None,
                        wall_start=start + 2.0 * turn,
                        prompt_tokens=1000 * (turn + 1),
                    )
                )
    return records


@pytest.fixture(scope="module")
def session_rate_run(tmp_path_factory) -> Path:
    """Multi-turn and agent targets of the simulator at 1 and 2 sessions/s, and of `sim-users` at 4 users."""
    records = [
        *session_records("sim", "multi-turn", [(0, 1.0), (0, 2.0)]),
        *session_records("sim", "agentic", [(0, 1.0), (0, 2.0)]),
        *session_records("sim-users", "multi-turn", [(4, None)]),
        *session_records("sim-users", "agentic", [(4, None)]),
    ]
    return write_results_folder(tmp_path_factory.mktemp("session-rates") / "run", records)


def test_the_turn_and_step_tables_label_rate_tiers_by_their_rate_and_user_tiers_by_users(session_rate_run):
    tables = summarize_all(load_run(session_rate_run))
    for table, conversation in (
        (display_turns(tables.turns), "chat"),
        (display_agent_steps(tables.agent_steps), "agent"),
    ):
        blocks = table.groupby(["series", "conversation"])
        rates = blocks.get_group(("sim", conversation))
        assert list(rates["rate"]) == [*["1 sessions/s"] * 3, *["2 sessions/s"] * 3]
        assert (rates["users"] == MISSING).all()
        users = blocks.get_group(("sim-users", conversation))
        assert list(users["users"]) == ["4"] * 3 and (users["rate"] == MISSING).all()
    sessions = tables.sessions.groupby("target")["tier_rate"].unique()
    assert list(sessions["sim/grill-sim/agent"]) == [1.0, 2.0]
    assert sessions["sim-users/grill-sim/agent"].size == 1 and pd.isna(
        sessions["sim-users/grill-sim/agent"][0]
    )


def test_the_printed_turn_and_step_tables_show_one_load_column_per_block(session_rate_run, capsys):
    assert grill("report", str(session_rate_run), "--format", "table") == 0
    blocks = {
        block.splitlines()[0]: block.splitlines()[1:] for block in capsys.readouterr().out.split("\n\n")
    }
    for what in ("per turn", "per agent step"):
        conversation = "chat" if what == "per turn" else "agent"
        rate_header, _, *rate_rows = blocks[f"sim · {conversation} ({what})"]
        assert rate_header.split()[0] == "rate" and " users " not in rate_header
        assert [row.split("  ")[0] for row in rate_rows] == [*["1 sessions/s"] * 3, *["2 sessions/s"] * 3]
        users_header, _, *users_rows = blocks[f"sim-users · {conversation} ({what})"]
        assert users_header.split()[0] == "users" and "rate" not in users_header
        assert [row.split()[0] for row in users_rows] == ["4"] * 3


def test_the_html_turn_and_step_tables_show_a_rate_tiers_rate(session_rate_run, tmp_path):
    out = tmp_path / "report"
    assert grill("report", str(session_rate_run), "--out", str(out), "--no-progress") == 0
    page = (out / "report.html").read_text()
    for heading, conversation in (
        ("<h2>Multi-turn: per turn</h2>", "chat"),
        ("<h2>Agent sessions: per step</h2>", "agent"),
    ):
        section = (
            page.split(heading)[1].split("<h2>")[0].split(f"<h3>{conversation}</h3>")[1].split("<h3>")[0]
        )
        assert "<th>rate</th><th>users</th>" in section
        assert section.count("<td>1 sessions/s</td>") == 3 and section.count("<td>2 sessions/s</td>") == 3
        assert (
            section.count('<td class="num">-</td><td class="num">4</td>') == 3
        )  # the users tier: no rate, 4 users
    sessions = pd.read_csv(out / SESSIONS_CSV)
    assert sorted(sessions["tier_rate"].dropna().unique()) == [1.0, 2.0]


def test_a_request_rate_tiers_turns_are_in_req_per_s(tmp_path):
    """A kind whose one send is a request (a dataset's conversations) counts its rate in requests."""
    records = session_records("sim", "dataset", [(0, 3.0)])
    turns = summarize_all(load_run(write_results_folder(tmp_path / "run", records))).turns
    assert list(display_turns(turns)["rate"]) == ["3 req/s"] * 3 and "users" not in display_turns(turns)


def test_a_rate_search_says_its_brackets_unit():
    bisection = Bisection.of(Search(rate=[2, 16]))
    bisection.record(Probe(2, True))
    found = {"run_label": "r", **bisection.as_json("a"), "by": "rate", "unit": "req/s", "bracket": [2, 16]}
    shown = display_searches(pd.DataFrame([found], columns=SEARCH_COLUMNS)).iloc[0]
    assert shown["searched"] == "rate 2 to 16 req/s" and shown["largest passing"] == "2 req/s"


def test_a_mix_personas_turns_count_the_mixs_sessions(tmp_path):
    """A mix's rate counts its sessions, whatever its personas' kinds: its persona turns say so, as its
    persona rows in the tier table do."""
    records = [
        {**record, "target": "sim/grill-sim/mix"}
        for record in [
            *session_records("sim", "dataset", [(0, 2.0)], conversation="replayed"),
            *session_records("sim", "multi-turn", [(0, 2.0)], conversation="chat"),
        ]
    ]
    phases = phases_from_records(_normalized(pd.DataFrame(records))).drop_duplicates("tier_index")
    phases = phases.assign(kind="mix", conversation="whole tier: replayed 50, chat 50", note="")
    run = load_run(write_results_folder(tmp_path / "run", records, phases=phases))
    report = assemble([LabelledRun("run", run)], SLO, compare=False)
    personas = report.summary[report.summary["mix"] != report.summary["conversation"]]
    assert set(display_tiers(personas)["rate"]) == {"2 sessions/s"}
    turns = report.turns.sort_values(["conversation", "turn"])
    assert list(turns["conversation"]) == [*["chat"] * 3, *["replayed"] * 3]
    assert list(display_turns(turns)["rate"]) == ["2 sessions/s"] * 6

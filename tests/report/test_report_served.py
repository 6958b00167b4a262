"""Capacity is what was served on schedule: real headless runs of rate tiers against the simulated engine
whose sends could not go out on time (max_in_flight 1 at 20 req/s; 1e9 req/s, stopped at its time cap)
are no verdict on their rate, and the report's headline says why."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from grill_locust.report import summarize
from grill_locust.report.load import load_run
from grill_locust.run.exit_codes import TIER_INCOMPLETE
from grill_locust.sim import SimProcess
from tests.report.test_report_cli import grill
from tests.run.conftest import only_run_dir, run_locust, write_scenario

pytestmark = pytest.mark.slow

SHORT = {"name": "short", "kind": "short-baseline", "prompt_tokens": 40}


@pytest.fixture(scope="module")
def sim() -> Any:
    with SimProcess.start(profile="vllm") as process:
        yield process


def run_and_report(sim: SimProcess, tmp_path: Path, load: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The run's exit code and its report's summary.json."""
    scenario = {
        "name": "served",
        "backends": [{"name": "sim", "engine": "sim", "url": sim.url}],
        "models": [{"name": "grill-sim", "max_tokens": 8, "ignore_eos": True}],
        "conversations": [SHORT],
        "targets": [{"backend": "sim", "conversation": "short"}],
        "load": {"pause_s": 0.1, "engine_wait_s": 0, **load},
        "slo": {"ttft_p50_s": 5.0, "e2e_p50_s": 10.0},
    }
    path = write_scenario(tmp_path / "s.yaml", scenario)
    done = run_locust(["--scenario", str(path), "--results-dir", str(tmp_path / "results")], tmp_path)
    out = tmp_path / "report"
    assert grill("report", str(only_run_dir(tmp_path / "results")), "--out", str(out), "--no-progress") == 0
    return done.returncode, json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def one_slot(sim: SimProcess, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], Path]:
    """20 req/s through max_in_flight 1: the exit code, the report's summary.json, the results folder."""
    tmp_path = tmp_path_factory.mktemp("one-slot")
    code, summary = run_and_report(sim, tmp_path, {"rates": [20], "duration_s": 2.0, "max_in_flight": 1})
    return code, summary, only_run_dir(tmp_path / "results")


def test_sends_that_waited_for_max_in_flight_are_no_verdict_on_their_rate(one_slot, capsys):
    code, summary, _ = one_slot
    assert code == 0
    (tier,) = summary["tiers"]
    # 20 req/s of ~0.1 s requests through one slot: most sends wait (a loaded machine may add sends late
    # for want of CPU: then those are counted first)
    assert re.fullmatch(
        rf"(\d+) of {tier['requests']} sends (waited for max_in_flight 1|late .*, \d+ waited for "
        r"max_in_flight 1\): the load generator fell behind)",
        tier["not_served"],
    ), tier["not_served"]
    assert int(tier["not_served"].split(" of ")[0]) > 0.5 * tier["requests"]
    (capacity,) = summary["capacity"]
    assert capacity["max_users_meeting_slo"] == 0 and capacity["not_served_users"] == 20
    (recommendation,) = summary["recommendations"]
    assert recommendation["recommendation"] == (
        f"for short, sim: 20 req/s not served on schedule ({tier['not_served']})"
    )
    assert "holds" not in capsys.readouterr().out


def test_the_sends_that_waited_are_phases_csvs_own_column_and_the_report_reads_it(one_slot, tmp_path):
    _, summary, folder = one_slot
    (tier,) = summary["tiers"]
    phases = pd.read_csv(folder / "phases.csv")
    (row,) = phases.to_dict("records")
    assert row["max_in_flight"] == 1 and row["waited_for_max_in_flight"] > 0.5 * tier["requests"]
    # the report's count is the column's, whatever the note says; a folder written before the column
    # was kept falls back on the note
    for name, edit in (
        ("no-note", lambda frame: frame.assign(note="")),
        (
            "before-the-column",
            lambda frame: frame.drop(columns=["max_in_flight", "waited_for_max_in_flight"]),
        ),
    ):
        copy = tmp_path / name
        shutil.copytree(folder, copy)
        edit(phases).to_csv(copy / "phases.csv", index=False)
        (served,) = summarize(load_run(copy))["not_served"]
        waited = int(row["waited_for_max_in_flight"])
        assert f"{waited} waited for max_in_flight 1" in served or served.startswith(
            f"{waited} of {tier['requests']} sends waited for max_in_flight 1"
        ), (name, served)


def test_a_tier_stopped_at_its_time_cap_is_no_verdict_and_fails_the_run(sim, tmp_path, capsys):
    code, summary = run_and_report(
        sim, tmp_path, {"rates": [4, 1e9], "duration_s": 1.0, "tier_timeout_s": 2.0}
    )
    assert code == TIER_INCOMPLETE
    served, unserved = summary["tiers"]
    assert served["not_served"] == "" and served["complete"]
    assert unserved["not_served"].startswith("incomplete: time cap 2 s reached; "), unserved["not_served"]
    assert "the load generator fell behind" in unserved["not_served"]
    (capacity,) = summary["capacity"]
    assert capacity["max_users_meeting_slo"] == 4 and capacity["not_served_users"] == 1e9
    (recommendation,) = summary["recommendations"]
    assert recommendation["recommendation"] == (
        f"for short, sim holds >= 4 req/s; 1e+09 req/s not served on schedule ({unserved['not_served']})"
    )
    assert "holds >= 1e+09" not in capsys.readouterr().out

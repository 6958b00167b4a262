"""One verdict on a tier, on every surface: the live log, phases.csv, summary.csv and report.html judge a
saturated load generator by one function (grill_locust/verdicts.py), so they cannot disagree."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from grill_locust.cli import main
from grill_locust.record import RequestRecord
from grill_locust.report import load_run, summarize
from grill_locust.run.phase import Phase, UsersTier
from grill_locust.run.progress import PhaseProgress
from grill_locust.verdicts import SATURATION_CPU_PCT, saturation_text
from tests.run.conftest import LOCUSTFILE, only_run_dir, sim_scenario, write_scenario
from tests.synthetic import START_WALL, make_record, write_results_folder

pytestmark = pytest.mark.slow

ITERATIONS = 21
TARGET = "sim/grill-sim/short-baseline"

# The product's locustfile with the worker's self-check scripted: its lags calm, and the CPU reading
# each record carries, tier by tier (the worker's phase says which): in the first, one busy second
# (95 %) then 20 idle ones (30 %), whose maximum is past SATURATION_CPU_PCT and whose mean is not; in
# the second, 90 % throughout.
SCRIPTED_LOCUSTFILE = f"""
exec(open({str(LOCUSTFILE)!r}).read())
from collections import Counter
from locust import events
import grill_locust.run.selfcheck as selfcheck
from grill_locust.run.state import run_state

WORKER = []
READS = Counter()

@events.test_start.add_listener
def keep_worker(environment, **kw):
    WORKER.append(run_state(environment).worker)

def scripted_cpu(self):
    phase = WORKER[0].phase if WORKER else None
    tier = phase.tier_index if phase is not None else 0
    READS[tier] += 1
    if tier == 0:
        return 95.0 if READS[tier] == 1 else 30.0
    return 90.0

selfcheck.SelfCheck.cpu_pct = property(scripted_cpu, lambda self, value: None)
selfcheck.SelfCheck.lag_p99_ms = property(lambda self: 0.5, lambda self, value: None)
selfcheck.SelfCheck.read_lag_p99_ms = property(lambda self: None)
"""


def grill_report(run_dir: Path, out: Path) -> str:
    assert main(["report", str(run_dir), "--out", str(out), "--no-progress"]) == 0
    return (out / "report.html").read_text(encoding="utf-8")


def test_a_tier_whose_cpu_maximum_and_mean_disagree_gets_one_verdict_everywhere(tmp_path: Path) -> None:
    locustfile = tmp_path / "scripted.py"
    locustfile.write_text(SCRIPTED_LOCUSTFILE)
    data = sim_scenario(
        conversation={"name": "short", "kind": "short-baseline", "prompt_tokens": 40},
        tiers=[1, 2],
        iterations=ITERATIONS,
        max_tokens=8,
    )
    data["load"]["think_time_s"] = 0
    scenario = write_scenario(tmp_path / "s.yaml", data)
    done = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "--scenario", str(scenario),
         "--results-dir", str(tmp_path / "r")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "r")
    records = pd.read_parquet(run_dir / "records.parquet")
    cpu = records.groupby("tier_index")["worker_cpu"]
    # the script took: the first tier's readings peak past the threshold, their mean stays under it
    assert cpu.max().tolist() == [95.0, 90.0] and cpu.size().tolist() == [ITERATIONS, 2 * ITERATIONS]
    assert cpu.mean().iloc[0] < SATURATION_CPU_PCT < cpu.max().iloc[0]
    expected = ["", saturation_text(0.5, 90.0)]
    assert expected[1].startswith("LOAD GENERATOR SATURATED (cpu 90%)")

    # the live log: the line each tier ends with
    live = [
        next(
            (m.group(1) for m in re.finditer(rf"tier {i}/2: (LOAD GENERATOR SATURATED[^\n]*)", done.stderr)),
            "",
        )
        for i in (1, 2)
    ]
    assert live == expected, done.stderr[-3000:]
    # phases.csv: the tier's note
    phases = pd.read_csv(run_dir / "phases.csv").sort_values("tier_index")
    notes = phases["note"].astype("string").fillna("").tolist()
    assert ["SATURATED" in note for note in notes] == [False, True], notes
    assert expected[1] in notes[1]
    # summary.csv, which the run wrote at its end
    summary = pd.read_csv(run_dir / "summary.csv").sort_values("tier_index")
    assert summary["saturated"].tolist() == [False, True]
    assert summary["worker_cpu_mean"].tolist() == pytest.approx([cpu.mean().iloc[0], 90.0])
    # report.html: the saturated tier's row is flagged with its cause, the other one names none
    page = grill_report(run_dir, tmp_path / "report")
    flagged = re.findall(r'<tr class="flagged">(.*?)</tr>', page)
    assert len(flagged) == 1 and "saturated (load generator: cpu 90%)" in flagged[0], flagged
    assert "cpu 95%" not in page


def test_the_tier_progress_and_the_summary_judge_the_same_records_alike(tmp_path: Path) -> None:
    """Two workers, one busy (90 %) with few records beside an idle one's many (30 %): the mean of all
    25 readings (42 %) would hide the busy worker; the tier's CPU is the busiest worker's mean, in the
    master's tier progress (live log, phases.csv) as in the summary."""
    records = [
        make_record(record_id=f"{worker}{i}", worker_id=worker, wall_start=START_WALL + i, worker_cpu=cpu)
        for worker, count, cpu in (("a", 20, 30.0), ("b", 5, 90.0))
        for i in range(count)
    ]
    progress = PhaseProgress(UsersTier(Phase(0, "run", TARGET, 0, 1, 25, 0.0), time_cap_s=60.0))
    for record in records:
        progress.count_record(RequestRecord(**record), keep_for_tier_row=False)
    assert progress.cpu_pct == 90.0
    assert progress.saturation == saturation_text(0.5, 90.0) != ""
    note = progress.compose_note()
    assert progress.saturation in note
    row = {
        **records[0],
        "start_wall": START_WALL,
        "end_wall": START_WALL + 30,
        "complete": True,
        "note": note,
    }
    write_results_folder(tmp_path, records, phases=[row])
    summary = summarize(load_run(tmp_path))
    assert summary["worker_cpu_mean"].tolist() == [progress.cpu_pct]
    assert summary["saturated"].tolist() == [True]
    assert "saturated (load generator: cpu 90%)" in summary["flags"].iloc[0]

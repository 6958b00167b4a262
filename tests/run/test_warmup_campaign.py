"""Warmup and ramp in a real headless Locust campaign against the simulated engine: a tier's users spawned
over ramp_s, requests started within warmup_s of the tier's start or among a developer's first
warmup_requests_per_user recorded with warmup true, left out of the summary's figures and counted beside them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from grill_locust.report import summarize
from grill_locust.report.load import RunData, load_run
from tests.run.conftest import only_run_dir, run_locust, write_scenario

pytestmark = pytest.mark.slow

TIERS = [2, 4]  # the first tier's start also waits for the load generator's own start
USERS = TIERS[-1]
ITERATIONS = 4
RAMP_S = 3.0  # 4 users at 4/3 users/s: first requests 0.75 s apart (without ramp_s, 4 users/s: 0.25 s)
WARMUP_S = 0.6  # the first developer's early requests fall in it, the last developer's none
WARMUP_REQUESTS = 1  # per developer


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunData:
    tmp_path = tmp_path_factory.mktemp("warmup")
    data: dict[str, Any] = {
        "name": "warmup",
        "backends": [{"name": "sim", "engine": "sim", "profile": "vllm"}],
        "models": [{"name": "grill-sim", "max_tokens": 8, "ignore_eos": True}],
        "targets": [{"name": "short", "backend": "sim", "conversation": "short-baseline"}],
        "load": {
            "tiers": TIERS,
            "iterations": ITERATIONS,
            "pause_s": 0.2,
            "think_time_s": 0.05,
            "engine_wait_s": 0,
            "ramp_s": RAMP_S,
            "warmup_s": WARMUP_S,
            "warmup_requests_per_user": WARMUP_REQUESTS,
        },
    }
    scenario = write_scenario(tmp_path / "s.yaml", data)
    done = run_locust(["--scenario", str(scenario), "--results-dir", str(tmp_path / "results")], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return load_run(only_run_dir(tmp_path / "results"))


def since_tier_start_s(run: RunData) -> pd.Series:
    """Each record's start, seconds after its tier's start in phases.csv."""
    starts = run.phases.set_index("tier_index")["start_wall"].astype("float64")
    return run.records["wall_start"] - run.records["tier_index"].map(starts)


def developer_order(records: pd.DataFrame) -> pd.Series:
    """Each record's place among its developer's requests in the tier, in the order they started."""
    return records.groupby(["tier_index", "developer"])["wall_start"].rank(method="first") - 1


def test_warmup_requests_are_marked_and_still_count_toward_the_tiers_iterations(run: RunData) -> None:
    records = run.records
    assert run.phases["complete"].all()
    assert len(records) == sum(TIERS) * ITERATIONS and (records["status"] == "ok").all()
    marked = records["warmup"].astype(bool)
    in_time = since_tier_start_s(run) < WARMUP_S
    first = developer_order(records) < WARMUP_REQUESTS
    assert marked.tolist() == (in_time | first).tolist()
    # both rules were at work: some requests are warmup by time alone, some by being a developer's first
    assert (marked & in_time & ~first).sum() >= 1
    assert (marked & ~in_time & first).sum() >= 2
    assert (~marked).sum() >= sum(TIERS) * (ITERATIONS - 2)


def test_ramp_s_spawns_the_tiers_users_evenly_over_it(run: RunData) -> None:
    last_tier = run.records[run.records["tier_index"] == len(TIERS) - 1]
    firsts = np.sort(last_tier.groupby("developer")["wall_start"].min().to_numpy())
    gaps = np.diff(firsts)
    assert len(firsts) == USERS
    # Locust starts one user every ramp_s / users seconds
    assert gaps == pytest.approx([RAMP_S / USERS] * (USERS - 1), abs=0.35), gaps


def test_the_summary_leaves_warmup_out_and_counts_it_beside(run: RunData) -> None:
    summary = summarize(run).set_index("tier_index")
    for tier_index, records in run.records.groupby("tier_index"):
        row, phase = summary.loc[tier_index], run.phases.set_index("tier_index").loc[tier_index]
        measured = records[~records["warmup"].astype(bool)]
        assert row["warmup_requests"] == len(records) - len(measured) > 0
        assert row["requests"] == row["ok_requests"] == len(measured)
        assert row["cooldown_requests"] == 0
        for name, column in (("ttft", "ttft_s"), ("e2e", "e2e_s"), ("tpot", "tpot_s")):
            for q in (50, 90, 99):
                expected = np.percentile(measured[column].dropna(), q)
                assert row[f"{name}_p{q}_s"] == pytest.approx(expected), (name, q)
        # the tier's span starts with its first measured request
        span_s = float(phase["end_wall"]) - measured["wall_start"].min()
        assert row["span_s"] == pytest.approx(span_s)
        assert row["output_tokens_per_s"] == pytest.approx(measured["output_tokens"].sum() / span_s)
        assert row["requests_per_s"] == pytest.approx(len(measured) / span_s)


def last_tier(run: RunData) -> RunData:
    """The run's last tier alone, its records copied (to mark them otherwise)."""
    records = run.records[run.records["tier_index"] == len(TIERS) - 1].reset_index(drop=True)
    phases = run.phases[run.phases["tier_index"] == len(TIERS) - 1]
    return RunData(records.copy(), phases, None, run.meta)


def test_cooldown_requests_stay_in_the_figures_and_are_counted(run: RunData) -> None:
    tier = last_tier(run)
    records = tier.records
    measured = ~records["warmup"].astype(bool)
    slowest = records[measured]["e2e_s"].nlargest(3).index
    records["cooldown"] = records.index.isin(slowest)
    row = summarize(tier).iloc[0]
    assert row["cooldown_requests"] == 3
    assert row["requests"] == measured.sum()
    assert row["e2e_p99_s"] == pytest.approx(np.percentile(records.loc[measured, "e2e_s"], 99))


def test_without_warmup_records_the_summary_counts_none_and_spans_the_whole_tier(run: RunData) -> None:
    tier = last_tier(run)
    tier.records["warmup"] = None
    row = summarize(tier).iloc[0]
    assert row["warmup_requests"] == 0 and row["requests"] == len(tier.records)
    phase = tier.phases.iloc[0]
    assert row["span_s"] == pytest.approx(float(phase["end_wall"]) - float(phase["start_wall"]))

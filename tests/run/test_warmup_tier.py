"""`load.warmup_requests` counted over the whole tier, as AIPerf and `vllm bench` count: in a real headless
Locust run on two worker processes against the simulated engine, the tier's first N requests by send
time are left out of its figures whatever developer or worker sent them; a tier that warmup covers
whole (by warmup_requests or warmup_s) is flagged and warned, never shown as a clean row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from grill_locust.report import summarize
from grill_locust.report.load import RunData, load_run
from tests.run.conftest import only_run_dir, read_truth, run_locust, write_scenario

pytestmark = pytest.mark.slow

USERS, ITERATIONS, WARMUP = 4, 3, 4
TIERS = [USERS, 1]  # the second tier's 3 requests are all within its first 4


def campaign(tmp_path: Path, load: dict[str, Any], processes: int) -> tuple[RunData, str, list[dict]]:
    truth_path = tmp_path / "truth.jsonl"
    data: dict[str, Any] = {
        "name": "warmup-tier",
        "backends": [
            {"name": "sim", "engine": "sim", "profile": "vllm", "sim_args": {"truth_log": str(truth_path)}}
        ],
        "models": [{"name": "grill-sim", "max_tokens": 8, "ignore_eos": True}],
        "targets": [{"name": "short", "backend": "sim", "conversation": "short-baseline"}],
        "load": {"iterations": ITERATIONS, "pause_s": 0.2, "think_time_s": 0.05, "engine_wait_s": 0, **load},
    }
    scenario = write_scenario(tmp_path / "s.yaml", data)
    args = ["--scenario", str(scenario), "--results-dir", str(tmp_path / "results")]
    done = run_locust(["--processes", str(processes), *args] if processes > 1 else args, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    run = load_run(only_run_dir(tmp_path / "results"))
    # every request a record, each once: lost 0, duplicated 0
    truth_ids = [line["request_id"] for line in read_truth(truth_path)]
    assert sorted(run.records["record_id"]) == sorted(truth_ids)
    return run, done.stderr, read_truth(truth_path)


@pytest.fixture(scope="module")
def counted(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunData, str, list[dict]]:
    load = {"tiers": TIERS, "warmup_requests": WARMUP}
    return campaign(tmp_path_factory.mktemp("warmup-tier"), load, processes=2)


def test_the_tiers_first_requests_by_send_time_are_warmup_across_users_and_workers(
    counted: tuple[RunData, str, list[dict]],
) -> None:
    run, _, _ = counted
    tier = run.records[run.records["tier_index"] == 0]
    assert len(tier) == USERS * ITERATIONS and (tier["status"] == "ok").all()
    assert tier["worker_id"].nunique() == 2  # the count spans both workers' users
    row = summarize(run).set_index("tier_index").loc[0]
    assert row["warmup_requests"] == WARMUP
    assert row["requests"] == row["ok_requests"] == USERS * ITERATIONS - WARMUP == 8
    assert row["flags"] == ""
    # the four earliest sends are the ones left out: the span starts at the fifth, the figures are the rest
    by_send = tier.sort_values("wall_start")
    measured = by_send.iloc[WARMUP:]
    end_wall = float(run.phases.set_index("tier_index").loc[0, "end_wall"])
    assert row["span_s"] == pytest.approx(end_wall - measured["wall_start"].iloc[0])
    for name, column in (("ttft", "ttft_s"), ("e2e", "e2e_s")):
        assert row[f"{name}_p50_s"] == pytest.approx(np.percentile(measured[column], 50)), name


def test_a_tier_warmup_covers_whole_is_flagged_warned_and_not_a_clean_row(
    counted: tuple[RunData, str, list[dict]],
) -> None:
    run, stderr, _ = counted
    row = summarize(run).set_index("tier_index").loc[1]
    assert row["requests"] == 0 and row["warmup_requests"] == ITERATIONS
    assert row["tier_users"] == 1
    assert "no measured request (all 3 were warmup)" in row["flags"]
    assert "no successful requests" not in row["flags"]
    assert "no measured request: all 3 requests were warmup" in row["note"]
    assert "no measured request: all 3 requests were warmup" in stderr


def test_warmup_s_longer_than_the_tier_is_flagged_too(tmp_path: Path) -> None:
    run, stderr, _ = campaign(tmp_path, {"tiers": [2], "warmup_s": 600}, processes=1)
    assert run.records["warmup"].astype(bool).all() and (run.records["status"] == "ok").all()
    row = summarize(run).iloc[0]
    assert row["requests"] == 0 and row["warmup_requests"] == 2 * ITERATIONS
    assert row["tier_users"] == 2
    assert f"no measured request (all {2 * ITERATIONS} were warmup)" in row["flags"]
    assert "no measured request" in stderr
    assert pd.isna(row["ttft_p50_s"])

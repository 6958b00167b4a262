"""A rate tier of typing developers in a real headless Locust run against the simulated engine: each
session's first request leaves when its plan says (the arrival, then the developer's first burst of
typing and the debounce), and that planned wait is not counted as the load generator's lateness."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from grill_locust.scenario import validate_conversation
from grill_locust.verdicts import SCHEDULE_LAG_P99_LIMIT_S
from grill_locust.workload.autocomplete import AutocompletePlan
from grill_locust.workload.generators import build_workload
from tests.run.conftest import only_run_dir, read_truth, run_locust, write_scenario

pytestmark = pytest.mark.slow

DEBOUNCE_MS = 50
CONVERSATION: dict[str, Any] = {
    "name": "completions",
    "kind": "autocomplete",
    "prefix_tokens": 200,
    "suffix_tokens": 50,
    "requests": 2,
    "debounce_ms": DEBOUNCE_MS,
    "typing_cps": 20,
    "max_tokens": 8,
}


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, pd.DataFrame, list[dict]]:
    tmp_path = tmp_path_factory.mktemp("autocomplete-rate")
    truth_path = tmp_path / "truth.jsonl"
    data: dict[str, Any] = {
        "name": "autocomplete-rate",
        "backends": [
            {"name": "sim", "engine": "sim", "profile": "vllm", "sim_args": {"truth_log": str(truth_path)}}
        ],
        "models": [{"name": "grill-sim", "ignore_eos": True}],
        "conversations": [CONVERSATION],
        "targets": [{"name": "typing", "backend": "sim", "conversation": "completions"}],
        "load": {"rates": [3], "duration_s": 4, "pause_s": 0.2, "engine_wait_s": 0},
    }
    scenario = write_scenario(tmp_path / "s.yaml", data)
    done = run_locust(["--scenario", str(scenario), "--results-dir", str(tmp_path / "results")], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "results")
    records = pd.read_parquet(run_dir / "records.parquet")
    return records, pd.read_csv(run_dir / "phases.csv"), read_truth(truth_path)


def first_send_at_s(conversation_id: str) -> float:
    """When the session's plan sends its first request, seconds after the session began."""
    _, user_key, iteration = conversation_id.split(":")
    plan = build_workload(validate_conversation(CONVERSATION)).script(user_key, int(iteration))
    assert isinstance(plan, AutocompletePlan)
    return plan.requests[0].send_at_s


def test_the_plans_own_wait_is_not_schedule_lag(campaign: tuple[pd.DataFrame, pd.DataFrame, list]) -> None:
    records, phases, truth = campaign
    # every request a record, each once, and every record a request the engine saw
    assert records["record_id"].is_unique
    engine_saw = {line["request_id"] for line in truth}
    sent = records[records["status"] != "abandoned"]
    assert set(sent["record_id"]) <= engine_saw
    firsts = records[records["schedule_lag_s"].notna()]
    assert len(firsts) == records["conversation_id"].nunique() >= 5
    assert (firsts["turn"] == 0).all()
    planned = firsts["conversation_id"].map(first_send_at_s)
    assert (planned >= DEBOUNCE_MS / 1000).all()  # the plan's wait: the first burst and the debounce
    # the request left at the arrival plus that wait, and its lag is only what came on top
    left_after_s = firsts["wall_start"] - firsts["scheduled_wall"]
    assert np.allclose(left_after_s - planned, firsts["schedule_lag_s"], atol=1e-6)
    lag_p99_s = float(np.percentile(firsts["schedule_lag_s"], 99))
    assert 0 <= firsts["schedule_lag_s"].min() and lag_p99_s < SCHEDULE_LAG_P99_LIMIT_S, lag_p99_s
    note = phases["note"].iloc[0]
    assert pd.isna(note) or "LOAD-GENERATOR-BOUND" not in note, note

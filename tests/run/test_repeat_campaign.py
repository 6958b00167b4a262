"""`--repeat N`: the whole campaign N times into one results folder, on one simulator for the module."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from grill_locust.report import summarize
from grill_locust.report.load import load_run
from tests.run.conftest import only_run_dir, run_locust, write_scenario

TIERS = [1, 2]
ITERATIONS = 2
PROMPT_TOKENS = 600


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    from grill_locust.sim import SimProcess

    with SimProcess.start(profile="vllm", served_model_name="m") as sim:
        yield sim.url


def scenario(tmp_path: Path, url: str) -> Path:
    return write_scenario(
        tmp_path / "s.yaml",
        {
            "name": "repeat",
            "backends": [{"name": "engine", "engine": "vllm", "url": url}],
            "models": [{"name": "m", "max_tokens": 4, "ignore_eos": True}],
            "conversations": [{"name": "u", "kind": "unique-prompts", "prompt_tokens": PROMPT_TOKENS}],
            "targets": [{"backend": "engine", "model": "m", "conversation": "u"}],
            "load": {"tiers": TIERS, "iterations": ITERATIONS, "pause_s": 0, "think_time_s": 0},
        },
    )


def test_repeat_2_runs_every_tier_twice_into_one_folder_with_fresh_prompts(
    tmp_path: Path, sim_url: str
) -> None:
    done = run_locust(
        [
            "--scenario",
            str(scenario(tmp_path, sim_url)),
            "--results-dir",
            str(tmp_path / "r"),
            "--repeat",
            "2",
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "r")
    records = pd.read_parquet(run_dir / "records.parquet")
    per_walk = sum(users * ITERATIONS for users in TIERS)
    assert (records["status"] == "ok").all()
    assert records.groupby("repeat").size().to_dict() == {0: per_walk, 1: per_walk}
    assert records.groupby(["repeat", "tier_index"]).size().to_dict() == {
        (repeat, tier): users * ITERATIONS for repeat in (0, 1) for tier, users in enumerate(TIERS)
    }
    # the second walk sends new prompts: the engine's prefix cache holds none of them
    assert records.loc[records["repeat"] == 1, "cached_tokens"].max() < 32
    phases = pd.read_csv(run_dir / "phases.csv")
    assert sorted(zip(phases["repeat"], phases["tier_index"], strict=True)) == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]
    assert phases["complete"].all()
    assert json.loads((run_dir / "run.json").read_text())["repeats"] == 2
    summary = summarize(load_run(run_dir))
    assert list(summary["requests"]) == [2 * users * ITERATIONS for users in TIERS]


def test_repeat_below_1_is_refused_with_one_line(tmp_path: Path, sim_url: str) -> None:
    done = run_locust(["--scenario", str(scenario(tmp_path, sim_url)), "--repeat", "0"], tmp_path)
    assert done.returncode == 2
    assert "--repeat: expected a whole number >= 1, got 0" in done.stderr

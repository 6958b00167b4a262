"""Dataset replay in a real headless Locust campaign against the simulated engine: one run, three targets
(JSONL rows drawn by the seed, the same file in order, a ShareGPT file), its records read by the tests."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from grill_locust.scenario import load_scenario
from grill_locust.sim.text import render_chat, token_ids
from grill_locust.workload import build_workload
from grill_locust.workload.dataset import DatasetRow, load_dataset
from tests.run.conftest import only_run_dir, run_locust, write_scenario

pytestmark = pytest.mark.slow

DATASETS = Path(__file__).resolve().parents[1] / "workload" / "datasets"
USERS = 2
ITERATIONS = 3
MODEL_MAX_TOKENS = 16
SHAREGPT_MAX_TOKENS = 24  # more than a 16-token block: a reply carried forward shows in the cache
CHAT_LINES = [0, 1, 3, 4]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, Path]:
    tmp_path = tmp_path_factory.mktemp("dataset")
    shutil.copytree(DATASETS, tmp_path / "data", ignore=shutil.ignore_patterns("broken"))
    data: dict[str, Any] = {
        "name": "dataset",
        "backends": [{"name": "sim", "engine": "sim", "profile": "vllm"}],
        "models": [{"name": "grill-sim", "max_tokens": MODEL_MAX_TOKENS, "ignore_eos": True}],
        "conversations": [
            {"name": "seeded", "kind": "dataset", "path": "data/chat.jsonl"},
            {"name": "ordered", "kind": "dataset", "path": "data/chat.jsonl", "sample": "order"},
            {
                "name": "sharegpt",
                "kind": "dataset",
                "path": "data/sharegpt.json",
                "max_tokens": SHAREGPT_MAX_TOKENS,
            },
        ],
        "targets": [
            {"name": name, "backend": "sim", "conversation": name}
            for name in ("seeded", "ordered", "sharegpt")
        ],
        "load": {"tiers": [USERS], "iterations": ITERATIONS, "pause_s": 0.2, "think_time_s": 0.02},
    }
    scenario = write_scenario(tmp_path / "s.yaml", data)
    # run from another folder: the scenario's paths are read from its own folder
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    done = run_locust(["--scenario", str(scenario), "--results-dir", str(tmp_path / "results")], elsewhere)
    assert done.returncode == 0, done.stderr[-3000:]
    records = pd.read_parquet(only_run_dir(tmp_path / "results") / "records.parquet")
    return records, scenario


def rows_of(name: str) -> dict[int, DatasetRow]:
    return {row.line: row for row in load_dataset(str(DATASETS / name)).rows}


def first_request_tokens(row: DatasetRow) -> int:
    """Prompt tokens of the row's first request as the simulator counts them (its chat template)."""
    system = [{"role": "system", "content": row.system}] if row.system else []
    messages = [*system, *row.history, {"role": "user", "content": row.user_turns[0]}]
    return len(token_ids(render_chat(messages)))


def test_jsonl_rows_reach_the_engine_as_recorded_with_their_max_tokens(
    campaign: tuple[pd.DataFrame, Path],
) -> None:
    records, _ = campaign
    rows = rows_of("chat.jsonl")
    jsonl = records[records.target.isin(["seeded", "ordered"])]
    assert (jsonl["status"] == "ok").all() and (jsonl["kind"] == "dataset").all()
    assert len(jsonl) == 2 * USERS * ITERATIONS and (jsonl["turn"] == 0).all()
    for record in jsonl.itertuples():
        row = rows[int(record.trace_line)]
        # the engine counted exactly the recorded messages: system, history and question
        assert record.prompt_tokens == first_request_tokens(row)
        assert record.output_tokens == (row.max_tokens or MODEL_MAX_TOKENS)


def test_seed_sampling_draws_the_rows_the_workload_draws_anywhere(
    campaign: tuple[pd.DataFrame, Path],
) -> None:
    records, scenario_path = campaign
    seeded = records[records.target == "seeded"]
    conversation = next(c for c in load_scenario(scenario_path).conversations if c.name == "seeded")
    workload = build_workload(conversation)
    for record in seeded.itertuples():
        _, user_key, iteration = record.conversation_id.split(":")
        script = workload.script(user_key, int(iteration))
        assert record.trace_line == script.trace_line


def test_order_sampling_takes_the_rows_in_file_order(campaign: tuple[pd.DataFrame, Path]) -> None:
    records, _ = campaign
    ordered = records[records.target == "ordered"]
    sent = USERS * ITERATIONS
    expected = [CHAT_LINES[index % len(CHAT_LINES)] for index in range(sent)]
    # one walk through the file shared by the process's users: the first rows twice after the wrap
    assert Counter(ordered["trace_line"].astype(int)) == Counter(expected)


def test_sharegpt_replays_each_user_turn_with_the_engines_real_replies_carried_forward(
    campaign: tuple[pd.DataFrame, Path],
) -> None:
    records, _ = campaign
    rows = rows_of("sharegpt.json")
    sharegpt = records[records.target == "sharegpt"]
    assert (sharegpt["status"] == "ok").all()
    assert (sharegpt["output_tokens"] == SHAREGPT_MAX_TOKENS).all()  # the conversation's max_tokens
    assert sharegpt.conversation_id.nunique() == USERS * ITERATIONS
    for _, session in sharegpt.groupby("conversation_id"):
        session = session.sort_values("turn")
        row = rows[int(session["trace_line"].iloc[0])]
        assert list(session["turn"]) == list(range(len(row.user_turns)))
        assert session["prompt_tokens"].iloc[0] == first_request_tokens(row)
        for earlier, later in zip(session.iloc[:-1].itertuples(), session.iloc[1:].itertuples(), strict=True):
            # the cache holds the engine's own reply tokens: a hit past the earlier prompt means the
            # reply sent back is exactly the one generated (a recorded reply would miss)
            assert later.cached_tokens > earlier.prompt_tokens
            assert later.prompt_tokens > earlier.prompt_tokens + earlier.output_tokens

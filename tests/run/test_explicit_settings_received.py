"""Explicit beats default, as the engine received it: in a real headless Locust run against the simulated
engine, each kind's requests arrive with the conversation's written setting, else the model's written
one, else the kind's default (max_tokens, an agent's step and final max_tokens, a trace's ignore_eos),
and with the model's temperature, as the simulator's truth log records each request."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.run.conftest import only_run_dir, run_locust, truth_once_it_holds, write_scenario

pytestmark = pytest.mark.slow

# m32 writes max_tokens and ignore_eos; plain writes neither (so the kinds' defaults show)
MODELS = [
    {"name": "m32", "max_tokens": 32, "ignore_eos": False, "temperature": 0.5},
    {"name": "plain", "temperature": 0.25},
]
TEMPERATURE = {"m32": 0.5, "plain": 0.25}
AUTOCOMPLETE = {
    "kind": "autocomplete",
    "fim": "suffix",
    "requests": 2,
    "prefix_tokens": 50,
    "suffix_tokens": 20,
}
AGENTIC = {"kind": "agentic", "steps": 2, "system_tokens": 1500, "tool_result_tokens": 50}
# target (model/conversation) -> what each of its requests must arrive with: a set of max_tokens (an
# agent's steps and final answer differ), and ignore_eos
EXPECTED: dict[str, tuple[set[int], bool]] = {
    "m32/ac": ({32}, False),  # the model's max_tokens beats autocomplete's default 64
    "m32/ac-own": ({8}, False),  # the conversation's beats the model's
    "plain/ac": ({64}, False),  # the kind's default
    "m32/ag": ({32}, False),  # steps and final answer both take the model's
    "m32/ag-own": ({32, 9}, False),  # the conversation's final_max_tokens, the model's for the steps
    "plain/ag": ({256, 1024}, False),  # the kind's step and final defaults
    "m32/tr": ({20}, False),  # the model's ignore_eos false beats the trace's default true
    "m32/tr-eos": ({20}, True),  # the conversation's ignore_eos beats the model's
    "plain/tr": ({20}, True),  # the kind's default; max_tokens is the row's output_length
    "m32/ds": ({32}, False),
    "m32/ds-own": ({4}, False),
    "plain/ds": ({256}, False),  # a dataset kind has no max_tokens of its own: the model's default
    "m32/mt": ({32}, False),
}


def conversations(tmp_path: Path) -> list[dict[str, Any]]:
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 50, "output_length": 20}\n')
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "say something"}\n')
    tr = {"kind": "trace", "format": "mooncake", "path": str(trace)}
    ds = {"kind": "dataset", "path": str(rows)}
    return [
        {"name": "ac", **AUTOCOMPLETE},
        {"name": "ac-own", **AUTOCOMPLETE, "max_tokens": 8},
        {"name": "ag", **AGENTIC},
        {"name": "ag-own", **AGENTIC, "final_max_tokens": 9},
        {"name": "tr", **tr},
        {"name": "tr-eos", **tr, "ignore_eos": True},
        {"name": "ds", **ds},
        {"name": "ds-own", **ds, "max_tokens": 4},
        {"name": "mt", "kind": "multi-turn", "user_turns": 1, "system_tokens": 50, "turn_tokens": 20},
    ]


@pytest.fixture(scope="module")
def received(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    tmp_path = tmp_path_factory.mktemp("explicit-settings")
    targets = []
    for name in EXPECTED:
        model, conversation = name.split("/")
        targets.append({"name": name, "backend": model, "model": model, "conversation": conversation})
    # a simulator serves one model name: one backend per model, each with its truth log
    truth_paths = [tmp_path / f"truth-{model['name']}.jsonl" for model in MODELS]
    data: dict[str, Any] = {
        "name": "explicit-settings",
        "backends": [
            {"name": model["name"], "engine": "sim", "profile": "vllm", "sim_args": {"truth_log": str(path)}}
            for model, path in zip(MODELS, truth_paths, strict=True)
        ],
        "models": MODELS,
        "conversations": conversations(tmp_path),
        "targets": targets,
        "load": {"tiers": [1], "iterations": 1, "pause_s": 0.1, "think_time_s": 0, "engine_wait_s": 0},
    }
    scenario = write_scenario(tmp_path / "s.yaml", data)
    done = run_locust(["--scenario", str(scenario), "--results-dir", str(tmp_path / "results")], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    records = pd.read_parquet(only_run_dir(tmp_path / "results") / "records.parquet")
    truth = {}
    for model, path in zip(MODELS, truth_paths, strict=True):
        ids = set(records.loc[records["model"] == model["name"], "record_id"])
        truth.update({line["request_id"]: line for line in truth_once_it_holds(path, ids)})
    assert set(truth) == set(records["record_id"])  # every request a record, each once
    by_target: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record_id, target in zip(records["record_id"], records["target"], strict=True):
        by_target[target].append(truth[record_id])
    return by_target


@pytest.mark.parametrize("target", list(EXPECTED))
def test_the_engine_receives_the_conversations_then_the_models_then_the_kinds_setting(
    received: dict[str, list[dict[str, Any]]], target: str
) -> None:
    lines = received[target]
    assert lines, f"{target} sent nothing"
    max_tokens, ignore_eos = EXPECTED[target]
    assert {line["max_tokens"] for line in lines} == max_tokens
    assert {line["ignore_eos"] for line in lines} == {ignore_eos}
    assert {line["temperature"] for line in lines} == {TEMPERATURE[target.split("/")[0]]}

"""Explicit beats default: a setting written in the conversation wins, then one written in the model,
then the kind's default, for each kind, in the body the run sends (Target.sent_model, as run/user.py
sends it) and in `grill validate`'s max_tokens column."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from grill_locust.client import fim_request, request_for
from grill_locust.run import estimate
from grill_locust.scenario import Scenario, load_scenario
from grill_locust.workload.agentic import AgenticPlan, AgenticSession
from grill_locust.workload.generators import build_workload

MESSAGES = [{"role": "user", "content": "hi"}]


def scenario(tmp_path: Path, conversations: list[dict[str, Any]], models: list[dict[str, Any]]) -> Scenario:
    (tmp_path / "trace.jsonl").write_text('{"timestamp": 0, "input_length": 50, "output_length": 20}\n')
    (tmp_path / "rows.jsonl").write_text('{"prompt": "a"}\n')
    data = {
        "backends": [{"name": "s", "engine": "vllm", "url": "http://127.0.0.1:9"}],
        "models": models,
        "conversations": conversations,
        "targets": [
            {
                "name": f"{m['name']}/{c['name']}",
                "backend": "s",
                "model": m["name"],
                "conversation": c["name"],
            }
            for m in models
            for c in conversations
        ],
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_scenario(path)


def target(s: Scenario, name: str) -> Any:
    return next(t for t in s.targets if t.name == name)


def test_autocomplete_completions_take_the_conversations_then_the_models_then_the_kinds_max_tokens(
    tmp_path: Path,
) -> None:
    ac = {"kind": "autocomplete", "fim": "suffix"}
    s = scenario(
        tmp_path,
        [{"name": "ac", **ac}, {"name": "own", **ac, "max_tokens": 8}],
        [{"name": "m32", "max_tokens": 32}, {"name": "plain"}],
    )
    sent = {}
    for t in s.targets:
        sent[t.name] = fim_request(t.backend, t.sent_model, t.conversation, "a", "b")[1]["max_tokens"]
    assert sent == {"m32/ac": 32, "m32/own": 8, "plain/ac": 64, "plain/own": 8}


def test_agent_steps_take_the_models_max_tokens_over_the_kinds(tmp_path: Path) -> None:
    ag = {"kind": "agentic", "steps": 2, "tool_result_tokens": 50}
    s = scenario(
        tmp_path,
        [{"name": "ag", **ag}, {"name": "own", **ag, "final_max_tokens": 9}],
        [{"name": "m32", "max_tokens": 32}, {"name": "plain"}],
    )
    got = {}
    for t in s.targets:
        plan = build_workload(t.conversation, t.model).script("k", 0)
        assert isinstance(plan, AgenticPlan)
        got[t.name] = (plan.step_max_tokens, plan.final_max_tokens)
        request = AgenticSession(plan).next_request()
        assert request is not None
        body = request_for(t.backend, t.sent_model.with_settings(max_tokens=request.max_tokens), MESSAGES)[1]
        assert body["max_tokens"] == plan.step_max_tokens
    assert got == {"m32/ag": (32, 32), "m32/own": (32, 9), "plain/ag": (256, 1024), "plain/own": (256, 9)}


def test_a_trace_asks_ignore_eos_unless_the_conversation_or_the_model_wrote_false(tmp_path: Path) -> None:
    tr = {"kind": "trace", "format": "mooncake", "path": str(tmp_path / "trace.jsonl")}
    s = scenario(
        tmp_path,
        [{"name": "tr", **tr}, {"name": "off", **tr, "ignore_eos": False}],
        [{"name": "eos", "ignore_eos": True}, {"name": "no-eos", "ignore_eos": False}, {"name": "plain"}],
    )
    sent = {t.name: "ignore_eos" in request_for(t.backend, t.sent_model, MESSAGES)[1] for t in s.targets}
    assert sent == {
        "eos/tr": True,
        "eos/off": False,
        "no-eos/tr": False,
        "no-eos/off": False,
        "plain/tr": True,
        "plain/off": False,
    }


def test_dataset_and_the_study_kinds_send_the_models_max_tokens_unless_the_conversation_wrote_one(
    tmp_path: Path,
) -> None:
    s = scenario(
        tmp_path,
        [
            {"name": "rows", "kind": "dataset", "path": str(tmp_path / "rows.jsonl")},
            {"name": "own", "kind": "dataset", "path": str(tmp_path / "rows.jsonl"), "max_tokens": 4},
            {"name": "mt", "kind": "multi-turn", "user_turns": 1},
        ],
        [{"name": "m32", "max_tokens": 32}],
    )
    sent = {t.name: request_for(t.backend, t.sent_model, MESSAGES)[1]["max_tokens"] for t in s.targets}
    assert sent == {"m32/rows": 32, "m32/own": 4, "m32/mt": 32}


def test_settled_targets_survive_the_trip_to_the_workers(tmp_path: Path) -> None:
    s = scenario(
        tmp_path,
        [{"name": "ac", "kind": "autocomplete", "fim": "suffix"}, {"name": "ag", "kind": "agentic"}],
        [{"name": "m32", "max_tokens": 32}, {"name": "plain"}],
    )
    again = Scenario.from_wire(s.to_wire())
    assert [t.conversation for t in again.targets] == [t.conversation for t in s.targets]
    assert [t.sent_model for t in again.targets] == [t.sent_model for t in s.targets]


def test_validate_shows_each_targets_effective_max_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = scenario(
        tmp_path,
        [
            {"name": "ac", "kind": "autocomplete", "fim": "suffix"},
            {"name": "ag", "kind": "agentic"},
            {"name": "own", "kind": "dataset", "path": str(tmp_path / "rows.jsonl"), "max_tokens": 4},
        ],
        [{"name": "m32", "max_tokens": 32}],
    )
    assert estimate.main([s.source]) == 0
    text = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("  m32/")}
    assert rows["m32/ac"][-2] == "32" and rows["m32/ag"][-2] == "32/32", text
    assert rows["m32/own"][-2] == "4", text


def test_validate_names_the_settings_a_target_sends_that_differ_from_its_models(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = scenario(
        tmp_path,
        [
            {"name": "ac", "kind": "autocomplete", "fim": "suffix"},
            {"name": "ag", "kind": "agentic"},
            {"name": "tr", "kind": "trace", "format": "mooncake", "path": str(tmp_path / "trace.jsonl")},
            {"name": "mt", "kind": "multi-turn"},
        ],
        [{"name": "m32", "max_tokens": 32}, {"name": "plain", "temperature": 0.5}],
    )
    assert estimate.main([s.source]) == 0
    text = capsys.readouterr().out
    sends = {line.split()[0]: line for line in text.splitlines() if " sends " in line}
    assert sends == {
        "plain/ac": "plain/ac sends max_tokens 64 (model: 256)",
        "plain/ag": "plain/ag sends final_max_tokens 1024 (model: 256)",
        "plain/tr": "plain/tr sends ignore_eos true (model: false)",
        "m32/tr": "m32/tr sends ignore_eos true (model: false)",
    }, text

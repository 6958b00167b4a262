"""Kind dataset: JSONL and ShareGPT files read into rows, rows drawn by the seed or in order, paths
resolved from the scenario's folder (bad files: tests/config/broken/dataset_*.yaml)."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from grill_locust.config import ConfigError
from grill_locust.scenario import Conversation, load_scenario, parse_scenario, validate_conversation
from grill_locust.workload import ConversationScript, build_workload
from grill_locust.workload.dataset import DatasetError, load_dataset

DATASETS = Path(__file__).parent / "datasets"
CHAT = DATASETS / "chat.jsonl"
SHAREGPT = DATASETS / "sharegpt.json"
CHAT_LINES = [0, 1, 3, 4]  # line 2 is blank


def dataset_conversation(path: Path | str, **fields: Any) -> Conversation:
    return validate_conversation({"name": "replay", "kind": "dataset", "path": str(path), **fields})


def scripts(conversation: Conversation, users: int, iterations: int) -> list[ConversationScript]:
    workload = build_workload(conversation)
    return [
        workload.script(f"w0-u{user}", iteration) for user in range(users) for iteration in range(iterations)
    ]


def test_jsonl_rows_keep_their_recorded_messages_and_max_tokens() -> None:
    dataset = load_dataset(str(CHAT))
    assert dataset.format == "jsonl"
    assert [row.line for row in dataset.rows] == CHAT_LINES
    first, prompt, long_question, rename = dataset.rows
    assert first.system == "You are a careful Python reviewer."
    assert first.history == (
        {"role": "user", "content": "What does functools.lru_cache do with keyword arguments?"},
        {
            "role": "assistant",
            "content": "It makes them part of the cache key, in the order they were given.",
        },
    )
    assert first.user_turns == ("So f(a=1, b=2) and f(b=2, a=1) are cached apart?",)
    assert first.max_tokens == 12
    assert prompt.system is None and prompt.history == () and prompt.max_tokens is None
    assert prompt.user_turns == ("Write a one-line Python expression that flattens a list of lists.",)
    assert long_question.history == () and long_question.max_tokens == 20  # its `id` is not sent
    assert rename.max_tokens == 6


def test_sharegpt_replays_user_turns_drops_recorded_replies_and_skips_conversations_without_one() -> None:
    dataset = load_dataset(str(SHAREGPT))
    assert dataset.format == "sharegpt"
    assert [row.line for row in dataset.rows] == [0, 2]  # conversation 1 has no human turn
    git, make = dataset.rows
    assert git.system == "You answer questions about git."
    assert git.user_turns == (
        "How do I undo the last commit but keep its changes?",
        "And if I already pushed it to a shared branch?",
    )
    assert make.system is None and len(make.user_turns) == 3 and make.history == ()
    assert dataset.mean_user_turns == 2.5
    assert dataset_conversation(SHAREGPT).requests_per_iteration == 2.5


def test_a_script_sends_the_recorded_history_before_its_user_turns() -> None:
    script = ConversationScript(
        "c",
        "sys",
        ["q1"],
        history=[{"role": "user", "content": "q0"}, {"role": "assistant", "content": "a0"}],
    )
    assert script.messages(0, []) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q0"},
        {"role": "assistant", "content": "a0"},
        {"role": "user", "content": "q1"},
    ]


def test_seed_sampling_is_reproducible_and_draws_every_row() -> None:
    conversation = dataset_conversation(CHAT)
    assert conversation.sample == "seed" and conversation.format == "jsonl"
    drawn = scripts(conversation, users=20, iterations=2)
    again = scripts(conversation, users=20, iterations=2)
    assert [s.trace_line for s in drawn] == [s.trace_line for s in again]
    assert {s.trace_line for s in drawn} == set(CHAT_LINES)
    other_seed = scripts(dataset_conversation(CHAT, seed=7), users=20, iterations=2)
    assert [s.trace_line for s in other_seed] != [s.trace_line for s in drawn]
    rows = {row.line: row for row in load_dataset(str(CHAT)).rows}
    for script in drawn:  # each script is its row as recorded, with the row's own max_tokens
        row = rows[script.trace_line]
        assert (script.system, tuple(script.history), tuple(script.user_turns)) == (
            row.system,
            row.history,
            row.user_turns,
        )
        assert script.max_tokens == row.max_tokens


def test_order_sampling_walks_the_file_and_wraps_around() -> None:
    workload = build_workload(dataset_conversation(CHAT, sample="order"))
    lines = [workload.script(f"w0-u{n % 3}", n // 3).trace_line for n in range(10)]
    assert lines == [*CHAT_LINES, *CHAT_LINES, *CHAT_LINES[:2]]


def test_the_conversations_max_tokens_serves_rows_without_their_own() -> None:
    workload = build_workload(dataset_conversation(CHAT, sample="order", max_tokens=9))
    assert [workload.script("u", 0).max_tokens for _ in CHAT_LINES] == [12, 9, 20, 6]


def test_format_is_taken_from_the_extension_unless_given(tmp_path: Path) -> None:
    renamed = tmp_path / "chats.data"
    shutil.copy(SHAREGPT, renamed)
    assert dataset_conversation(renamed, format="sharegpt").format == "sharegpt"
    with pytest.raises(
        ValueError, match="cannot tell the format of .* give format: jsonl or format: sharegpt"
    ):
        dataset_conversation(renamed)
    with pytest.raises(ValueError, match="format: expected 'jsonl' or 'sharegpt'"):
        dataset_conversation(CHAT, format="csv")
    with pytest.raises(ValueError, match="path: kind 'dataset' needs the file to replay"):
        validate_conversation({"name": "replay", "kind": "dataset"})


SCENARIO = """
backends: [{name: vllm, engine: vllm, url: "http://127.0.0.1:8000"}]
models: [{name: m}]
conversations: [{name: replay, kind: dataset, path: data/chat.jsonl}]
targets: [{conversation: replay}]
"""


def test_a_relative_path_is_read_from_the_scenario_files_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "data").mkdir()
    shutil.copy(CHAT, tmp_path / "data" / "chat.jsonl")
    (tmp_path / "s.yaml").write_text(SCENARIO)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    scenario = load_scenario(tmp_path / "s.yaml")
    path = scenario.targets[0].conversation.path
    assert path == str(tmp_path / "data" / "chat.jsonl") and os.path.isabs(path)
    # workers receive the absolute path: they need no scenario folder
    assert scenario.from_wire(scenario.to_wire()).targets[0].conversation.path == path
    # data parsed without a file: from the current folder
    with pytest.raises(
        ConfigError, match=r"conversations\[0\]\.path: .*elsewhere/data/chat.jsonl: no such file"
    ):
        parse_scenario(yaml.safe_load(SCENARIO), "command line")
    monkeypatch.chdir(tmp_path)
    assert parse_scenario(yaml.safe_load(SCENARIO), "command line").targets[0].conversation.path == path


@pytest.mark.parametrize(
    ("conversation", "message"),
    [
        (
            {"kind": "multi-turn", "sample": "order"},
            r"conversations\[0\]\.sample: not used by kind 'multi-turn'",
        ),
        ({"kind": "dataset", "path": str(CHAT), "sample": "shuffled"}, "sample: expected 'seed' or 'order'"),
    ],
)
def test_a_bad_dataset_key_is_named(conversation: dict[str, Any], message: str) -> None:
    data = {
        "backends": [{"name": "vllm", "engine": "vllm", "url": "http://127.0.0.1:8000"}],
        "models": [{"name": "m"}],
        "conversations": [{"name": "c", **conversation}],
        "targets": [{"conversation": "c"}],
    }
    with pytest.raises(ConfigError, match=message):
        parse_scenario(data, "s.yaml")


def test_a_file_is_read_once_per_process_and_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "one"}\n')
    first = load_dataset(str(path))
    assert load_dataset(str(path)) is first
    path.write_text('{"prompt": "one"}\n{"prompt": "two"}\n')
    assert [row.user_turns for row in load_dataset(str(path)).rows] == [("one",), ("two",)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"prompt": "a", "messages": []}\n', "rows.jsonl:1: give messages or prompt, not both"),
        ('{"prompt": ""}\n', "rows.jsonl:1: prompt: expected non-empty text, got ''"),
        ("[1, 2]\n", 'rows.jsonl:1: expected an object with "messages"'),
        ('{"messages": [{"role": "tool", "content": "x"}]}\n', r"messages\[0\]\.role: expected 'system'"),
        ('{"messages": [{"role": "user", "content": ["x"]}]}\n', r"messages\[0\]\.content: expected text"),
        (
            '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}\n',
            "the last message is the request: expected role 'user', got 'assistant'",
        ),
        (
            '{"prompt": "x", "max_tokens": true}\n',
            "max_tokens: expected a whole number from 1 to 10,000,000, got True",
        ),
    ],
)
def test_each_bad_row_is_one_line_naming_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(text)
    with pytest.raises(DatasetError, match=message) as caught:
        load_dataset(str(path))
    assert "\n" not in str(caught.value) and str(caught.value).startswith(str(path))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[]", "no conversations"),
        ('{"conversations": []}', r"expected a list of \{conversations: \[...\]\}"),
        ('[\n{"conversations": [\n{"from": "human", "value": "x"}\n]\n', r"sharegpt.json:5: not JSON"),
        ('[{"conversations": [{"from": "gpt", "value": "hi"}]}]', "no conversation has a user turn"),
        (
            '[{"conversations": [{"from": "robot", "value": "x"}]}]',
            r"conversation 0: conversations\[0\]\.from",
        ),
        ('[{"turns": []}]', "conversation 0: expected an object with conversations"),
    ],
)
def test_each_bad_sharegpt_file_is_one_line_naming_the_conversation(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "sharegpt.json"
    path.write_text(text)
    with pytest.raises(DatasetError, match=message):
        load_dataset(str(path))


def test_seed_draws_spread_over_rows() -> None:
    """A seeded draw is uniform over the rows: 400 draws leave no row under a tenth."""
    counts = Counter(s.trace_line for s in scripts(dataset_conversation(CHAT), users=200, iterations=2))
    assert set(counts) == set(CHAT_LINES) and min(counts.values()) > 40


def test_unicode_line_separators_inside_a_row_are_text_not_line_ends(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    rows = [{"prompt": "one\u2028two"}, {"prompt": "three\x85four"}]
    path.write_text("\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\n", encoding="utf-8")
    assert [row.user_turns for row in load_dataset(str(path)).rows] == [("one\u2028two",), ("three\x85four",)]


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        (
            "d.jsonl",
            '{"prompt": "x"}\n{"prompt": "x", "max_tokens": 18446744073709551616}\n',
            ":2: max_tokens",
        ),
        ("d.jsonl", '{"prompt": "x", "history": ' + "[" * 100_000 + "}\n", ":1: not JSON"),
        ("d.json", "[" * 100_000, ": not JSON"),
    ],
    ids=["max-tokens-2e64", "nested-jsonl", "nested-sharegpt"],
)
def test_a_hostile_dataset_is_one_line_naming_the_place(
    tmp_path: Path, name: str, content: str, said: str
) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DatasetError) as raised:
        load_dataset(str(path))
    message = str(raised.value)
    assert message.startswith(f"{path}{said}") and "\n" not in message, message

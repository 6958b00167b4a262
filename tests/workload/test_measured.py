"""Measured sizing (calibrate.py's `MeasuredCorpus`) without a server: the approximate tokenizer plays
the backend, so every size must come out exact by `count_tokens`; pieces decoding of vLLM's
`token_strs`; the package imports lazily."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from functools import lru_cache
from typing import Any

import pytest

from grill_locust.client.backend_http import decode_token_strs
from grill_locust.scenario import Conversation, validate_conversation
from grill_locust.tokens import count_tokens, tokenize
from grill_locust.workload import TokenCounter, build_workload
from grill_locust.workload.calibrate import MeasuredCorpus, measure_corpus, name_span
from grill_locust.workload.heads import HEAD_REFERENCE, measured_heads

SCRIPT_BUDGET_MS = 5.0
BYTE_LEVEL_SPACE = "\u0120"  # GPT-2's byte-level alphabet: a space
BYTE_LEVEL_NEWLINE = "\u010a"


@lru_cache(maxsize=1)
def measured_on_approximate_tokenizer() -> MeasuredCorpus:
    calls: list[int] = []

    def send(text: str) -> list[str]:
        calls.append(len(text))
        return tokenize(text)

    measured = measure_corpus(send, measured_heads(), HEAD_REFERENCE)
    assert len(calls) == 2  # the stream, then every span: two calls per backend
    return measured


def counter() -> TokenCounter:
    return TokenCounter(
        "b", "http://127.0.0.1:9/tokenize", "vllm", 1.0, measured=measured_on_approximate_tokenizer()
    )


def conversation(**fields: Any) -> Conversation:
    return validate_conversation(fields)


@pytest.mark.parametrize(
    ("fields", "system_tokens", "turn_tokens"),
    [
        ({"name": "multi-turn-session"}, 1500, [150, 150, 150, 150]),
        ({"name": "shared-prefix"}, 4000, [100]),
        ({"name": "short-baseline"}, None, [50]),
        ({"name": "unique-prompts"}, None, [3000]),
        (
            {"name": "c", "kind": "multi-turn", "system_tokens": 37, "user_turns": 2, "turn_tokens": 9},
            37,
            [9, 9],
        ),
        ({"name": "c", "kind": "shared-prefix", "prefix_tokens": 64, "question_tokens": 3}, 64, [3]),
        ({"name": "c", "kind": "short-baseline", "prompt_tokens": 1}, None, [1]),
        ({"name": "c", "kind": "multi-turn", "shared_system": True}, 1500, [150, 150, 150, 150]),
    ],
)
def test_measured_sizes_are_exact(
    fields: dict[str, Any], system_tokens: int | None, turn_tokens: list[int]
) -> None:
    workload = build_workload(conversation(**fields), token_counter=counter())
    for user in range(6):
        script = workload.script(f"u{user}", user % 2)
        assert (count_tokens(script.system) if script.system is not None else None) == system_tokens
        assert [count_tokens(turn) for turn in script.user_turns] == turn_tokens


def test_measured_messages_are_code_with_questions_and_distinct() -> None:
    workload = build_workload(conversation(name="unique-prompts", prompt_tokens=300), token_counter=counter())
    prompts = [workload.script(f"u{user}", 0).user_turns[0] for user in range(100)]
    assert len(set(prompts)) == len(prompts)
    assert len({tokenize(prompt)[0] for prompt in prompts}) > 90  # ids from a measured pool of 2048
    for prompt in prompts[:10]:
        assert "```python\n" in prompt and "`" in prompt.split("\n")[1]
        code = prompt.split("```python\n", 1)[1]
        assert code.lstrip().startswith(("def ", "class ", "async def ")), code[:40]
    shared = build_workload(conversation(name="shared-prefix"), token_counter=counter())
    scripts = [shared.script(f"u{user}", iteration) for user in range(5) for iteration in range(2)]
    assert len({script.system for script in scripts}) == 1
    assert len({script.user_turns[0] for script in scripts}) == len(scripts)


def test_follow_ups_stay_in_the_module_under_discussion() -> None:
    workload = build_workload(conversation(name="multi-turn-session"), token_counter=counter())
    measured = measured_on_approximate_tokenizer()
    names_by_module = {}
    for definition in measured.definitions:
        names_by_module.setdefault(definition.module, set()).add(definition.name)
    script = workload.script("u", 0)
    assert script.system is not None
    module = script.system.split("module `")[1].split("`")[0]
    for turn in script.user_turns:
        name = turn.split("`")[1]
        if len(names_by_module[module]) > 1:
            assert name in names_by_module[module]


def test_a_target_past_the_measured_corpus_is_sized_approximately(caplog: pytest.LogCaptureFixture) -> None:
    too_many = measured_on_approximate_tokenizer().total_tokens + 10
    workload = build_workload(
        conversation(name="c", kind="unique-prompts", prompt_tokens=too_many), token_counter=counter()
    )
    with caplog.at_level(logging.WARNING):
        prompt = workload.script("u", 0).user_turns[0]
    assert count_tokens(prompt) == too_many  # scale 1.0: the approximation is exact here
    assert "exceed the measured corpus" in caplog.text


def test_measured_script_generation_is_fast() -> None:
    """Warm scripts of every kind take under 5 ms of CPU (best of three rounds: the machine is shared)."""
    for name in ("multi-turn-session", "shared-prefix", "short-baseline", "unique-prompts"):
        workload = build_workload(conversation(name=name), token_counter=counter())
        workload.script("warm", 0)
        best_ms = float("inf")
        for attempt in range(3):
            start = time.process_time()
            for user in range(30):
                workload.script(f"timed-{attempt}-{user}", 1)
            best_ms = min(best_ms, (time.process_time() - start) * 1000 / 30)
        assert best_ms < SCRIPT_BUDGET_MS, f"{name}: {best_ms:.2f} ms per script"


def test_spans_that_a_tokenizer_merges_are_left_out() -> None:
    # a tokenizer that glues a space to the word before it: names measured there are not clean
    def send(text: str) -> list[str]:
        pieces: list[str] = []
        for piece in tokenize(text):
            if piece == " " and pieces and pieces[-1].isalpha():
                pieces[-1] += piece
            else:
                pieces.append(piece)
        return pieces

    measured = measure_corpus(send, measured_heads(), HEAD_REFERENCE)
    assert name_span(HEAD_REFERENCE["name"]) not in measured.span_tokens
    assert measured.definitions == []  # none usable: workloads fall back to the approximation


def test_vllm_token_strs_decode_back_into_text() -> None:
    text = "def f(x):\n    return x  # é\n"
    byte_level = ["def", BYTE_LEVEL_SPACE + "f", "(x", "):", BYTE_LEVEL_NEWLINE, BYTE_LEVEL_SPACE * 3, BYTE_LEVEL_SPACE + "return",
                  BYTE_LEVEL_SPACE + "x", BYTE_LEVEL_SPACE, BYTE_LEVEL_SPACE + "#", BYTE_LEVEL_SPACE + "Ã©", BYTE_LEVEL_NEWLINE]  # fmt: skip
    assert decode_token_strs(byte_level, text) == [
        "def",
        " f",
        "(x",
        "):",
        "\n",
        "   ",
        " return",
        " x",
        " ",
        " #",
        " é",
        "\n",
    ]
    sentencepiece = ["def", "▁f", "(", "x", "):", "<0x0A>", "▁▁▁", "▁return", "▁x", "▁▁#", "▁é", "<0x0A>"]
    assert "".join(decode_token_strs(sentencepiece, text) or []) == text
    assert decode_token_strs(["something", "else"], text) is None
    assert decode_token_strs([1, 2], text) is None


def test_the_tokenizer_imports_without_pydantic() -> None:
    code = (
        "import sys; sys.modules['pydantic'] = None\n"
        "import grill_locust.tokens, grill_locust.workload\n"
        "assert 'grill_locust.workload.generators' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr

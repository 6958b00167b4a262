"""The four coding workloads and llm-grill's fixed turns: sizes, sharing, distinctness, determinism, speed."""

from __future__ import annotations

import ast
import random
import sysconfig
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from grill_locust.scenario import Conversation, validate_conversation
from grill_locust.tokens import count_tokens, fit_tokens, seam_change, tokenize
from grill_locust.workload import ConversationScript, TokenCounter, build_workload
from grill_locust.workload.agentic import AgenticPlan
from grill_locust.workload.autocomplete import AutocompletePlan
from grill_locust.workload.heads import QUESTIONS
from grill_locust.workload.kinds import WORKLOAD_KINDS

BLOCK_TOKENS = 16  # prefix caches share whole blocks of this many tokens (vLLM's default)
SCRIPT_BUDGET_MS = 5.0


def conversation(**fields: Any) -> Conversation:
    return validate_conversation(fields)


def scripts(conv: Conversation, users: int, iterations: int = 1) -> list[ConversationScript]:
    workload = build_workload(conv)
    return [
        workload.script(f"w0-u{user}", iteration) for user in range(users) for iteration in range(iterations)
    ]


def test_multi_turn_sizes_are_exact() -> None:
    for script in scripts(conversation(name="multi-turn-session"), users=5, iterations=2):
        assert script.system is not None and count_tokens(script.system) == 1500
        assert [count_tokens(turn) for turn in script.user_turns] == [150, 150, 150, 150]


@pytest.mark.parametrize(
    ("fields", "system_tokens", "turn_tokens"),
    [
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
        ({"name": "c", "kind": "unique-prompts", "prompt_tokens": 20_000}, None, [20_000]),
    ],
)
def test_sizes_hit_their_target_exactly(
    fields: dict[str, Any], system_tokens: int | None, turn_tokens: list[int]
) -> None:
    for script in scripts(conversation(**fields), users=4):
        assert (count_tokens(script.system) if script.system is not None else None) == system_tokens
        assert [count_tokens(turn) for turn in script.user_turns] == turn_tokens


@pytest.mark.parametrize("kind", list(WORKLOAD_KINDS))
def test_every_kind_of_the_table_scripts_to_its_default_sizes(kind: str) -> None:
    fields: dict[str, Any] = {"name": "c", "kind": kind}
    if kind == "fixed":
        fields["turns"] = [{"role": "user", "content": "hello"}]
    if kind == "dataset":  # the file it replays has no default
        fields.update(path=str(Path(__file__).parent / "datasets" / "chat.jsonl"), format="jsonl")
    if kind == "trace":  # a trace's file has no default
        fields.update(format="mooncake", path=str(Path(__file__).parent / "traces" / "mooncake.jsonl"))
    conv = conversation(**fields)
    for size, default in WORKLOAD_KINDS[kind].sizes.items():
        if size in fields:
            continue
        value = getattr(conv, size)
        assert (value.model_dump() if isinstance(value, BaseModel) else value) == default
    script = build_workload(conv).script("w0-u0", 0)
    if isinstance(script, AgenticPlan):  # a session's steps are drawn: its plan is checked in test_agentic
        low, high = WORKLOAD_KINDS[kind].sizes["steps"]
        assert low <= script.steps <= high and script.task and script.system
        return
    if isinstance(script, AutocompletePlan):  # a typing developer's plan: checked in test_autocomplete
        assert len(script.requests) == conv.requests_per_iteration
        assert count_tokens(script.prefix) == conv.prefix_tokens
        return
    assert len(script.user_turns) == conv.requests_per_iteration >= 1
    assert all(turn for turn in script.user_turns)


def test_fit_is_exact_across_awkward_seams() -> None:
    body = "    def method(self):\n        return self.value  # a comment\n" * 50
    for head, tail in (
        ("Look:\n", "\n```"),
        ("word", "tail"),
        ("x = 1 +", "+ 2"),
        ("", ""),
        ("a" * 40, "b" * 40),
    ):
        for n_tokens in (1, 2, 7, 30, 200):
            assert count_tokens(fit_tokens(head, body, tail, n_tokens)) == n_tokens


def test_seam_change_counts_joined_texts_as_a_whole_reading_does() -> None:
    """`fit_tokens` counts only its two seams: at every seam, the count from the seam alone must be the
    count of the whole joined text (random cuts of real code and of awkward runs: spaces, letters,
    digits, newlines with indentation, punctuation)."""
    rng = random.Random(3)
    code = Path(ast.__file__).read_text()
    awkward = [" ", "  ", "\n", "\n    ", "\t", "a", "Z", "7", "(", "**", "=", ":", "é", "\r", "_"]
    settled = 0
    for case in range(4000):
        if case % 2:
            start = rng.randrange(len(code) - 400)
            text = code[start : start + rng.randrange(1, 400)]
        else:
            text = "".join(rng.choice(awkward) * rng.randrange(1, 12) for _ in range(rng.randrange(1, 8)))
        cut = rng.randrange(len(text) + 1)
        left, right = tokenize(text[:cut]), tokenize(text[cut:])
        change = seam_change(left, right)
        if change is not None:
            settled += 1
            assert len(left) + len(right) + change == count_tokens(text), (text[:cut], text[cut:])
    assert settled > 3900  # the seam nearly always settles within its window


def test_multi_turn_system_is_distinct_per_conversation_unless_shared() -> None:
    distinct = scripts(conversation(name="multi-turn-session"), users=20, iterations=2)
    assert len({script.system for script in distinct}) == len(distinct)
    shared = scripts(conversation(name="chat", kind="multi-turn", shared_system=True), users=5, iterations=2)
    assert len({script.system for script in shared}) == 1
    assert len({tuple(script.user_turns) for script in shared}) == len(shared)  # the questions still differ
    # and so does every first turn, from its first token: the sessions share the system prompt only
    many = scripts(conversation(name="chat", kind="multi-turn", shared_system=True), users=100, iterations=2)
    first_turns = [script.user_turns[0] for script in many]
    assert len({turn.split(None, 1)[0] for turn in first_turns}) == len(first_turns)


def test_shared_prefix_is_identical_for_every_user_and_iteration() -> None:
    all_scripts = scripts(conversation(name="shared-prefix"), users=10, iterations=3)
    assert len({script.system for script in all_scripts}) == 1
    questions = [script.user_turns[0] for script in all_scripts]
    assert len(set(questions)) == len(questions)
    assert all(len(script.user_turns) == 1 for script in all_scripts)  # each request is its own conversation
    # a fresh workload (another worker process) builds the same prefix
    assert scripts(conversation(name="shared-prefix"), users=1)[0].system == all_scripts[0].system


def test_unique_prompts_differ_from_the_first_token() -> None:
    prompts = [
        script.user_turns[0]
        for script in scripts(conversation(name="unique-prompts", prompt_tokens=200), users=300)
    ]
    first_tokens = [tokenize(prompt)[0] for prompt in prompts]
    assert len(set(first_tokens)) == len(prompts)
    first_blocks = {tuple(tokenize(prompt)[:BLOCK_TOKENS]) for prompt in prompts}
    assert len(first_blocks) == len(prompts)


def test_short_baseline_shares_nothing() -> None:
    prompts = [
        script.user_turns[0]
        for script in scripts(conversation(name="short-baseline"), users=50, iterations=2)
    ]
    assert len({tokenize(prompt)[0] for prompt in prompts}) == len(prompts)
    assert all(script.system is None for script in scripts(conversation(name="short-baseline"), users=2))


def test_scripts_are_deterministic_by_seed() -> None:
    for name in ("multi-turn-session", "shared-prefix", "short-baseline", "unique-prompts"):
        first = build_workload(conversation(name=name)).script("worker-1/user-3", 2)
        again = build_workload(conversation(name=name)).script("worker-1/user-3", 2)
        assert first == again
        other_seed = build_workload(conversation(name=name, seed=12345)).script("worker-1/user-3", 2)
        assert other_seed != first
        other_user = build_workload(conversation(name=name)).script("worker-1/user-4", 2)
        assert other_user.user_turns != first.user_turns
        assert first.conversation_id == f"{name}:worker-1/user-3:2"


def test_content_is_standard_library_code_with_questions_about_it() -> None:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    question_starts = tuple(question.split("`")[0] for question in QUESTIONS)
    script = scripts(conversation(name="multi-turn-session"), users=1)[0]
    assert script.system is not None and "```python\n" in script.system
    module = script.system.split("module `")[1].split("`")[0]
    module_path = stdlib / (module.replace(".", "/") + ".py")
    package_path = stdlib / module.replace(".", "/") / "__init__.py"
    assert module_path.exists() or package_path.exists(), module
    code = script.system.split("```python\n", 1)[1]
    first_line = code.splitlines()[0].strip()
    assert first_line.startswith(("def ", "class ", "async def ")), first_line
    session_id, first_turn = script.user_turns[0].split(": ", 1)
    assert all(word.isalpha() for word in session_id.split(" ")) and first_turn.startswith(question_starts)
    # every prompt names a definition between backticks and carries code
    for any_script in scripts(conversation(name="unique-prompts", prompt_tokens=300), users=5):
        text = any_script.user_turns[0]
        assert "`" in text and "```python\n" in text and "lorem" not in text.lower()


def test_a_whole_definition_is_valid_python() -> None:
    """Excerpts start at a definition: with enough tokens the first definition parses as Python."""
    workload = build_workload(conversation(name="c", kind="short-baseline", prompt_tokens=4000))
    text = workload.script("u", 0).user_turns[0]
    code = text.split("```python\n", 1)[1]
    lines = code.splitlines()
    indent = len(lines[0]) - len(lines[0].lstrip())
    block = [lines[0][indent:]]
    for line in lines[1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        block.append(line[indent:] if line.strip() else "")
    ast.parse("\n".join(block))


def test_fixed_turns_salt_and_replies() -> None:
    turns = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Review `mean`."},
        {"role": "assistant", "content": "scripted reply, never sent"},
        {"role": "user", "content": "Now add tests."},
    ]
    salted = scripts(conversation(name="review", turns=turns), users=3, iterations=2)
    assert all(script.user_turns == ["Review `mean`.", "Now add tests."] for script in salted)
    systems = [script.system for script in salted]
    assert all(system is not None and system.startswith("[session ") for system in systems)
    assert all(system is not None and system.endswith("\nBe brief.") for system in systems)
    assert len(set(systems)) == len(systems)  # each user and iteration its own salt
    plain = scripts(conversation(name="review", turns=turns, salt=False), users=2)
    assert all(script.system == "Be brief." for script in plain)
    # with no system turn, the salt goes before the first user message
    no_system = scripts(conversation(name="r", turns=turns[1:]), users=1)[0]
    assert no_system.system is None and no_system.user_turns[0].startswith("[session ")
    assert no_system.user_turns[0].endswith("\nReview `mean`.")


def test_messages_carry_the_real_replies_forward() -> None:
    script = ConversationScript("c", "sys", ["q0", "q1", "q2"])
    assert script.messages(0, []) == [{"role": "system", "content": "sys"}, {"role": "user", "content": "q0"}]
    assert script.messages(2, ["a0", "a1"]) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q0"},
        {"role": "assistant", "content": "a0"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
    ]
    assert ConversationScript("c", None, ["q"]).messages(0, []) == [{"role": "user", "content": "q"}]
    assert ConversationScript("c", "sys", ["q"]).prompt(0, []) == "System: sys\n\nUser: q\n\nAssistant:"
    with pytest.raises(ValueError):
        script.messages(2, ["only one"])


def test_a_token_counter_scales_the_targets() -> None:
    counter = TokenCounter("b", "http://127.0.0.1:1/tokenize", "vllm", backend_tokens_per_approx_token=1.25)
    workload = build_workload(conversation(name="unique-prompts", prompt_tokens=1000), token_counter=counter)
    prompt = workload.script("u", 0).user_turns[0]
    assert count_tokens(prompt) == 800  # 1000 backend tokens at 1.25 per approximate token
    assert counter.count(prompt) == 1000
    assert "headers" not in repr(
        TokenCounter("b", "u", "vllm", 1.0, headers={"Authorization": "Bearer sk-x"})
    )


def test_script_generation_is_fast() -> None:
    """Warm scripts of every kind take under 5 ms of CPU (CPU time, best of three rounds: the machine is shared)."""
    for name in ("multi-turn-session", "shared-prefix", "short-baseline", "unique-prompts"):
        workload = build_workload(conversation(name=name))
        workload.corpus.preload()  # files are read once per process; this measures the steady state
        best_ms = float("inf")
        for attempt in range(3):
            start = time.process_time()
            for user in range(30):
                workload.script(f"timed-{attempt}-{user}", 1)
            best_ms = min(best_ms, (time.process_time() - start) * 1000 / 30)
        assert best_ms < SCRIPT_BUDGET_MS, f"{name}: {best_ms:.2f} ms per script"


def test_the_corpus_leaves_out_codec_tables_and_the_measured_stream_spans_it() -> None:
    from grill_locust.workload.calibrate import measured_stream
    from grill_locust.workload.corpus import stdlib_corpus

    corpus = stdlib_corpus()
    modules = [corpus.file(index).module for index in range(len(corpus))]
    assert not any(module.split(".")[0] == "encodings" for module in modules)
    _, where = measured_stream(corpus)
    positions = sorted(modules.index(module) for module, _, _ in where)
    # the stream is full long before the list ends: it still takes modules from all over it
    assert positions[0] < len(modules) // 10 and positions[-1] > len(modules) * 9 // 10
    assert len({module.split(".")[0] for module, _, _ in where}) >= 20

"""The typing developer (workload/autocomplete.py): a plan fixed by (seed, user key, iteration), its
keystroke schedule and the requests its pauses send, the text around the cursor as it is typed and
as completions are accepted, a prefix window of exactly prefix_tokens, and the kind's keys."""

from __future__ import annotations

import hashlib
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from grill_locust.config import ConfigError
from grill_locust.scenario import Conversation, parse_scenario, validate_conversation
from grill_locust.tokens import count_tokens
from grill_locust.workload.autocomplete import (
    BURST_WORDS,
    EXTRA_FILE_TOKENS,
    EXTRA_FILES,
    AutocompletePlan,
    AutocompleteSession,
)
from grill_locust.workload.corpus import stdlib_corpus
from grill_locust.workload.generators import build_workload

REPO = Path(__file__).resolve().parents[2]


def autocomplete(**sizes: Any) -> Conversation:
    return validate_conversation({"name": "completions", "kind": "autocomplete", **sizes})


def plan_of(conversation: Conversation, user_key: str = "u0", iteration: int = 0) -> AutocompletePlan:
    plan = build_workload(conversation).script(user_key, iteration)
    assert isinstance(plan, AutocompletePlan)
    return plan


def digest(plan: AutocompletePlan) -> str:
    return hashlib.sha256(repr(plan).encode()).hexdigest()


def test_the_kind_has_the_issues_defaults() -> None:
    conversation = autocomplete()
    assert (
        conversation.prefix_tokens,
        conversation.suffix_tokens,
        conversation.requests,
        conversation.typing_cps,
        conversation.debounce_ms,
        conversation.accept_rate,
        conversation.budget_ms,
        conversation.max_tokens,
    ) == (1500, 400, 20, 6.0, 150.0, 0.3, 400.0, 64)
    assert conversation.requests_per_iteration == 20
    assert autocomplete(requests=7).requests_per_iteration == 7


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("budget_ms", 0, "budget_ms: expected a value > 0, got 0"),
        ("accept_rate", 1.2, "accept_rate: expected a value <= 1, got 1.2"),
        ("accept_rate", -0.1, "accept_rate: expected a value >= 0, got -0.1"),
        ("typing_cps", 0, "typing_cps: expected a value > 0, got 0"),
        ("prefix_tokens", 0, "prefix_tokens: expected a value >= 1, got 0"),
        ("suffix_tokens", 0, "suffix_tokens: expected a value >= 1, got 0"),
        ("requests", 0, "requests: expected a value >= 1, got 0"),
        ("max_tokens", 0, "max_tokens: expected a value >= 1, got 0"),
        ("debounce_ms", -1, "debounce_ms: expected a value >= 0, got -1"),
    ],
)
def test_bad_keys_are_one_line_naming_the_key(key: str, value: float, message: str) -> None:
    data = {
        "backends": [{"name": "sim", "engine": "sim"}],
        "models": [{"name": "m"}],
        "conversations": [{"name": "completions", "kind": "autocomplete", key: value}],
        "targets": [{"conversation": "completions"}],
    }
    with pytest.raises(ConfigError) as raised:
        parse_scenario(data, source="s.yaml")
    assert str(raised.value) == f"s.yaml: conversations[0].{message}"


def test_its_keys_belong_to_it_alone() -> None:
    with pytest.raises(ValueError, match="typing_cps: not used by kind 'multi-turn'"):
        validate_conversation({"name": "chat", "kind": "multi-turn", "typing_cps": 5})


def test_the_same_seed_user_and_iteration_give_the_same_plan_in_every_process() -> None:
    conversation = autocomplete()
    plan = plan_of(conversation)
    assert plan == plan_of(conversation)
    assert plan_of(conversation, "u1").prefix != plan.prefix
    assert plan_of(conversation, iteration=1).requests != plan.requests
    code = (
        "from tests.workload.test_autocomplete import autocomplete, digest, plan_of\n"
        "print(digest(plan_of(autocomplete())))\n"
    )
    other = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    )
    assert other.stdout.strip() == digest(plan)


def test_prefix_and_suffix_are_exact_around_the_code_typed_in_a_real_file() -> None:
    conversation = autocomplete(prefix_tokens=900, suffix_tokens=300)
    files = {
        stdlib_corpus().file(i).module: stdlib_corpus().file(i).text for i in range(len(stdlib_corpus()))
    }
    for user in range(10):
        plan = plan_of(conversation, f"u{user}")
        assert (count_tokens(plan.prefix), count_tokens(plan.suffix)) == (900, 300)
        typed = "".join(request.typed for request in plan.requests)
        text = files[plan.module]
        # the cursor after a definition's indentation; what is typed is the file's code from there, then
        # the suffix goes on where the typing stops (within the file, unless it ends first)
        continued = typed + plan.suffix
        start = text.find(continued[:200])
        assert start > 0 and text[start - 1] in " \t\n"
        assert text[start:].startswith(continued) or "\n# ---- " in continued
        assert text[:start].endswith(plan.prefix[-300:]) or "\n# ---- " in plan.prefix
        assert len(plan.extra_files) == EXTRA_FILES
        for extra in plan.extra_files:
            assert extra.filename.endswith(".py") and count_tokens(extra.text) == EXTRA_FILE_TOKENS


def test_a_request_goes_out_after_each_pause_longer_than_the_debounce_until_the_last() -> None:
    conversation = autocomplete(requests=30, debounce_ms=150)
    plan = plan_of(conversation)
    times = plan.keystroke_times_s
    debounce_s = 0.150
    assert len(plan.requests) == 30 and times[0] == 0.0
    gaps = [(before, after) for before, after in zip(times, times[1:], strict=False)]
    paused = [(before, after) for before, after in gaps if after - before > debounce_s]
    last = plan.requests[-1]
    # every pause before the last request's keystroke sent one request, debounce_s after its keystroke,
    # cancelled by the keystroke that ended the pause (the last request's follows the recorded ones)
    assert [(r.send_at_s, r.next_keystroke_at_s) for r in plan.requests[:-1]] == [
        (before + debounce_s, after) for before, after in paused
    ]
    assert last.send_at_s == times[-1] + debounce_s and last.next_keystroke_at_s > last.send_at_s
    # one character a keystroke, a newline and its indentation one
    typed = "".join(request.typed for request in plan.requests)
    assert len(times) == len(typed) - sum(
        len(line) - len(line.lstrip(" \t")) for line in typed.split("\n")[1:]
    )


def test_keystrokes_come_at_typing_cps_and_faster_typing_leaves_fewer_pauses() -> None:
    def intervals(cps: float) -> tuple[float, float]:
        plan = plan_of(autocomplete(typing_cps=cps, requests=200))
        times = plan.keystroke_times_s
        gaps = [after - before for before, after in zip(times, times[1:], strict=False)]
        keys_per_request = len(times) / len(plan.requests)
        return statistics.median(gaps), keys_per_request

    slow_median_s, slow_keys = intervals(4.0)
    fast_median_s, fast_keys = intervals(12.0)
    # the median interval within bursts is 1/typing_cps; pauses between bursts are few
    assert 0.9 / 4.0 < slow_median_s < 1.15 / 4.0 and 0.9 / 12.0 < fast_median_s < 1.15 / 12.0
    # at 4 characters a second most intervals pass a 150 ms debounce; at 12 almost only the pauses
    # between bursts do (a burst: a few words)
    assert slow_keys < 1.5 and fast_keys > BURST_WORDS[1]


def test_accept_draws_follow_accept_rate() -> None:
    def accepted(rate: float) -> float:
        plan = plan_of(autocomplete(accept_rate=rate, requests=2000))
        return sum(request.accept for request in plan.requests) / len(plan.requests)

    assert accepted(0.0) == 0.0 and accepted(1.0) == 1.0
    assert 0.26 < accepted(0.3) < 0.34


def test_the_prefix_window_slides_as_text_is_typed_and_accepted() -> None:
    plan = plan_of(autocomplete(prefix_tokens=400, suffix_tokens=100))
    session = AutocompleteSession(plan)
    assert session.prefix == plan.prefix and session.suffix == plan.suffix
    buffer = plan.prefix
    for request in plan.requests:
        session.insert(request.typed)
        buffer += request.typed
        prefix = session.prefix
        assert count_tokens(prefix) == 400 and buffer.endswith(prefix)
    completion = "return self._value  # accepted from the engine\n"
    session.insert(completion)
    assert session.prefix.endswith(request.typed + completion) and count_tokens(session.prefix) == 400
    assert session.suffix == plan.suffix  # typing at the cursor leaves the text after it alone
    # a long run of typing: the window keeps its size and holds the latest text
    for _ in range(200):
        session.insert(" value = compute(value)\n")
    assert count_tokens(session.prefix) == 400 and completion not in session.prefix


def test_sizes_follow_a_calibrated_backend_scale() -> None:
    from grill_locust.workload.calibrate import TokenCounter

    counter = TokenCounter("b", "http://x/tokenize", "vllm", backend_tokens_per_approx_token=1.25)
    plan = build_workload(autocomplete(prefix_tokens=1000, suffix_tokens=200), token_counter=counter).script(
        "u0", 0
    )
    assert isinstance(plan, AutocompletePlan)
    assert (count_tokens(plan.prefix), count_tokens(plan.suffix), plan.prefix_tokens) == (800, 160, 800)


def test_a_plan_is_cheap_to_make_and_play() -> None:
    import time

    conversation = autocomplete()
    started = time.perf_counter()
    plans = [plan_of(conversation, f"u{index}") for index in range(20)]
    plan_s = (time.perf_counter() - started) / 20
    started = time.perf_counter()
    for plan in plans:
        session = AutocompleteSession(replace(plan))
        for request in plan.requests:
            session.insert(request.typed)
            assert session.prefix
    request_s = (time.perf_counter() - started) / sum(len(plan.requests) for plan in plans)
    # a developer's requests come a few a second: these leave a worker room for hundreds of them
    assert plan_s < 0.02 and request_s < 0.0005, (plan_s, request_s)

"""Distinct means distinct: 100,000 prompts of each kind in measured mode (the approximate tokenizer
plays the backend, as in test_measured.py), none identical and none sharing more leading tokens than
intended.

Intended, per kind: every message meant to be distinct opens with its request id (short-baseline and
unique-prompts prompts, multi-turn system prompts and first turns, shared-prefix questions, which
follow a system prompt shared by design), so the template's own leading tokens in the message are
none. Ids are words drawn one by one from the measured pool, one token each: two prompts can share
their first words by chance, j of them with odds C(N, 2) / P^j among N prompts from a pool of P. The
test allows the longest such run that N prompts reach with odds above 1 in 1,000, and checks that the
pairs sharing two words are as many as independent uniform draws give."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from grill_locust.tokens import tokenize
from grill_locust.workload import build_workload
from grill_locust.workload.generators import (
    ID_ENTROPY_BITS,
    UNIQUE_ID_LETTERS,
    ConversationScript,
    id_words_needed,
)
from tests.workload.test_measured import conversation, counter, measured_on_approximate_tokenizer

PROMPTS_PER_KIND = 100_000
LEAD_TOKENS = 6  # compared token by token: more than chance allows (a pair sharing all fails anyway)
LEAD_CHARS = 80  # enough text for LEAD_TOKENS whole tokens (an id word has at most 8 letters here)
CHANCE_ODDS = 1e-3
PAIR_COUNT_TOLERANCE = 0.25  # pairs sharing two words: Poisson around ~1,000, sd ~3 %

# kind -> conversation (small sizes: fast), and the messages of a script meant to be distinct
KINDS: dict[str, tuple[dict[str, Any], Callable[[ConversationScript], list[str]]]] = {
    "short-baseline": ({"name": "sb", "kind": "short-baseline", "prompt_tokens": 30}, lambda s: s.user_turns),
    "unique-prompts": ({"name": "up", "kind": "unique-prompts", "prompt_tokens": 40}, lambda s: s.user_turns),
    "multi-turn": (
        {"name": "mt", "kind": "multi-turn", "system_tokens": 40, "user_turns": 1, "turn_tokens": 30},
        lambda s: [s.system or "", s.user_turns[0]],
    ),
    "shared-prefix": (
        {"name": "sp", "kind": "shared-prefix", "prefix_tokens": 40, "question_tokens": 30},
        lambda s: s.user_turns,
    ),
}


def chance_words(prompts: int, pool_words: int) -> int:
    """The most leading id words two of `prompts` share by chance, but with odds under CHANCE_ODDS."""
    pairs = math.comb(prompts, 2)
    words = 0
    while pairs / pool_words ** (words + 1) >= CHANCE_ODDS:
        words += 1
    return words


def longest_shared_lead(messages: list[str]) -> int:
    """The most leading tokens any two messages share (neighbours in sorted order share the most)."""
    leads = []
    for message in messages:
        tokens = tokenize(message[:LEAD_CHARS])[:-1]  # the last may be cut
        assert len(tokens) >= LEAD_TOKENS
        leads.append(tuple(tokens[:LEAD_TOKENS]))
    leads.sort()
    longest = 0
    for first, second in zip(leads, leads[1:], strict=False):
        shared = 0
        while shared < LEAD_TOKENS and first[shared] == second[shared]:
            shared += 1
        longest = max(longest, shared)
    return longest


def pairs_sharing_words(messages: list[str], words: int) -> int:
    groups = Counter(tuple(message.split(" ", words)[:words]) for message in messages)
    return sum(math.comb(count, 2) for count in groups.values())


def test_ids_carry_at_least_64_bits_in_every_mode() -> None:
    pool = measured_on_approximate_tokenizer().id_words
    assert len(pool) ** id_words_needed(len(pool)) >= 2**ID_ENTROPY_BITS
    capital_words = 26**UNIQUE_ID_LETTERS
    assert capital_words ** id_words_needed(capital_words) >= 2**ID_ENTROPY_BITS
    # the id is what the generators send: as many words as the pool needs, each one token
    script = build_workload(conversation(**KINDS["short-baseline"][0]), token_counter=counter()).script(
        "u", 0
    )
    request_id = script.user_turns[0].split(":")[0]
    assert len(tokenize(request_id)) == id_words_needed(len(pool)) == len(request_id.split(" "))
    approximate = build_workload(conversation(**KINDS["short-baseline"][0])).script("u", 0)
    exact_id = approximate.user_turns[0].split(":")[0]
    assert len(tokenize(exact_id)) == id_words_needed(capital_words) == len(exact_id.split(" "))


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_hundred_thousand_prompts_share_no_more_than_chance_gives_their_ids(kind: str) -> None:
    fields, distinct_messages = KINDS[kind]
    workload = build_workload(conversation(**fields), token_counter=counter())
    started = time.process_time()
    systems: set[str | None] = set()
    drawn: list[list[str]] = []  # the messages of each script, not the scripts: less for the GC to walk
    for user in range(PROMPTS_PER_KIND):
        script = workload.script(f"run-1.0-p0a0-w{user % 4}-u{user}", 0)
        systems.add(script.system)
        drawn.append(distinct_messages(script))
    print(f"{kind}: {PROMPTS_PER_KIND} scripts in {time.process_time() - started:.1f} s of CPU")
    if kind == "shared-prefix":
        assert len(systems) == 1  # shared by design
    pool_words = len(measured_on_approximate_tokenizer().id_words)
    allowed = chance_words(PROMPTS_PER_KIND, pool_words)
    expected_pairs = math.comb(PROMPTS_PER_KIND, 2) / pool_words**2
    for messages in map(list, zip(*drawn, strict=True)):
        assert len(set(messages)) == len(messages), f"{kind}: identical prompts"
        assert longest_shared_lead(messages) <= allowed, f"{kind}: prompts share more than chance gives"
        found_pairs = pairs_sharing_words(messages, 2)
        assert abs(found_pairs - expected_pairs) <= PAIR_COUNT_TOLERANCE * expected_pairs, (kind, found_pairs)

"""The conversations users send: one generator per workload kind, sized in tokens, seeded.

`build_workload(conversation, model)` returns a `Workload`; `workload.plan(user_key, iteration)` gives
the messages of one whole conversation (a `ConversationPlan`). The same (seed, user_key, iteration)
gives the same plan in every process, so master and workers agree without sending prompts around.

Sizes are exact with the approximate tokenizer (`tokens.py`, which the simulated engine also uses).
With a `TokenCounter` calibrated on a backend's `/tokenize`, the approximate target is scaled by the
backend's tokens per approximate token (see calibrate.py for how close that lands).
"""

from __future__ import annotations

import hashlib
import random
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from grill_locust.config import Conversation, Model
from grill_locust.workload.calibrate import TokenCounter
from grill_locust.workload.corpus import Corpus, Excerpt, stdlib_corpus
from grill_locust.workload.tokens import count_tokens, tokenize, truncate_to_tokens

# Questions developers ask a coding assistant about a piece of code; `{name}` is a definition in it.
QUESTIONS = (
    "Explain what `{name}` does and suggest a refactor.",
    "Is there a bug in `{name}`? Walk me through an edge case that could break it.",
    "Write pytest unit tests for `{name}`, covering the error paths.",
    "Add type hints and a docstring to `{name}` without changing its behaviour.",
    "How would you make `{name}` faster? Show the changed code.",
    "Rewrite `{name}` so a new team member can read it, keeping its behaviour.",
    "What does `{name}` do with empty or unexpected input? Point to the lines.",
    "Review `{name}` as if it were a pull request: what would you ask the author to change?",
    "Port `{name}` to idiomatic Python 3.11, using match statements or dataclasses where they help.",
    "Which callers would break if the signature of `{name}` changed? Suggest a safe migration.",
    "Is `{name}` thread-safe? If not, what would you change?",
    "Summarise the responsibilities of `{name}` in three bullet points, then list its side effects.",
)
FOLLOW_UPS = (
    "Thanks. Now look at `{name}` below: how does it relate to the code above?",
    "Good. Apply the same review to `{name}`:",
    "Next, `{name}`. Could it share a helper with what we just discussed?",
    "One more: does `{name}` below handle errors the same way? Suggest a consistent approach.",
    "And `{name}`: what tests are missing for it?",
)
UNIQUE_ID_LETTERS = 8  # the approximate tokenizer keeps up to 8 letters in one token
_FIT_ATTEMPTS = 6


@dataclass(frozen=True)
class ConversationPlan:
    """Everything one iteration of one user sends: an optional system message and the user turns.

    The user sends the turns one by one, appending each real reply as an assistant message."""

    conversation_id: str
    system: str | None
    user_turns: list[str] = field(default_factory=list)

    def messages(self, turn: int, replies: Sequence[str]) -> list[dict[str, str]]:
        """Chat messages for request `turn` (0-based), with the real `replies` to earlier turns."""
        if len(replies) < turn:
            raise ValueError(f"turn {turn} needs {turn} earlier replies, got {len(replies)}")
        messages = [{"role": "system", "content": self.system}] if self.system else []
        for index in range(turn):
            messages.append({"role": "user", "content": self.user_turns[index]})
            messages.append({"role": "assistant", "content": replies[index]})
        messages.append({"role": "user", "content": self.user_turns[turn]})
        return messages

    def prompt(self, turn: int, replies: Sequence[str]) -> str:
        """The same conversation as one plain-text prompt, for the completions API."""
        parts = []
        for message in self.messages(turn, replies):
            parts.append(f"{message['role'].capitalize()}: {message['content']}")
        parts.append("Assistant:")
        return "\n\n".join(parts)


class Workload:
    """Builds the plans of one conversation (kind, sizes, seed) for any user and iteration."""

    def __init__(
        self,
        conversation: Conversation,
        model: Model | None = None,
        token_counter: TokenCounter | None = None,
        corpus: Corpus | None = None,
    ) -> None:
        self.conversation = conversation
        self.model = model
        self.token_counter = token_counter
        self.corpus = corpus or stdlib_corpus()
        self._shared: dict[str, Any] = {}  # parts every plan shares, built on first use

    @property
    def requests_per_iteration(self) -> int:
        return self.conversation.requests_per_iteration

    def plan(self, user_key: str, iteration: int) -> ConversationPlan:
        conversation = self.conversation
        conversation_id = f"{conversation.name}:{user_key}:{iteration}"
        rng = _rng(conversation.seed, conversation.name, user_key, str(iteration))
        kind = conversation.kind
        if kind == "multi-turn":
            return self._multi_turn(conversation_id, rng)
        if kind == "shared-prefix":
            question = self._question_with_code(rng, self._size(conversation.question_tokens), unique_id(rng))
            return ConversationPlan(conversation_id, self._shared_prefix(), [question])
        if kind == "short-baseline":
            prompt = self._question_with_code(rng, self._size(conversation.prompt_tokens), unique_id(rng))
            return ConversationPlan(conversation_id, None, [prompt])
        if kind == "unique-prompts":
            return ConversationPlan(conversation_id, None, [self._unique_prompt(rng)])
        return self._fixed(conversation_id, rng)

    # ---- the kinds -------------------------------------------------------------------------

    def _multi_turn(self, conversation_id: str, rng: random.Random) -> ConversationPlan:
        conversation = self.conversation
        if conversation.shared_system:
            system, excerpt = self._shared_system()
        else:
            system, excerpt = self._system_prompt(rng, unique_id(rng))
        turns = []
        turn_size = self._size(conversation.turn_tokens)
        for turn in range(conversation.user_turns or 1):
            if turn == 0:
                question = rng.choice(QUESTIONS).format(name=excerpt.definition.name)
                turns.append(
                    _fit(question + "\nThe part I mean:\n```python\n", excerpt.tokens, "\n```", turn_size)
                )
                continue
            # follow-ups stay in the module under discussion, as a developer's session does
            follow_up = self.corpus.excerpt(rng, turn_size, file=excerpt.source)
            head = rng.choice(FOLLOW_UPS).format(name=follow_up.definition.name) + "\n```python\n"
            turns.append(_fit(head, follow_up.tokens, "\n```", turn_size))
        return ConversationPlan(conversation_id, system, turns)

    def _system_prompt(self, rng: random.Random, session_id: str) -> tuple[str, Excerpt]:
        size = self._size(self.conversation.system_tokens)
        excerpt = self.corpus.excerpt(rng, size)
        head = (
            f"Session {session_id}. You are a senior Python engineer pairing with a developer on the "
            f"module `{excerpt.module}`. Answer precisely, quote the lines you change, keep replies short.\n"
            "The developer has this file open:\n```python\n"
        )
        return _fit(head, excerpt.tokens, "\n```\n", size), excerpt

    def _shared_system(self) -> tuple[str, Excerpt]:
        if "system" not in self._shared:
            rng = _rng(self.conversation.seed, self.conversation.name, "shared-system")
            self._shared["system"] = self._system_prompt(rng, "0")
        shared: tuple[str, Excerpt] = self._shared["system"]
        return shared

    def _shared_prefix(self) -> str:
        if "prefix" not in self._shared:
            rng = _rng(self.conversation.seed, self.conversation.name, "prefix")
            size = self._size(self.conversation.prefix_tokens)
            excerpt = self.corpus.excerpt(rng, size)
            head = (
                "You are the coding assistant of a team that maintains a Python code base. The team's "
                "reference sources follow; answer questions about them precisely and cite function names.\n\n"
                f"# {excerpt.module}\n```python\n"
            )
            self._shared["prefix"] = _fit(head, excerpt.tokens, "\n```\n", size)
        prefix: str = self._shared["prefix"]
        return prefix

    def _question_with_code(self, rng: random.Random, size: int, request_id: str) -> str:
        excerpt = self.corpus.excerpt(rng, size)
        question = rng.choice(QUESTIONS).format(name=f"{excerpt.module}.{excerpt.definition.name}")
        return _fit(f"{request_id}: {question}\n```python\n", excerpt.tokens, "\n```", size)

    def _unique_prompt(self, rng: random.Random) -> str:
        size = self._size(self.conversation.prompt_tokens)
        request_id = unique_id(rng)  # first: no two prompts share even their first token
        excerpt = self.corpus.excerpt(rng, size)
        question = rng.choice(QUESTIONS).format(name=excerpt.definition.name)
        head = f"{request_id} code review of `{excerpt.module}`.\n{question}\n```python\n"
        return _fit(head, excerpt.tokens, "\n```", size)

    def _fixed(self, conversation_id: str, rng: random.Random) -> ConversationPlan:
        turns = self.conversation.turns
        system_parts = [turn.content for turn in turns if turn.role == "system"]
        user_turns = [turn.content for turn in turns if turn.role == "user"]
        system = "\n\n".join(system_parts) if system_parts else None
        if self.conversation.salt:
            # a per-conversation line first, so users (and iterations) never share cached prefixes by accident
            salt_line = f"[session {unique_id(rng)}]\n"
            if system is not None:
                system = salt_line + system
            else:
                user_turns[0] = salt_line + user_turns[0]
        return ConversationPlan(conversation_id, system, user_turns)

    def _size(self, tokens: int | None) -> int:
        """The approximate-tokenizer target for `tokens` of the backend's tokenizer."""
        asked = tokens or 1
        return asked if self.token_counter is None else self.token_counter.approx_tokens(asked)


def build_workload(
    conversation: Conversation, model: Model | None = None, token_counter: TokenCounter | None = None
) -> Workload:
    return Workload(conversation, model, token_counter)


def unique_id(rng: random.Random) -> str:
    """Eight capital letters: one token for the approximate tokenizer, distinct from the first letter."""
    return "".join(rng.choice(string.ascii_uppercase) for _ in range(UNIQUE_ID_LETTERS))


def _rng(seed: int, *parts: str) -> random.Random:
    key = "|".join((str(seed), *parts)).encode("utf-8")
    return random.Random(int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big"))


def _fit(head: str, body: str | list[str], tail: str, n_tokens: int) -> str:
    """head + a prefix of body + tail with exactly `n_tokens` approximate tokens.

    `body` (text, or its tokens) must have at least `n_tokens` tokens. If head and tail alone are
    too long, the text is cut."""
    body_tokens = tokenize(body) if isinstance(body, str) else body
    budget = n_tokens - count_tokens(head) - count_tokens(tail)
    text = head + tail
    for _ in range(_FIT_ATTEMPTS):
        if budget < 0:
            break
        text = head + "".join(body_tokens[:budget]) + tail
        difference = n_tokens - count_tokens(text)
        if difference == 0:
            return text
        budget += difference  # a token merged (or split) across a seam: adjust and retry
    # rare: fall back to a plain cut, exact by construction (a prefix of tokens re-tokenizes the same)
    return truncate_to_tokens(head + "".join(body_tokens) + tail, n_tokens)

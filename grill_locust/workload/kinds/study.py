"""The seed study's kinds (multi-turn sessions, a shared prefix, short and unique prompts) and scripted
turns (`fixed`, llm-grill's conversations): chat scripts, their text built in workload/generators.py."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grill_locust.workload.kinds._kind import SESSIONS_PER_S, ChatKind

if TYPE_CHECKING:
    from grill_locust.config import Conversation
    from grill_locust.workload.generators import ConversationScript, Workload
    from grill_locust.workload.seeding import ShapeKey


@dataclass(frozen=True)
class MultiTurn(ChatKind):
    """A developer's session: a system prompt of code, then follow-ups about the same module."""

    def requests_per_iteration(self, conversation: Conversation) -> float:
        return conversation.user_turns or 1

    def build_script(
        self,
        workload: Workload,
        conversation_id: str,
        user_key: str,
        iteration: int,
        rng: random.Random,
        shape: ShapeKey,
    ) -> ConversationScript:
        return workload.multi_turn_script(conversation_id, rng)


@dataclass(frozen=True)
class SharedPrefix(ChatKind):
    """One long prefix every request shares, then a question of its own."""

    def build_script(
        self,
        workload: Workload,
        conversation_id: str,
        user_key: str,
        iteration: int,
        rng: random.Random,
        shape: ShapeKey,
    ) -> ConversationScript:
        return workload.shared_prefix_script(conversation_id, rng)


@dataclass(frozen=True)
class OneQuestion(ChatKind):
    """A single question about code, of prompt_tokens; `unique` ones share not even their head."""

    unique: bool = False

    def build_script(
        self,
        workload: Workload,
        conversation_id: str,
        user_key: str,
        iteration: int,
        rng: random.Random,
        shape: ShapeKey,
    ) -> ConversationScript:
        if self.unique:
            return workload.unique_prompt_script(conversation_id, rng)
        return workload.short_baseline_script(conversation_id, rng)


@dataclass(frozen=True)
class Fixed(ChatKind):
    """The scenario's own turns, salted so that no two users share a cached prefix by accident."""

    def check(self, conversation: Conversation) -> dict[str, object]:
        if not any(turn.role == "user" for turn in conversation.turns):
            raise ValueError("turns: needs at least one user turn (each user turn is one request)")
        return {}

    def requests_per_iteration(self, conversation: Conversation) -> float:
        return sum(1 for turn in conversation.turns if turn.role == "user")

    def build_script(
        self,
        workload: Workload,
        conversation_id: str,
        user_key: str,
        iteration: int,
        rng: random.Random,
        shape: ShapeKey,
    ) -> ConversationScript:
        return workload.fixed_script(conversation_id, rng)


MULTI_TURN = MultiTurn(
    "multi-turn",
    {"system_tokens": 1500, "user_turns": 4, "turn_tokens": 150, "shared_system": False},
    builtin="multi-turn-session",
    rate_unit=SESSIONS_PER_S,
)
SHARED_PREFIX = SharedPrefix(
    "shared-prefix", {"prefix_tokens": 4000, "question_tokens": 100}, builtin="shared-prefix"
)
SHORT_BASELINE = OneQuestion("short-baseline", {"prompt_tokens": 50}, builtin="short-baseline")
UNIQUE_PROMPTS = OneQuestion("unique-prompts", {"prompt_tokens": 3000}, builtin="unique-prompts", unique=True)
FIXED = Fixed("fixed", scripted_turns=True)

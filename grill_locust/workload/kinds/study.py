"""The seed study's kinds (multi-turn sessions, a shared prefix, short and unique prompts) and scripted
turns (`fixed`, llm-grill's conversations): chat scripts, their text built in workload/generators.py."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from grill_locust.config import MAX_TOKENS_PER_MESSAGE, Count, Frozen
from grill_locust.workload.kinds._conversation import ConversationBase
from grill_locust.workload.kinds._kind import SESSIONS_PER_S, ChatKind

if TYPE_CHECKING:
    from grill_locust.workload.generators import ConversationScript, Workload
    from grill_locust.workload.seeding import ShapeKey


class MultiTurnConversation(ConversationBase):
    """A `multi-turn` conversation's keys."""

    kind: Literal["multi-turn"]
    """A developer's session: a system prompt of code, then follow-ups about the same module."""
    system_tokens: Count = Field(default=1500, ge=1, le=MAX_TOKENS_PER_MESSAGE)
    """The system prompt's size in tokens."""
    user_turns: Count = Field(default=4, ge=1, le=100)
    """Requests in one session, each user turn one request."""
    turn_tokens: Count = Field(default=150, ge=1, le=MAX_TOKENS_PER_MESSAGE)
    """Each user turn's size in tokens."""
    shared_system: bool = False
    """Whether every session of the conversation shares one system prompt."""


class SharedPrefixConversation(ConversationBase):
    """A `shared-prefix` conversation's keys."""

    kind: Literal["shared-prefix"]
    """One long prefix every request shares, then a question of its own."""
    prefix_tokens: Count = Field(default=4000, ge=1, le=MAX_TOKENS_PER_MESSAGE)
    """The shared prefix's size in tokens."""
    question_tokens: Count = Field(default=100, ge=1, le=MAX_TOKENS_PER_MESSAGE)
    """Each question's size after the shared prefix."""


class ShortBaselineConversation(ConversationBase):
    """A `short-baseline` conversation's keys."""

    kind: Literal["short-baseline"]
    """A single short question about code."""
    prompt_tokens: Count = Field(default=50, ge=1, le=MAX_TOKENS_PER_MESSAGE)
    """The single prompt's size in tokens."""


class UniquePromptsConversation(ConversationBase):
    """A `unique-prompts` conversation's keys."""

    kind: Literal["unique-prompts"]
    """A single long question whose text shares not even its head with another's."""
    prompt_tokens: Count = Field(default=3000, ge=1, le=MAX_TOKENS_PER_MESSAGE)
    """The single prompt's size in tokens."""


class Turn(Frozen):
    """One scripted message of a fixed (llm-grill) conversation."""

    role: Literal["system", "user", "assistant"]
    """Who says it: the system prompt, the developer (user) or a scripted assistant reply."""
    content: str
    """The message's text, sent as written."""


class FixedConversation(ConversationBase):
    """A `fixed` conversation's keys: llm-grill's conversations."""

    kind: Literal["fixed"]
    """The scenario's own turns, sent as written (a conversation with `turns` and no kind is one)."""
    turns: list[Turn] = Field(default_factory=list)
    """The scripted messages (role and content); each user turn is one request."""

    @model_validator(mode="before")
    @classmethod
    def _has_turns(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("turns"):
            raise ValueError(
                f"turns: kind {data.get('kind', 'fixed')!r} needs turns (a list of role/content)"
            )
        return data

    @model_validator(mode="after")
    def _a_user_turn(self) -> FixedConversation:
        if not any(turn.role == "user" for turn in self.turns):
            raise ValueError("turns: needs at least one user turn (each user turn is one request)")
        return self


@dataclass(frozen=True)
class MultiTurn(ChatKind):
    """A developer's session: a system prompt of code, then follow-ups about the same module."""

    def requests_per_iteration(self, conversation: ConversationBase) -> float:
        assert isinstance(conversation, MultiTurnConversation)
        return conversation.user_turns

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

    def requests_per_iteration(self, conversation: ConversationBase) -> float:
        assert isinstance(conversation, FixedConversation)
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


MULTI_TURN = MultiTurn(MultiTurnConversation, builtin="multi-turn-session", rate_unit=SESSIONS_PER_S)
SHARED_PREFIX = SharedPrefix(SharedPrefixConversation, builtin="shared-prefix")
SHORT_BASELINE = OneQuestion(ShortBaselineConversation, builtin="short-baseline")
UNIQUE_PROMPTS = OneQuestion(UniquePromptsConversation, builtin="unique-prompts", unique=True)
FIXED = Fixed(FixedConversation, scripted_turns=True)

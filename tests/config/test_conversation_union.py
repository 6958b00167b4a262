"""A scenario's conversation is validated by its kind's own model: the union of the kinds' models,
told apart by `kind` (or by what implies it: `turns`, a built-in conversation's name)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from grill_locust.scenario import validate_conversation
from grill_locust.workload.kinds import BUILTIN_CONVERSATION_KINDS, WORKLOAD_KINDS, ConversationBase
from grill_locust.workload.kinds.agentic import AgenticConversation
from grill_locust.workload.kinds.study import FixedConversation

TURNS = [{"role": "user", "content": "hello"}]


def test_each_builtin_conversation_is_of_its_kinds_model() -> None:
    for name, kind in BUILTIN_CONVERSATION_KINDS.items():
        conversation = validate_conversation({"name": name})
        assert type(conversation) is WORKLOAD_KINDS[kind].conversation_model
        assert conversation.workload_kind is WORKLOAD_KINDS[kind]


def test_turns_imply_the_scripted_kind_and_a_written_kind_picks_its_model() -> None:
    assert type(validate_conversation({"name": "c", "turns": TURNS})) is FixedConversation
    agent = validate_conversation({"name": "c", "kind": "agentic", "steps": 3})
    assert isinstance(agent, AgenticConversation) and agent.steps == (3, 3)


def test_a_kind_holds_only_its_own_keys_and_those_every_kind_has() -> None:
    agent = validate_conversation({"name": "c", "kind": "agentic"})
    own = set(type(agent).model_fields) - set(ConversationBase.model_fields)
    assert own == set(WORKLOAD_KINDS["agentic"].sizes) and "prompt_tokens" not in own
    assert agent.model_dump().keys() == type(agent).model_fields.keys()


def test_an_unknown_key_lists_the_keys_of_the_conversations_kind() -> None:
    with pytest.raises(ValidationError) as raised:
        validate_conversation({"name": "c", "kind": "short-baseline", "bogus": 1})
    known = ", ".join(sorted([*ConversationBase.model_fields, "prompt_tokens"]))
    assert f"bogus: unknown key (known: {known})" in str(raised.value)


def test_turns_on_another_kind_name_the_kind_they_are_for() -> None:
    with pytest.raises(ValidationError, match="turns: only for kind 'fixed', not 'multi-turn'"):
        validate_conversation({"name": "c", "kind": "multi-turn", "turns": TURNS})

"""Every key a conversation may hold says what it is (docs/scenarios.md is generated from these)."""

from __future__ import annotations

from grill_locust.config import Conversation


def test_every_conversation_field_has_a_description() -> None:
    undescribed = [name for name, field in Conversation.model_fields.items() if not field.description]
    assert not undescribed

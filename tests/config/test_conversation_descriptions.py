"""Every key a conversation may hold says what it is (docs/scenarios.md is generated from these)."""

from __future__ import annotations

from grill_locust.workload.kinds import WORKLOAD_KINDS


def test_every_conversation_field_has_a_description() -> None:
    undescribed = [
        f"{kind.conversation_model.__name__}.{name}"
        for kind in WORKLOAD_KINDS.values()
        for name, field in kind.conversation_model.model_fields.items()
        if not field.description
    ]
    assert not undescribed

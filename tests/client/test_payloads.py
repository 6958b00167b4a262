"""Request bodies: the ignore-EOS setting goes out under the engine's own parameter name, or not at all."""

from __future__ import annotations

import pytest

from grill_locust.client import chat_payload, completions_payload
from grill_locust.config import Model
from grill_locust.engines import ENGINE_NAMES, engine_facts

MODEL = Model(name="devstral", max_tokens=16, ignore_eos=True)
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_ignore_eos_is_sent_as_the_engines_parameter(engine: str) -> None:
    parameter = engine_facts(engine).ignore_eos_param
    for body in (
        chat_payload(MODEL, MESSAGES, engine=engine),
        completions_payload(MODEL, "x", engine=engine),
    ):
        flags = {key for key, value in body.items() if value is True and key != "stream"}
        assert flags == ({parameter} if parameter else set())


def test_engines_without_the_parameter_get_none_and_a_model_without_ignore_eos_sends_none() -> None:
    assert "ignore_eos" in chat_payload(MODEL, MESSAGES, engine="vllm")
    assert "ignore_eos" not in chat_payload(MODEL, MESSAGES, engine="tgi")
    assert "ignore_eos" not in chat_payload(MODEL, MESSAGES, engine="ollama")
    plain = Model(name="devstral", max_tokens=16)
    assert "ignore_eos" not in chat_payload(plain, MESSAGES, engine="vllm")
    assert chat_payload(MODEL, MESSAGES)["ignore_eos"] is True  # any OpenAI-compatible server by default

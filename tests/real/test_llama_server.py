"""Direct checks of a real llama.cpp `llama-server`: the engine facts the load tester relies on (the
shared assertions of tests/llamacpp_contract.py, which the simulator passes too) and the tokenizer
calibration."""

from __future__ import annotations

import pytest
import requests

from grill_locust.config import Conversation, Model
from grill_locust.workload import backend_token_counter, build_workload
from grill_locust.workload.calibrate import clear_cache
from tests import llamacpp_contract as contract
from tests.real.conftest import SERVED_MODEL, ServerProcess

pytestmark = pytest.mark.real

CALIBRATION_TOLERANCE = 0.02  # issue 8: prompt sizes within +-2 % of their targets on the engine's tokenizer
SHORT_MESSAGE_SLACK_TOKENS = 1  # 2 % of a 50-token message is under one token


def remote_tokens(server: ServerProcess, text: str) -> int:
    response = requests.post(f"{server.url}/tokenize", json={"content": text}, timeout=30)
    response.raise_for_status()
    return len(response.json()["tokens"])


# the same assertions run against the simulator's llamacpp flavor (tests/client/test_client_llamacpp.py)
@pytest.mark.parametrize("check", contract.SERVER_CHECKS, ids=lambda check: check.__name__)
def test_llama_server_answers_as_the_simulator_assumes(
    llama_server: ServerProcess, check: contract.Check
) -> None:
    check(llama_server.url, SERVED_MODEL)


@pytest.mark.parametrize(
    "conversation",
    [
        {"name": "multi-turn-session", "kind": "multi-turn", "user_turns": 2},
        {"name": "shared-prefix", "kind": "shared-prefix"},
        {"name": "short-baseline", "kind": "short-baseline"},
        {"name": "unique-prompts", "kind": "unique-prompts"},
    ],
    ids=lambda c: c["kind"],
)
def test_prompt_sizes_calibrated_on_its_tokenize_hit_their_targets(
    llama_server: ServerProcess, conversation: dict[str, object]
) -> None:
    clear_cache()
    counter = backend_token_counter(contract.llama_backend(llama_server.url))
    assert counter is not None, "calibration through /tokenize failed"
    spec = Conversation.model_validate(conversation)
    script = build_workload(spec, Model(name=SERVED_MODEL), token_counter=counter).script("user-1", 0)
    targets: list[tuple[str, str, int]] = []
    if spec.kind == "multi-turn":
        targets.append(("system", script.system or "", spec.system_tokens or 0))
        targets += [(f"turn {i}", turn, spec.turn_tokens or 0) for i, turn in enumerate(script.user_turns)]
    elif spec.kind == "shared-prefix":
        targets += [
            ("prefix", script.system or "", spec.prefix_tokens or 0),
            ("question", script.user_turns[0], spec.question_tokens or 0),
        ]
    else:
        targets.append(("prompt", script.user_turns[0], spec.prompt_tokens or 0))
    for part, text, target in targets:
        measured = remote_tokens(llama_server, text)
        allowed = max(CALIBRATION_TOLERANCE * target, SHORT_MESSAGE_SLACK_TOKENS)
        assert abs(measured - target) <= allowed, f"{spec.kind} {part}: {measured} tokens, target {target}"

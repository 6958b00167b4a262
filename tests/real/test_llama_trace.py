"""A trace replayed against a real llama.cpp `llama-server`: each row reaches the engine at its input
length (usage.prompt_tokens, the chat template's tokens included) and generates its output length in
full (`ignore_eos`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from grill_locust.client import EngineClient, request_for
from grill_locust.config import Model
from grill_locust.record import STATUS_OK, measure
from grill_locust.scenario import validate_conversation
from grill_locust.workload import backend_token_counter, build_workload
from grill_locust.workload.generators import ConversationScript
from tests import llamacpp_contract as contract
from tests.real.conftest import SERVED_MODEL, ServerProcess

pytestmark = pytest.mark.real

TRACES = Path(__file__).parents[1] / "workload" / "traces"
REPLAY_TOLERANCE = 0.01  # the engine's prompt_tokens within ±1 % of the row's input length


def prompt_tokens(backend: Any, client: EngineClient, script: ConversationScript) -> int:
    """The engine's usage.prompt_tokens for the row sent as the replay sends it (one token out)."""
    messages = [{"role": "user", "content": script.user_turns[0]}]
    metrics = measure(
        client.stream(*request_for(backend, Model(name=SERVED_MODEL, max_tokens=1), messages)).raw
    )
    assert metrics.status == STATUS_OK and metrics.prompt_tokens is not None, metrics.error
    return metrics.prompt_tokens


def test_trace_rows_reach_the_engine_at_their_input_length_and_generate_their_output_length(
    llama_server: ServerProcess,
) -> None:
    """usage.prompt_tokens on the chat API is the row's input length: the chat template's tokens
    (gemma's turn tags and BOS) are measured once and taken off the prompt."""
    backend = contract.llama_backend(llama_server.url)
    counter = backend_token_counter(backend)
    assert counter is not None, "calibration through /tokenize failed"
    assert counter.turn_overhead_tokens > 0
    mooncake = validate_conversation(
        {"name": "replay", "kind": "trace", "format": "mooncake", "path": str(TRACES / "mooncake.jsonl")}
    )
    workload = build_workload(mooncake, Model(name=SERVED_MODEL), token_counter=counter)
    client = EngineClient(backend)
    try:
        # tests/workload/traces/mooncake.jsonl's rows that fit a slot's 1,024 tokens
        targets = {1: 700, 3: 300, 4: 520}
        sizes = {}
        for iteration in targets:
            script = workload.script("real-1", iteration)
            assert isinstance(script, ConversationScript)
            sizes[iteration] = prompt_tokens(backend, client, script)
    finally:
        client.close()
    for iteration, target in targets.items():
        assert abs(sizes[iteration] - target) <= REPLAY_TOLERANCE * target, (sizes, targets)

    azure = validate_conversation(
        {"name": "replay", "kind": "trace", "format": "azure", "path": str(TRACES / "azure.csv")}
    )
    row = build_workload(azure, Model(name=SERVED_MODEL), token_counter=counter).script("real-2", 0)
    assert isinstance(row, ConversationScript) and row.max_tokens == 44
    client = EngineClient(backend)
    try:
        model = azure.sending(Model(name=SERVED_MODEL)).with_settings(max_tokens=row.max_tokens)
        assert model.ignore_eos
        messages = [{"role": "user", "content": row.user_turns[0]}]
        metrics = measure(client.stream(*request_for(backend, model, messages)).raw)
    finally:
        client.close()
    assert metrics.status == STATUS_OK, metrics.error
    assert (metrics.output_tokens, metrics.finish_reason) == (44, "length")
    assert metrics.prompt_tokens is not None and abs(metrics.prompt_tokens - 374) <= REPLAY_TOLERANCE * 374

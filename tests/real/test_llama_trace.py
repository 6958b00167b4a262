"""A trace replayed against a real llama.cpp `llama-server`: rows' prompts calibrated on its tokenizer
within the tolerance other kinds meet there, and each row's output length generated in full
(`ignore_eos`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from grill_locust.client import EngineClient, request_for
from grill_locust.config import Conversation, Model
from grill_locust.record import STATUS_OK, measure
from grill_locust.workload import backend_token_counter, build_workload
from grill_locust.workload.generators import ConversationScript
from tests import llamacpp_contract as contract
from tests.real.conftest import SERVED_MODEL, ServerProcess
from tests.real.test_llama_server import CALIBRATION_TOLERANCE

pytestmark = pytest.mark.real

TRACES = Path(__file__).parents[1] / "workload" / "traces"


def remote_tokens(server: ServerProcess, text: str) -> int:
    response = requests.post(f"{server.url}/tokenize", json={"content": text}, timeout=30)
    response.raise_for_status()
    return len(response.json()["tokens"])


def test_trace_rows_calibrated_and_generated_to_their_output_length(llama_server: ServerProcess) -> None:
    backend = contract.llama_backend(llama_server.url)
    counter = backend_token_counter(backend)
    assert counter is not None, "calibration through /tokenize failed"
    mooncake = Conversation.model_validate(
        {"name": "replay", "kind": "trace", "format": "mooncake", "path": str(TRACES / "mooncake.jsonl")}
    )
    workload = build_workload(mooncake, Model(name=SERVED_MODEL), token_counter=counter)
    prompts = []
    for iteration in range(5):
        script = workload.script("real-1", iteration)
        assert isinstance(script, ConversationScript)
        prompts.append(script.user_turns[0])
    sizes = [remote_tokens(llama_server, prompt) for prompt in prompts]
    targets = [1100, 700, 1300, 300, 520]  # tests/workload/traces/mooncake.jsonl
    for size, target in zip(sizes, targets, strict=True):
        assert abs(size - target) <= CALIBRATION_TOLERANCE * target, (sizes, targets)

    azure = Conversation.model_validate(
        {"name": "replay", "kind": "trace", "format": "azure", "path": str(TRACES / "azure.csv")}
    )
    row = build_workload(azure, Model(name=SERVED_MODEL), token_counter=counter).script("real-2", 0)
    assert isinstance(row, ConversationScript) and row.max_tokens == 44 and row.ignore_eos
    client = EngineClient(backend)
    try:
        model = Model(name=SERVED_MODEL, max_tokens=row.max_tokens)
        messages = [{"role": "user", "content": row.user_turns[0]}]
        metrics = measure(
            client.stream(*request_for(backend, model, messages, ignore_eos=row.ignore_eos)).raw
        )
    finally:
        client.close()
    assert metrics.status == STATUS_OK, metrics.error
    assert (metrics.output_tokens, metrics.finish_reason) == (44, "length")

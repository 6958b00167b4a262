"""A trace replayed through a real LiteLLM proxy in front of llama-server: the gateway has no tokenize
endpoint, so the chat template's tokens are measured from the engine's usage of two calibration
requests (workload/calibrate.py's usage fit) and taken off each row's prompt. What the engine adds to
a row's text is what was taken off, within ±1 % of the row; the text's own size is the scaled mode's
(no tokenizer to measure the code with: a 500-token block's count scatters by ~5 % on gemma), which the
test prints. In this session's proxy and llama-server (tests/real/conftest.py), not a second pair."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from grill_locust.client import EngineClient, request_for
from grill_locust.client.backend_http import tokenize
from grill_locust.config import Backend, Model
from grill_locust.record import STATUS_OK, measure
from grill_locust.scenario import validate_conversation
from grill_locust.workload import backend_token_counter, build_workload
from grill_locust.workload.calibrate import clear_cache
from grill_locust.workload.generators import ConversationScript
from grill_locust.workload.trace import read_trace
from tests import llamacpp_contract as contract
from tests.real.conftest import PROXY_MODEL, ServerProcess

pytestmark = pytest.mark.real

TRACES = Path(__file__).parents[1] / "workload" / "traces"
REPLAY_TOLERANCE = 0.01  # the template's share of each row within ±1 % of its input length
# REFERENCE_TURN's own tokens are estimated by the fit's scale: its id head is a token or two more on
# gemma than the estimate says, which the fit counts as the template's
HEAD_SLACK_TOKENS = 2
SCALE_TOLERANCE = 0.10  # one excerpt's ratio against the whole stream's (about ±3 % on gemma, 1 sd)
# rows of tests/workload/traces that fit a llama-server slot's 1,024 tokens: (format, file, rows)
ROWS = (("mooncake", "mooncake.jsonl", (1, 3, 4)), ("azure", "azure.csv", (0, 1, 3)))


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


def test_a_trace_through_litellm_has_the_template_measured_by_usage_and_taken_off(
    litellm_proxy: ServerProcess, llama_server: ServerProcess, master_key: str
) -> None:
    gateway = Backend(name="gateway", engine="litellm", url=litellm_proxy.url, api_key=master_key)
    assert gateway.tokenize_url is None
    counter = backend_token_counter(gateway, PROXY_MODEL)
    assert counter is not None and counter.tokenize_url is None and counter.measured is None
    # the engine behind it, measured through its own /tokenize: the same template, the same tokenizer
    engine = contract.llama_backend(llama_server.url)
    exact = backend_token_counter(engine)
    assert exact is not None and exact.turn_overhead_tokens > 0
    assert abs(counter.turn_overhead_tokens - exact.turn_overhead_tokens) <= HEAD_SLACK_TOKENS
    assert counter.backend_tokens_per_approx_token == pytest.approx(
        exact.backend_tokens_per_approx_token, rel=SCALE_TOLERANCE
    )

    client = EngineClient(gateway)
    sent = []  # (row, the engine's prompt_tokens, the engine's own count of the row's text)
    try:
        for trace_format, name, lines in ROWS:
            path = str(TRACES / name)
            conversation = validate_conversation(
                {"name": "replay", "kind": "trace", "format": trace_format, "path": path}
            )
            workload = build_workload(conversation, Model(name=PROXY_MODEL), token_counter=counter)
            rows = read_trace(path, trace_format)
            for iteration in lines:
                script = workload.script("gateway-1", iteration)
                assert isinstance(script, ConversationScript)
                text = script.user_turns[0]
                one_token = Model(name=PROXY_MODEL, max_tokens=1)
                request = request_for(gateway, one_token, [{"role": "user", "content": text}])
                metrics = measure(client.stream(*request).raw)
                assert metrics.status == STATUS_OK and metrics.prompt_tokens is not None, metrics.error
                own = tokenize(f"{llama_server.url}/tokenize", "llamacpp", text).count
                sent.append((rows[iteration], metrics.prompt_tokens, own))
    finally:
        client.close()
    for row, prompt_tokens, own in sent:
        error = (prompt_tokens - row.input_tokens) / row.input_tokens
        print(f"row of {row.input_tokens}: prompt_tokens {prompt_tokens} ({error:+.2%})", file=sys.stderr)
        # what the engine added to the row's text is what the fit took off, within ±1 % of the row
        assert abs(prompt_tokens - own - counter.turn_overhead_tokens) <= REPLAY_TOLERANCE * row.input_tokens

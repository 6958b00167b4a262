"""The client's llama.cpp paths against the simulated engine's `llamacpp` flavor, with the assertions
the real llama-server passes too (tests/llamacpp_contract.py, run by tests/real/test_llama_server.py):
timings-derived cached tokens, a fresh connection per stream, HTTP 400 for a prompt larger than a
slot, `/tokenize` on `content`, `/metrics` in llamacpp:* names. No real server needed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from grill_locust.client.backend_http import tokenize
from grill_locust.sim import SimProcess
from tests import llamacpp_contract as contract

MODEL = "grill-sim"
# 4 slots of (256 blocks x 16 tokens) / 4 = 1024 tokens each, as the real server's `-c 4096 -np 4`
KV_BLOCKS = contract.SLOTS * contract.SLOT_CONTEXT_TOKENS // 16
SLOT_ARGS = ["--max-num-seqs", str(contract.SLOTS), "--kv-blocks", str(KV_BLOCKS)]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with SimProcess.start(profile="llamacpp", served_model_name=MODEL, extra_args=SLOT_ARGS) as process:
        yield process.url


@pytest.mark.parametrize("check", contract.SERVER_CHECKS, ids=lambda check: check.__name__)
def test_simulator_answers_as_llama_server_does(url: str, check: contract.Check) -> None:
    check(url, MODEL)


def test_a_backend_naming_it_engine_sim_tokenizes_in_vllms_shape(url: str) -> None:
    # `engine: sim, profile: llamacpp` (scenarios/demo.yaml): the run calibrates through the sim's shape
    text = "def add(a, b):\n    return a + b\n"
    assert (
        tokenize(f"{url}/tokenize", "sim", text).count
        == tokenize(f"{url}/tokenize", "llamacpp", text).count
        > 5
    )

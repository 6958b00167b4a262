"""Prompt sizes through a backend's own tokenizer: `backend_token_counter` against real servers."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grill_locust.config import Backend, Conversation
from grill_locust.workload import backend_token_counter, build_workload
from grill_locust.workload.calibrate import clear_cache

TOLERANCE = 0.02  # the goal: sizes within ±2 % on the backend's tokenizer
MEAN_ERROR_ONE_SCALE = 0.20  # what one calibration scale achieves on a real BPE tokenizer today
LLAMA_START_TIMEOUT_S = 60.0


def sim_module() -> Any:
    try:
        from grill_locust import sim
    except ImportError as error:  # the simulated engine is built by another package
        pytest.skip(f"grill_locust.sim.SimProcess is not importable yet: {error}")
    if not hasattr(sim, "SimProcess"):
        pytest.skip("grill_locust.sim has no SimProcess yet")
    return sim


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


def backend(**fields: Any) -> Backend:
    return Backend.model_validate({"name": "b", **fields})


def sizes_on_backend(counter: Any, users: int = 3) -> list[tuple[int, int]]:
    """(asked, measured by the backend) for every message of a few plans of each kind."""
    pairs = []
    kinds = {
        "multi-turn-session": {},
        "shared-prefix": {"prefix_tokens": 2000},
        "short-baseline": {"prompt_tokens": 200},
        "unique-prompts": {"prompt_tokens": 3000},
    }
    for name, sizes in kinds.items():
        conversation = Conversation.model_validate({"name": name, **sizes})
        workload = build_workload(conversation, token_counter=counter)
        for user in range(users):
            plan = workload.plan(f"u{user}", 0)
            asked_system = conversation.system_tokens or conversation.prefix_tokens
            if plan.system is not None and asked_system:
                pairs.append((asked_system, counter.remote_count(plan.system)))
            asked_turn = (
                conversation.turn_tokens or conversation.question_tokens or conversation.prompt_tokens
            )
            for turn in plan.user_turns:
                pairs.append((asked_turn, counter.remote_count(turn)))
    return pairs


def test_calibration_against_the_simulated_engine() -> None:
    sim = sim_module()
    with sim.SimProcess.start(profile="vllm") as process:
        target = backend(engine="sim", url=process.url)
        counter = backend_token_counter(target)
        assert counter is not None
        assert counter.model == "grill-sim"  # found at /v1/models
        # the simulated engine tokenizes with the approximate tokenizer: the scale is exactly 1
        assert counter.backend_tokens_per_approx_token == pytest.approx(1.0)
        assert backend_token_counter(target) is counter  # cached per backend
        for asked, measured in sizes_on_backend(counter, users=2):
            assert measured == asked


def test_no_tokenize_endpoint_means_approximate_sizes() -> None:
    assert backend_token_counter(backend(engine="openai", url="http://127.0.0.1:9")) is None


def test_a_failing_tokenize_endpoint_falls_back_once(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    target = backend(engine="vllm", url=f"http://127.0.0.1:{closed_port}", api_key="sk-do-not-log")
    with caplog.at_level(logging.WARNING):
        assert backend_token_counter(target) is None
        start = time.monotonic()
        assert backend_token_counter(target) is None  # cached: no second attempt
        assert time.monotonic() - start < 0.5
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "approximate tokenizer" in warnings[0]
    assert "sk-do-not-log" not in caplog.text


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def llama_server() -> Iterator[str]:
    binary, model = os.environ.get("GRILL_LLAMA_SERVER"), os.environ.get("GRILL_LLAMA_MODEL")
    if not binary or not model or not Path(binary).exists() or not Path(model).exists():
        pytest.skip('no llama-server: run eval "$(bash .ci/setup_llama.sh)" to build one with a small GGUF')
    port = _free_port()
    process = subprocess.Popen(
        [
            binary,
            "-m",
            model,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "-c",
            "8192",
            "-np",
            "1",
            "-t",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + LLAMA_START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1.0) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
            if process.poll() is not None:
                pytest.fail(f"llama-server exited with {process.returncode}")
        else:
            pytest.fail("llama-server did not become healthy")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.mark.slow
def test_calibration_against_a_real_llama_server(llama_server: str) -> None:
    """llama.cpp's request shape works and the scale brings sizes near the target on a real BPE tokenizer."""
    counter = backend_token_counter(backend(engine="llamacpp", url=llama_server))
    assert counter is not None and counter.engine == "llamacpp"
    assert 0.5 < counter.backend_tokens_per_approx_token < 2.0
    pairs = sizes_on_backend(counter)
    mean_error = sum(abs(measured - asked) / asked for asked, measured in pairs) / len(pairs)
    assert mean_error < MEAN_ERROR_ONE_SCALE, f"mean size error {mean_error:.1%} over {len(pairs)} messages"


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="one scale per backend is not enough for ±2 % per message on a real BPE tokenizer "
    "(measured on gemma-3 via llama-server: -33 % .. +21 %); needs per-message sizing with token pieces",
)
def test_sizes_within_two_percent_on_a_real_llama_server(llama_server: str) -> None:
    counter = backend_token_counter(backend(engine="llamacpp", url=llama_server))
    pairs = sizes_on_backend(counter)
    misses = [(asked, measured) for asked, measured in pairs if abs(measured - asked) > TOLERANCE * asked]
    assert not misses, f"outside ±2 %: {misses} (of {len(pairs)})"

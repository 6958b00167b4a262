"""EngineClient against the simulated engine (grill_locust.sim): timings against its truth log,
usage and cached tokens, keep-alive, and each fault it injects becoming the right status."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from client_servers import backend

from grill_locust.client import EngineClient, chat_payload, completions_payload
from grill_locust.record import measure
from grill_locust.sim import SimProcess

MODEL = "grill-sim"
SYSTEM = "You review Python code. " * 60


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    truth = tmp_path_factory.mktemp("sim") / "truth.jsonl"
    with SimProcess.start(profile="vllm", served_model_name=MODEL, truth_log=str(truth)) as process:
        yield process.url, truth


def messages(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


def read_truth(path: Path, count: int, timeout_s: float = 5.0) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            if len(lines) >= count:
                return lines
        time.sleep(0.05)
    raise AssertionError(f"truth log has fewer than {count} records")


@pytest.mark.slow
def test_client_timings_match_the_simulators_truth(sim: tuple[str, Path]) -> None:
    url, truth_path = sim
    client = EngineClient(backend(url, tokenize_url=url + "/tokenize"))
    model = type("Model", (), {"name": MODEL, "max_tokens": 12, "temperature": 0.0, "ignore_eos": True})()
    results = [
        client.stream("/v1/chat/completions", chat_payload(model, messages(f"question {i}")))
        for i in range(3)
    ]
    results.append(client.stream("/v1/completions", completions_payload(model, SYSTEM + "def f(")))
    assert client.connections_opened == 1  # keep-alive across all four
    truths = read_truth(truth_path, 4)[-4:]
    for result, truth in zip(results, truths, strict=True):
        m = measure(result.raw)
        assert (m.status, m.tokens_source, m.output_tokens) == (
            "ok",
            "usage",
            truth["output_tokens"] == 12 and 12,
        )
        assert m.cached_tokens == truth["cached_tokens"] and m.prompt_tokens == truth["prompt_tokens"]
        # our arrival times, on the wall clock, just after the simulator's true send times
        arrivals = [result.raw.wall_start + (t - result.raw.t0) for t in result.raw.output_times]
        assert len(arrivals) == len(truth["event_times"])
        lags = [a - s for a, s in zip(arrivals, truth["event_times"], strict=True)]
        assert all(-0.002 < lag < 0.05 for lag in lags), lags
    assert measure(results[1].raw).cached_tokens > 0  # the shared system prompt hit the prefix cache


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "status"),
    [
        ("500", "http_500"),
        ("503", "http_503"),
        ("429", "http_429"),
        ("stall", "timeout"),
        ("cut", "stream_cut"),
        ("bad_json", "bad_event"),
        ("trickle", "ok"),
    ],
)
def test_simulator_faults_become_their_status(sim: tuple[str, Path], fault: str, status: str) -> None:
    url, _ = sim
    client = EngineClient(backend(url, headers={"X-Grill-Fault": fault}, first_token_s=1.0, total_s=3.0))
    payload = chat_payload(MODEL, messages("hi"), {"max_tokens": 3})
    result = client.stream("/v1/chat/completions", payload)
    m = measure(result.raw)
    assert m.status == status, (m.error, m.http_status)
    assert m.e2e_s is not None and m.e2e_s < 3.5
    if status.startswith("http_"):
        assert m.error and m.http_status == int(status[5:])
    if fault == "429":
        assert result.retry_after_s is not None and result.retry_after_s >= 0


def test_stream_options_in_extra_body_add_to_include_usage(sim: tuple[str, Path]) -> None:
    url, _ = sim
    payload = chat_payload(
        MODEL, messages("hi"), {"max_tokens": 3, "stream_options": {"continuous_usage_stats": True}}
    )
    assert payload["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    m = measure(EngineClient(backend(url)).stream("/v1/chat/completions", payload).raw)
    assert (m.status, m.output_tokens, m.tokens_source) == ("ok", 3, "usage")
    off = chat_payload(MODEL, messages("hi"), {"stream_options": {"include_usage": False}})
    assert off["stream_options"] == {"include_usage": False}  # a deliberate choice stands

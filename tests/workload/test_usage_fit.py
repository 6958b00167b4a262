"""The usage fit (workload/calibrate.py): a backend without a tokenize endpoint is measured from the
engine's usage of two requests, so that a replayed trace row still reaches the engine at its input
length. Against the simulated engine served as a plain OpenAI-compatible server (`engine: openai`:
no tokenize_url), in a real headless Locust run checked against the simulator's truth log."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from grill_locust.config import Backend
from grill_locust.sim import SimProcess
from grill_locust.sim.text import render_chat
from grill_locust.tokens import count_tokens
from grill_locust.workload import backend_token_counter
from grill_locust.workload.calibrate import CALIBRATION_ID_PREFIX, clear_cache, usage_fit, usage_turns
from grill_locust.workload.trace import read_trace
from tests.ports import free_port
from tests.run.conftest import only_run_dir, read_truth, run_locust, truth_once_it_holds, write_scenario

MODEL = "grill-sim"
TRACE = Path(__file__).with_name("traces") / "mooncake.jsonl"
REPLAY_TOLERANCE = 0.01  # the engine's prompt_tokens within ±1 % of the row's input length
# the simulator's chat template around one user turn, which the fit must find
TEMPLATE_TOKENS = count_tokens(render_chat([{"role": "user", "content": ""}]))


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess.start(profile="vllm", served_model_name=MODEL) as process:
        yield process


def plain(url: str, **fields: object) -> Backend:
    backend = Backend.model_validate({"name": "plain", "engine": "openai", "url": url, **fields})
    assert backend.tokenize_url is None  # what the fit is for
    return backend


@pytest.mark.parametrize("api", ["chat", "completions", "messages"])
def test_the_fit_finds_the_overhead_the_tokenize_endpoint_measures(sim: SimProcess, api: str) -> None:
    """Two independent measures of one template: the usage fit on a backend without /tokenize, and
    /tokenize of the rendered turn on the same engine named `sim`; the simulator's scale is exactly 1."""
    engine = "litellm" if api == "messages" else "openai"  # `openai` serves no Messages API
    fit = usage_fit(plain(sim.url, engine=engine, api=api), MODEL)
    by_tokenize = backend_token_counter(Backend(name="sim", engine="sim", url=sim.url, api=api))
    assert by_tokenize is not None and by_tokenize.turn_overhead_tokens > 0
    assert fit.overhead_tokens == by_tokenize.turn_overhead_tokens
    assert fit.scale == pytest.approx(1.0)
    small, large = usage_turns()
    assert fit.prompt_tokens == (
        count_tokens(small) + fit.overhead_tokens,
        count_tokens(large) + fit.overhead_tokens,
    )


def test_a_backend_without_tokenize_gets_a_counter_from_usage_once(
    sim: SimProcess, caplog: pytest.LogCaptureFixture
) -> None:
    backend = plain(sim.url)
    with caplog.at_level(logging.INFO, logger="grill_locust.workload.calibrate"):
        counter = backend_token_counter(backend)  # the model: the first the backend lists
        assert backend_token_counter(backend) is counter  # cached per backend and model
    assert counter is not None and counter.tokenize_url is None and counter.model == MODEL
    assert counter.turn_overhead_tokens == TEMPLATE_TOKENS
    assert counter.backend_tokens_per_approx_token == pytest.approx(1.0)
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        f"backend plain: measured by the engine's usage (requests {CALIBRATION_ID_PREFIX}*): "
        f"prompt_tokens = 1.0000 x approximate tokens + {TEMPLATE_TOKENS}, the chat template's tokens "
        "taken off each trace row"
    ]


def test_a_failing_tokenize_endpoint_falls_back_on_usage(
    sim: SimProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """A tokenize_url that does not answer: the whole counter comes from the engine's usage."""
    backend = Backend(
        name="sim", engine="sim", url=sim.url, tokenize_url=f"http://127.0.0.1:{free_port()}/tokenize"
    )
    with caplog.at_level(logging.INFO, logger="grill_locust.workload.calibrate"):
        counter = backend_token_counter(backend, MODEL)
    assert counter is not None and counter.tokenize_url is None
    assert counter.turn_overhead_tokens == TEMPLATE_TOKENS
    lines = [record.getMessage() for record in caplog.records if "usage" in record.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("backend sim: tokenize failed (http://127.0.0.1:"), lines


def test_a_template_tokenize_cannot_render_is_measured_by_usage(
    sim: SimProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """llama.cpp's shape against an engine without /apply-template (the simulator's vLLM profile): the
    scale from /tokenize, the template's tokens from usage."""
    backend = Backend(name="llamacpp-like", engine="llamacpp", url=sim.url)
    with caplog.at_level(logging.INFO, logger="grill_locust.workload.calibrate"):
        counter = backend_token_counter(backend, MODEL)
    assert counter is not None and counter.tokenize_url == f"{sim.url}/tokenize"
    assert counter.turn_overhead_tokens == TEMPLATE_TOKENS
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1 and "the chat template's tokens cannot be measured by tokenize" in lines[0]
    assert "/apply-template: HTTP 404" in lines[0]


def test_without_usage_in_the_answer_one_warning_and_no_overhead(
    sim: SimProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """The check above can fail: an engine whose stream carries no usage gives nothing to fit."""
    no_usage = plain(sim.url, extra_body={"stream_options": {"include_usage": False}})
    with caplog.at_level(logging.INFO, logger="grill_locust.workload.calibrate"):
        assert backend_token_counter(no_usage, MODEL) is None
    lines = [(record.levelno, record.getMessage()) for record in caplog.records]
    assert len(lines) == 1 and lines[0][0] == logging.WARNING, lines
    assert "the answer has no usage" in lines[0][1] and "approximate tokenizer" in lines[0][1]


@pytest.mark.slow
def test_a_trace_replayed_on_a_backend_without_tokenize_reaches_the_engine_at_its_input_length(
    tmp_path: Path,
) -> None:
    """A headless Locust run: every row's prompt_tokens in the truth log is its input length (±1 %; the
    simulator's exactly), the two calibration requests are in the truth log under their prefix and in
    no record, and every other request the engine received is a record."""
    rows = read_trace(str(TRACE), "mooncake")
    truth_path = tmp_path / "truth.jsonl"
    with SimProcess.start(profile="vllm", served_model_name=MODEL, truth_log=str(truth_path)) as sim:
        scenario = {
            "name": "usage-fit",
            "backends": [{"name": "plain", "engine": "openai", "url": sim.url}],
            "models": [{"name": MODEL, "max_tokens": 8}],
            "conversations": [{"name": "replay", "kind": "trace", "format": "mooncake", "path": str(TRACE)}],
            "targets": [{"backend": "plain", "model": MODEL, "conversation": "replay"}],
        }
        path = write_scenario(tmp_path / "s.yaml", scenario)
        done = run_locust(["--scenario", str(path), "--results-dir", str(tmp_path / "results")], tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        records = pd.read_parquet(only_run_dir(tmp_path / "results") / "records.parquet")
        assert (records["status"] == "ok").all(), records["error"].dropna().unique()
        calibration = {line["request_id"] for line in read_truth(truth_path)} - set(records["record_id"])
        truth = truth_once_it_holds(truth_path, set(records["record_id"]) | calibration)
    assert f"approximate tokens + {TEMPLATE_TOKENS}, the chat template's tokens" in done.stderr
    calibrating = [line for line in truth if line["request_id"].startswith(CALIBRATION_ID_PREFIX)]
    load = [line for line in truth if not line["request_id"].startswith(CALIBRATION_ID_PREFIX)]
    small, large = usage_turns()
    assert sorted(line["prompt_tokens"] for line in calibrating) == [
        count_tokens(small) + TEMPLATE_TOKENS,
        count_tokens(large) + TEMPLATE_TOKENS,
    ]
    assert all(line["max_tokens"] == 1 for line in calibrating)
    assert not records["record_id"].str.startswith(CALIBRATION_ID_PREFIX).any()
    assert sorted(records["record_id"]) == sorted(line["request_id"] for line in load)
    by_line = records.set_index("trace_line").sort_index()
    assert list(by_line.index) == [row.line for row in rows]
    prompt_tokens = {line["request_id"]: line["prompt_tokens"] for line in load}
    sent = [prompt_tokens[record_id] for record_id in by_line["record_id"]]
    for row, tokens in zip(rows, sent, strict=True):
        assert abs(tokens - row.input_tokens) <= REPLAY_TOLERANCE * row.input_tokens, (row, tokens)
    assert sent == [row.input_tokens for row in rows]  # the simulator's template exactly
    assert list(by_line["prompt_tokens"]) == sent  # the records' usage says the same

"""Reasoning models: reasoning tokens from usage or counted from reasoning events (with `tokens_source`
saying which), the TTFT-to-TTFO gap against the simulator's truth, the answer's visible rate, and the
summary's TTFO percentiles and visible throughput."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from client_servers import backend

from grill_locust.client import EngineClient, chat_payload, completions_payload
from grill_locust.client._timer import StreamTimer
from grill_locust.record import RawTiming, build_record, measure
from grill_locust.report import format_table, load_run, summarize
from grill_locust.sim import SimProcess
from tests.synthetic import make_record, write_results_folder

MODEL = "grill-sim"
REASONING_TOKENS = 5
OUTPUT_TOKENS = 12


@pytest.fixture(scope="module")
def reasoning_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A simulated reasoning model: its first 5 output tokens stream as `reasoning_content`."""
    truth = tmp_path_factory.mktemp("sim") / "truth.jsonl"
    with SimProcess.start(
        served_model_name=MODEL,
        truth_log=str(truth),
        extra_args=[f"--reasoning-tokens={REASONING_TOKENS}", "--step-a-ms=10"],
    ) as process:
        yield process.url, truth


def ask(url: str, question: str, max_tokens: int, path: str = "/v1/chat/completions") -> Any:
    model = type(
        "Model", (), {"name": MODEL, "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True}
    )()
    if path == "/v1/completions":
        payload = completions_payload(model, question)
    else:
        payload = chat_payload(model, [{"role": "user", "content": question}])
    return EngineClient(backend(url)).stream(path, payload)


def truth_of(path: Path, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        lines = (
            [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            if path.exists()
            else []
        )
        if len(lines) >= count:
            return lines
        time.sleep(0.02)
    raise AssertionError(f"truth log has fewer than {count} records")


def test_reasoning_tokens_come_from_usage_and_ttfo_waits_for_the_reasoning(reasoning_sim) -> None:
    url, truth_path = reasoning_sim
    before = len(truth_of(truth_path, 0))
    result = ask(url, "sort a list", OUTPUT_TOKENS)
    m = measure(result.raw)
    truth = truth_of(truth_path, before + 1)[before]

    assert (m.status, m.output_tokens, m.reasoning_tokens, m.tokens_source) == (
        "ok",
        OUTPUT_TOKENS,
        REASONING_TOKENS,
        "usage",  # both counts from usage.completion_tokens_details, as vLLM with a reasoning parser
    )
    assert result.raw.reasoning_events == REASONING_TOKENS
    # the gap between first output and first visible output is the reasoning events' time on the engine
    sent = truth["event_times"]
    assert m.ttft_s is not None and m.ttfo_s is not None
    assert m.ttfo_s - m.ttft_s == pytest.approx(
        sent[REASONING_TOKENS] - sent[0], abs=0.01
    )  # arrival lags differ by little
    assert m.ttfo_s - m.ttft_s > 0.010 * (REASONING_TOKENS - 1)  # at least one step per reasoning token
    assert m.ttfo_s == pytest.approx(result.raw.output_times[REASONING_TOKENS] - result.raw.t0)
    visible = OUTPUT_TOKENS - REASONING_TOKENS
    assert m.e2e_s is not None
    assert m.visible_tokens_per_s == pytest.approx((visible - 1) / (m.e2e_s - m.ttfo_s))
    assert m.tokens_per_s == pytest.approx(OUTPUT_TOKENS / m.e2e_s)


def test_an_answer_cut_inside_its_reasoning_has_no_visible_output(reasoning_sim) -> None:
    url, _ = reasoning_sim
    m = measure(ask(url, "think only", 3).raw)
    assert (m.status, m.output_tokens, m.reasoning_tokens) == ("ok", 3, 3)
    assert m.ttfo_s is None and m.visible_tokens_per_s is None


def test_completions_carry_the_reasoning_as_text_and_report_none(reasoning_sim) -> None:
    """vLLM's reasoning parser works on chat only: a completion's usage has no reasoning count."""
    url, _ = reasoning_sim
    result = ask(url, "def f(", OUTPUT_TOKENS, path="/v1/completions")
    m = measure(result.raw)
    assert (m.status, m.output_tokens, m.reasoning_tokens, m.tokens_source) == (
        "ok",
        OUTPUT_TOKENS,
        0,
        "usage",
    )
    assert m.ttfo_s == m.ttft_s


def chunk(delta: dict[str, Any] | None = None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"object": "chat.completion.chunk", "choices": []}
    if delta is not None:
        body["choices"] = [{"index": 0, "delta": delta, "finish_reason": None}]
    if usage is not None:
        body["usage"] = usage
    return body


def timed(chunks: list[dict[str, Any]], tokenizer_tokens: int | None = None) -> RawTiming:
    """Chunks one second apart from t0 = 0, `[DONE]` after them."""
    timer = StreamTimer(RawTiming(t0=0.0, wall_start=0.0))
    for second, body in enumerate(chunks, start=1):
        timer.on_chunk(float(second), body)
    timer.on_done(len(chunks) + 1.0)
    raw = timer.close(len(chunks) + 1.0)
    raw.tokenizer_tokens = tokenizer_tokens
    return raw


THINK = [chunk({"reasoning_content": "Hmm"}), chunk({"reasoning": ","}), chunk({"content": "ok"})]


@pytest.mark.parametrize(
    ("usage", "tokenizer_tokens", "expected"),
    [
        # usage with the count: both from usage, whatever the events say
        (
            {"completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 7}},
            None,
            (9, 7, "usage"),
        ),
        # usage without it (vLLM before it filled it, SGLang, Ollama): the reasoning events are counted
        ({"completion_tokens": 9}, None, (9, 2, "usage+reasoning_events")),
        # no usage, the backend's tokenizer on reasoning + text: reasoning counted from events
        (None, 6, (6, 2, "tokenizer+reasoning_events")),
        # nothing but events: both counts are event counts, one source
        (None, None, (3, 2, "events")),
    ],
)
def test_tokens_source_says_where_each_count_came_from(usage, tokenizer_tokens, expected) -> None:
    chunks = [*THINK, chunk(usage=usage)] if usage is not None else THINK
    m = measure(timed(chunks, tokenizer_tokens))
    assert (m.output_tokens, m.reasoning_tokens, m.tokens_source) == expected
    assert (m.ttft_s, m.ttfo_s, m.e2e_s) == (1.0, 3.0, len(chunks) + 1.0)


def test_a_model_that_streams_no_reasoning_keeps_its_source_and_counts_zero() -> None:
    m = measure(
        timed([chunk({"content": "a"}), chunk({"content": "b"}), chunk(usage={"completion_tokens": 2})])
    )
    assert (m.output_tokens, m.reasoning_tokens, m.tokens_source) == (2, 0, "usage")
    # visible rate = visible tokens after the first / (E2E - TTFO): one token over 4 - 1 seconds
    assert m.visible_tokens_per_s == pytest.approx(1 / 3.0)


def test_summary_gives_ttfo_percentiles_and_visible_throughput(reasoning_sim, tmp_path: Path) -> None:
    url, _ = reasoning_sim
    labels = make_record()
    records = []
    for i in range(10):
        m = measure(ask(url, f"question {i}", OUTPUT_TOKENS).raw)
        row = {
            name: labels[name] for name in ("run_id", "target", "backend", "engine", "model", "conversation")
        }
        row.update(kind="short-baseline", tier_index=0, tier_users=1, iteration=i, user_id=0)
        row.update(worker_id="local", conversation_id=f"c{i}", turn=0, record_id=f"r{i}")
        records.append(build_record(row, m).to_dict())
    write_results_folder(tmp_path, records, phases=[])
    summary = summarize(load_run(tmp_path))
    tier = summary.iloc[0]
    ttfo = [r["ttfo_s"] for r in records]
    for q in (50, 90, 99):
        assert tier[f"ttfo_p{q}_s"] == pytest.approx(float(np.percentile(ttfo, q)))
        assert tier[f"request_visible_tokens_per_s_p{q}"] == pytest.approx(
            float(np.percentile([r["visible_tokens_per_s"] for r in records], q))
        )
    assert tier["ttfo_p50_s"] > tier["ttft_p50_s"]
    # visible throughput: the same span, output less reasoning tokens
    share = (OUTPUT_TOKENS - REASONING_TOKENS) / OUTPUT_TOKENS
    assert tier["visible_output_tokens_per_s"] == pytest.approx(tier["output_tokens_per_s"] * share)
    table = format_table(summary)
    assert "TTFO p50 s" in table and "visible system tok/s" in table


def test_tables_leave_ttfo_out_when_no_output_was_reasoning(tmp_path: Path) -> None:
    write_results_folder(tmp_path, [make_record(record_id=f"r{i}") for i in range(3)], phases=[])
    summary = summarize(load_run(tmp_path))
    assert summary.iloc[0]["visible_output_tokens_per_s"] == summary.iloc[0]["output_tokens_per_s"]
    assert "TTFO" not in format_table(summary)


def test_a_results_folder_without_reasoning_columns_has_no_visible_figures(tmp_path: Path) -> None:
    old = [
        {k: v for k, v in make_record(record_id=f"r{i}").items() if "reasoning" not in k} for i in range(3)
    ]
    for record in old:
        del record["visible_tokens_per_s"]
    write_results_folder(tmp_path, old, phases=[])
    tier = summarize(load_run(tmp_path)).iloc[0]
    assert np.isnan(tier["visible_output_tokens_per_s"]) and np.isnan(
        tier["request_visible_tokens_per_s_p50"]
    )
    assert tier["output_tokens_per_s"] > 0

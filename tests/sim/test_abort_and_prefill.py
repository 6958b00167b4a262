"""Abandoned requests and chunked prefill on the simulated engine.

A closed stream is dropped at the engine's next step, or later where the profile says the engine keeps
computing; what it generated meanwhile is wasted work, counted on /metrics, /sim/stats and the truth log.
Without chunked prefill a long prompt holds a whole step and short requests queue behind it. The step
loop is checked with a fake clock; the figures come from the real client against simulator processes,
and each test prints them."""

from __future__ import annotations

import dataclasses
import json
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from grill_locust.client import COMPLETIONS_PATH, EngineClient, completions_payload
from grill_locust.client.backend_http import request_once
from grill_locust.config import Backend
from grill_locust.record import measure
from grill_locust.sim import SimProcess
from grill_locust.sim.engine import Engine
from grill_locust.sim.params import PROFILES, EngineParams
from grill_locust.sim.sequence import FINISHED, Sequence
from grill_locust.tokens import truncate_to_tokens

MODEL = "grill-sim"


# -- the step loop, with a fake clock


def make_seq(name: str, prompt_tokens: int, max_tokens: int, arrival: float = 0.0) -> Sequence:
    ids = [hash((name, i)) % 50_000 for i in range(prompt_tokens)]
    return Sequence(name, ids, max_tokens, 1 << 60, 0, arrival)


def step_until(engine: Engine, now: float, done: Any, max_steps: int = 10_000) -> float:
    """Run steps from `now` until `done()` holds; the clock after the last step."""
    for _ in range(max_steps):
        if done():
            return now
        step = engine.schedule(now)
        now += step.duration_s if not step.empty else 0.001
        engine.commit(step, now)
    raise AssertionError("condition never met")


def engine_with(**changes: Any) -> Engine:
    return Engine(dataclasses.replace(PROFILES["vllm"], **changes))


def test_a_closed_stream_leaves_at_the_next_step_and_its_tokens_count_as_wasted() -> None:
    engine = engine_with()
    seq = make_seq("a", 100, max_tokens=500)
    engine.add(seq)
    now = step_until(engine, 0.0, lambda: seq.output_count >= 3)
    step = engine.schedule(now)  # a step in flight when the client goes away
    engine.abort(seq, now + 0.001)
    now += step.duration_s
    engine.commit(step, now)  # its token is generated all the same
    engine.schedule(now)
    assert seq.state == FINISHED and seq not in engine.running
    counters = engine.counters
    assert (counters.aborted_requests, counters.aborted_generation_tokens) == (1, 4)
    assert counters.aborted_tokens_after_close == 1
    assert counters.finished_by_reason["abort"] == 1


def test_an_abort_delay_keeps_the_request_generating_until_it_is_due() -> None:
    engine = engine_with(abort_delay_ms=200.0)
    seq = make_seq("a", 100, max_tokens=5000)
    engine.add(seq)
    now = step_until(engine, 0.0, lambda: seq.output_count >= 1)
    engine.abort(seq, now)
    closed = now
    now = step_until(engine, now, lambda: seq.state == FINISHED)
    assert closed + 0.2 <= now < closed + 0.2 + 0.05  # dropped at the first step after the delay
    step_s = PROFILES["vllm"].step_time_s(1, 0, 101)
    assert engine.counters.aborted_tokens_after_close >= int(0.2 / step_s) - 1


def test_a_waiting_request_abandoned_with_no_delay_never_runs() -> None:
    engine = engine_with(max_num_seqs=1)
    first, second = make_seq("a", 50, max_tokens=50), make_seq("b", 50, max_tokens=50)
    engine.add(first)
    engine.add(second)
    engine.schedule(0.0)
    engine.abort(second, 0.001)
    assert second.state == FINISHED and second not in engine.waiting
    assert engine.counters.aborted_generation_tokens == 0


def test_llamacpp_notices_a_closed_stream_only_when_a_token_write_fails() -> None:
    # as the real llama-server (tests/real/test_llama_autocomplete.py): a prompt closed mid-prefill is
    # prefilled whole, and the request leaves when its first token cannot be written
    params = PROFILES["llamacpp"]
    assert params.abort_on_write and params.abort_poll_ms == 0.0 and params.abort_delay_ms == 0.0
    engine = Engine(params)
    streaming = make_seq("streaming", 100, max_tokens=5000)
    engine.add(streaming)
    now = step_until(engine, 0.0, lambda: streaming.output_count >= 2)
    prefilling = make_seq("prefilling", 12_000, max_tokens=10, arrival=now)  # 6 chunks of ~0.5 s
    engine.add(prefilling)
    engine.abort(streaming, now)
    engine.abort(prefilling, now + 0.1)
    now = step_until(engine, now, lambda: streaming.state == FINISHED)
    assert streaming.output_count - streaming.output_at_close == 1  # the token whose write failed
    now = step_until(engine, now, lambda: prefilling.state == FINISHED)
    assert prefilling.num_computed >= 12_000 and prefilling.output_count == 1  # prefilled whole, one token
    assert not engine.aborting


def test_without_chunked_prefill_a_long_prompt_takes_a_step_of_its_own_past_the_budget() -> None:
    engine = Engine(PROFILES["vllm-no-chunked-prefill"])
    short = make_seq("short", 100, max_tokens=100)
    engine.add(short)
    now = step_until(engine, 0.0, lambda: short.output_count >= 2)
    long = make_seq("long", 20_000, max_tokens=1, arrival=now)
    engine.add(long)
    step = engine.schedule(now)
    assert step.prefill_tokens == 20_000 > engine.params.max_num_batched_tokens
    assert step.decode_batch == 0 and step.emitting == [long]  # the running short one waits


def test_chunked_prefill_leaves_room_beside_a_long_prompt_only_under_the_threshold() -> None:
    for threshold, newcomer_prefills in ((0, False), (1024, True)):
        engine = engine_with(long_prefill_token_threshold=threshold)
        long = make_seq("long", 20_000, max_tokens=1)
        engine.add(long)
        engine.commit(engine.schedule(0.0), 0.1)
        newcomer = make_seq("short", 500, max_tokens=1)
        engine.add(newcomer)
        step = engine.schedule(0.1)
        assert (newcomer in step.emitting) is newcomer_prefills, threshold


def test_engine_parameters_refuse_a_negative_abort_delay() -> None:
    from grill_locust.errors import GrillError

    with pytest.raises(GrillError, match="abort_delay_ms: must be at least 0"):
        EngineParams().with_overrides({"abort-delay-ms": -1}, "flags")


# -- the real client against simulator processes


def client_for(url: str, total_s: float = 60.0) -> EngineClient:
    backend = Backend.model_validate(
        {
            "name": "sim",
            "url": url,
            "engine": "vllm",
            "timeouts": {"connect_s": 5.0, "first_token_s": 60.0, "total_s": total_s, "idle_s": 60.0},
        }
    )
    return EngineClient(backend)


def model(max_tokens: int) -> Any:
    return dataclasses.make_dataclass("Model", ["name", "max_tokens", "temperature", "ignore_eos"])(
        MODEL, max_tokens, 0.0, True
    )


def code(tag: str, tokens: int) -> str:
    """`tokens` tokens of code no other request shares (no prefix-cache hit between them)."""
    return truncate_to_tokens("".join(f"{tag}_{i} = merge(a_{i}, b_{i})\n" for i in range(tokens)), tokens)


def sim_metrics(url: str) -> dict[tuple[str, str], float]:
    text = request_once(url + "/metrics", timeout_s=5.0).body.decode()
    return {
        (sample.name, sample.labels.get("finished_reason", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sim_stats(url: str) -> dict[str, Any]:
    return json.loads(request_once(url + "/sim/stats", timeout_s=5.0).body)


def at_times(jobs: list[tuple[float, Any]]) -> None:
    """Run each job in its own thread at its offset (seconds) from now; wait for all."""
    errors: list[BaseException] = []
    start = time.monotonic() + 0.2

    def run(offset_s: float, job: Any) -> None:
        try:
            time.sleep(max(0.0, start + offset_s - time.monotonic()))
            job()
        except BaseException as error:  # reported in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=job) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors


# A small fast engine: prefill at vLLM's cost per token, so a 60k-token prompt takes ~0.9 s of steps
HOL_ENGINE = [
    "--max-model-len=65536",
    "--kv-blocks=12288",
    "--max-num-batched-tokens=4096",
    "--step-a-ms=2",
    "--step-b-ms=0.01",
    "--step-c-ms=0.015",
    "--step-d-ms=0",
]
SHORT_PROMPT_TOKENS = 1500
SHORT_OUTPUT_TOKENS = 32
SHORT_EVERY_S = 0.25
SHORTS = 16
LONG_PROMPT_TOKENS = (60_000, 45_000, 60_000)
LONG_AT_S = (0.3, 1.5, 2.7)
BUDGET_S = 0.4


@pytest.mark.slow
@pytest.mark.parametrize(
    ("profile", "extra", "bounded"),
    [
        ("vllm-no-chunked-prefill", [], False),
        ("vllm", [], False),  # vLLM's default: the long prompt's chunk takes each step's whole budget
        ("vllm", ["--long-prefill-token-threshold=2048"], True),
    ],
    ids=["no-chunked-prefill", "chunked", "chunked-threshold-2048"],
)
def test_short_completions_behind_long_prefills(profile: str, extra: list[str], bounded: bool) -> None:
    """Short completions a few per second; 45-60k-token agent prompts now and then."""
    ttfts_s: list[float] = []
    with SimProcess.start(profile, served_model_name=MODEL, extra_args=HOL_ENGINE + extra) as sim:

        def short(index: int) -> Any:
            def send() -> None:
                client = client_for(sim.url)
                prompt = code(f"s{index}", SHORT_PROMPT_TOKENS)
                result = client.stream(
                    COMPLETIONS_PATH, completions_payload(model(SHORT_OUTPUT_TOKENS), prompt)
                )
                measured = measure(result.raw)
                assert measured.status == "ok" and measured.ttft_s is not None, result.raw.error
                ttfts_s.append(measured.ttft_s)
                client.close()

            return send

        def long(index: int, tokens: int) -> Any:
            def send() -> None:
                client = client_for(sim.url)
                result = client.stream(
                    COMPLETIONS_PATH, completions_payload(model(1), code(f"L{index}", tokens))
                )
                assert measure(result.raw).status == "ok", result.raw.error
                client.close()

            return send

        jobs = [(i * SHORT_EVERY_S, short(i)) for i in range(SHORTS)]
        jobs += [
            (at, long(i, tokens))
            for i, (at, tokens) in enumerate(zip(LONG_AT_S, LONG_PROMPT_TOKENS, strict=True))
        ]
        at_times(jobs)
    ttfts_s.sort()
    p90_s = ttfts_s[int(0.9 * len(ttfts_s)) - 1] if len(ttfts_s) >= 10 else ttfts_s[-1]
    print(
        f"{profile} {' '.join(extra)}: short TTFT p50 {statistics.median(ttfts_s) * 1000:.0f} ms, "
        f"p90 {p90_s * 1000:.0f} ms, max {ttfts_s[-1] * 1000:.0f} ms over {len(ttfts_s)} requests"
    )
    assert len(ttfts_s) == SHORTS
    if bounded:
        assert p90_s < BUDGET_S
    else:
        assert p90_s > BUDGET_S


# Tokens every 20 ms; the client closes each stream ~0.1 s in, a few tokens after the first
ABANDON_ENGINE = ["--step-a-ms=20", "--step-b-ms=0", "--step-c-ms=0.001", "--step-d-ms=0"]
ABANDONED = 6
CLOSE_AFTER_S = 0.1


def abandon_requests(url: str, tag: str) -> dict[str, int]:
    """ABANDONED streams closed by the client's total_s deadline: request id -> output events seen."""
    seen: dict[str, int] = {}

    def one(index: int) -> Any:
        def send() -> None:
            client = client_for(url, total_s=CLOSE_AFTER_S)
            request_id = f"{tag}-{index}"
            payload = completions_payload(model(2000), code(f"{tag}{index}", 200))
            result = client.stream(COMPLETIONS_PATH, payload, request_id=request_id)
            assert result.raw.output_times, result.raw.error  # the first token came before the close
            seen[request_id] = len(result.raw.output_times)
            client.close()

        return send

    at_times([(0.05 * i, one(i)) for i in range(ABANDONED)])
    return seen


def read_truth(path: Path, ids: set[str], timeout_s: float = 10.0) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    found: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        if path.exists():
            lines = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
            found = {r["request_id"]: r for r in lines if r["request_id"] in ids}
            if len(found) == len(ids):
                return found
        time.sleep(0.05)
    raise AssertionError(f"truth log has {len(found)} of {len(ids)} records")


@pytest.fixture(scope="module")
def abandon_sims(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[str, Path]]]:
    """Two engines alike but for the abort delay: none (vLLM), and 1 s (an engine that keeps computing)."""
    folder = tmp_path_factory.mktemp("abort")
    sims: dict[str, tuple[str, Path]] = {}
    with (
        SimProcess.start(
            "vllm", served_model_name=MODEL, truth_log=str(folder / "now.jsonl"), extra_args=ABANDON_ENGINE
        ) as now,
        SimProcess.start(
            "vllm",
            served_model_name=MODEL,
            truth_log=str(folder / "late.jsonl"),
            extra_args=[*ABANDON_ENGINE, "--abort-delay-ms=1000"],
        ) as late,
    ):
        sims["now"] = (now.url, folder / "now.jsonl")
        sims["late"] = (late.url, folder / "late.jsonl")
        yield sims


@pytest.mark.slow
def test_wasted_tokens_agree_with_what_the_client_saw_plus_what_came_after(
    abandon_sims: dict[str, tuple[str, Path]],
) -> None:
    wasted: dict[str, int] = {}
    for name, (url, truth_path) in abandon_sims.items():
        seen = abandon_requests(url, name)
        truths = read_truth(truth_path, set(seen))
        stats = sim_stats(url)
        figures = sim_metrics(url)
        for request_id, count in seen.items():
            truth = truths[request_id]
            assert truth["outcome"] == "client_closed"
            # written before the close: what the client read, and at most one token crossing its close
            assert 0 <= truth["output_tokens"] - count <= 1, (request_id, truth["output_tokens"], count)
            assert truth["wasted_tokens"] == truth["output_tokens"] + truth["wasted_after_close"]
        total = sum(t["wasted_tokens"] for t in truths.values())
        after = sum(t["wasted_after_close"] for t in truths.values())
        assert stats["aborted_requests"] == ABANDONED == figures[("vllm:request_success_total", "abort")]
        assert stats["wasted_tokens"] == total == figures[("grill_sim:aborted_generation_tokens_total", "")]
        assert stats["wasted_tokens_after_close"] == after
        wasted[name] = total
        print(
            f"abort delay {name}: {ABANDONED} abandoned, client saw {sum(seen.values())} tokens, "
            f"engine generated {total} for them ({after} after the close)"
        )
    assert wasted["late"] > 5 * wasted["now"]  # 1 s of 20 ms steps: ~50 more tokens a request

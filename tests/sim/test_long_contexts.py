"""Long, growing contexts on the simulated engine, driven by the real client: an agent-like session
resends its whole context plus a new chunk at every step. With prefix caching only the chunk is
prefilled (TTFT stays flat); without it TTFT grows with the context; once sessions x context passes
the KV capacity, cached blocks are evicted before their session comes back (the cached ratio
collapses), running requests preempt each other and TTFT jumps. Each test prints its figures."""

from __future__ import annotations

import dataclasses
import statistics
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from grill_locust.client import CHAT_PATH, EngineClient, chat_payload
from grill_locust.client.backend_http import request_once
from grill_locust.config import Backend
from grill_locust.record import measure
from grill_locust.sim import SimProcess
from grill_locust.sim.engine import Engine
from grill_locust.sim.params import PROFILES
from grill_locust.sim.sequence import Sequence
from grill_locust.tokens import truncate_to_tokens

MODEL = "grill-sim"
REPLY_TOKENS = 8
# A small, fast engine: 16,384 tokens of KV, prefill dear enough to stand out from the machine's noise
SMALL_ENGINE = [
    "--kv-blocks=1024",
    "--max-model-len=16384",
    "--max-num-batched-tokens=2048",
    "--step-a-ms=2",
    "--step-b-ms=0.01",
    "--step-c-ms=0.02",
    "--step-d-ms=0",
]


@dataclass(frozen=True)
class StepFigures:
    context_tokens: int  # the prompt's tokens
    cached_tokens: int
    ttft_s: float

    @property
    def cached_ratio(self) -> float:
        return self.cached_tokens / self.context_tokens


def chunk(session: str, step: int, tokens: int) -> str:
    """`tokens` tokens of code-like text no other session or step shares."""
    lines = "".join(f"{session}_{step}_{i} = merge(left_{i}, right_{i}) + {i}\n" for i in range(tokens))
    return truncate_to_tokens(lines, tokens)


def run_session(
    url: str, session: str, steps: int, system_tokens: int, chunk_tokens: int
) -> list[StepFigures]:
    """One session: each request is the previous one's whole context, its reply, and a new chunk."""
    backend = Backend.model_validate(
        {
            "name": "sim",
            "url": url,
            "engine": "vllm",
            "timeouts": {"connect_s": 5.0, "first_token_s": 60.0, "total_s": 60.0, "idle_s": 60.0},
        }
    )
    client = EngineClient(backend)
    model = dataclasses.make_dataclass("Model", ["name", "max_tokens", "temperature", "ignore_eos"])(
        MODEL, REPLY_TOKENS, 0.0, True
    )
    messages: list[dict[str, Any]] = [{"role": "system", "content": chunk(session, -1, system_tokens)}]
    figures = []
    for step in range(steps):
        messages.append({"role": "user", "content": chunk(session, step, chunk_tokens)})
        result = client.stream(CHAT_PATH, chat_payload(model, messages, engine="vllm"))
        measured = measure(result.raw)
        assert measured.status == "ok", (session, step, result.raw.error)
        assert measured.prompt_tokens and measured.cached_tokens is not None and measured.ttft_s
        figures.append(StepFigures(measured.prompt_tokens, measured.cached_tokens, measured.ttft_s))
        messages.append({"role": "assistant", "content": result.text})
    client.close()
    return figures


def run_sessions(url: str, sessions: int, prefix: str, **session_args: int) -> list[list[StepFigures]]:
    """`sessions` sessions at once, one thread each (all start together)."""
    results: list[list[StepFigures]] = [[] for _ in range(sessions)]
    errors: list[BaseException] = []
    start = threading.Barrier(sessions)

    def one(index: int) -> None:
        try:
            start.wait()
            results[index] = run_session(url, f"{prefix}{index}", **session_args)
        except BaseException as error:  # reported in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    return results


def metrics(url: str) -> dict[tuple[str, str], float]:
    """The simulator's /metrics: (sample name, finished_reason label or "") -> value."""
    text = request_once(url + "/metrics", timeout_s=5.0).body.decode()
    return {
        (sample.name, sample.labels.get("finished_reason", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def preemptions(url: str) -> float:
    return metrics(url)[("vllm:num_preemptions_total", "")]


def show(label: str, figures: list[StepFigures]) -> None:
    rows = ", ".join(f"{f.context_tokens}:{f.ttft_s * 1000:.0f}ms/{f.cached_ratio:.2f}" for f in figures)
    print(f"{label} (context tokens: TTFT/cached ratio): {rows}")


@pytest.fixture(scope="module")
def small_sim() -> Iterator[str]:
    with SimProcess.start("vllm", served_model_name=MODEL, extra_args=SMALL_ENGINE) as sim:
        yield sim.url


@pytest.fixture(scope="module")
def small_sim_without_prefix_cache() -> Iterator[str]:
    with SimProcess.start("vllm-no-prefix-cache", served_model_name=MODEL, extra_args=SMALL_ENGINE) as sim:
        yield sim.url


SESSION = {"steps": 8, "system_tokens": 1000, "chunk_tokens": 1200}


@pytest.mark.slow
def test_with_prefix_caching_ttft_stays_flat_as_the_context_grows(small_sim: str) -> None:
    before = metrics(small_sim)
    figures = run_session(small_sim, "flat", **SESSION)
    show("prefix caching", figures)
    after = metrics(small_sim)

    def grew(name: str, reason: str = "") -> float:
        return after[(name, reason)] - before[(name, reason)]

    # vLLM's prefix-cache counters count tokens: what the requests looked up, what they found
    assert grew("vllm:prefix_cache_queries_total") == sum(f.context_tokens for f in figures)
    assert grew("vllm:prefix_cache_hits_total") == sum(f.cached_tokens for f in figures)
    assert grew("vllm:request_success_total", "length") == len(figures)  # max_tokens reached
    assert grew("vllm:request_success_total", "stop") == 0
    first, last = figures[1], figures[-1]  # the first step with a cached prefix, the last
    assert last.context_tokens > 3 * first.context_tokens
    # every step after the first finds all but the new chunk (and the reply's unfilled block) cached
    for previous, current in zip(figures, figures[1:], strict=False):
        assert current.cached_tokens >= previous.context_tokens - 16
    assert min(f.cached_ratio for f in figures[2:]) > 0.7
    # context x3, TTFT about the same (medians of three steps: the machine's noise is in milliseconds)
    early_s = statistics.median(f.ttft_s for f in figures[1:4])
    late_s = statistics.median(f.ttft_s for f in figures[-3:])
    assert late_s < 1.5 * early_s


@pytest.mark.slow
def test_without_prefix_caching_ttft_grows_with_the_context(small_sim_without_prefix_cache: str) -> None:
    figures = run_session(small_sim_without_prefix_cache, "grows", **SESSION)
    show("no prefix caching", figures)
    assert all(f.cached_tokens == 0 for f in figures)
    first, last = figures[0], figures[-1]
    growth = last.context_tokens / first.context_tokens
    assert last.ttft_s > 0.5 * growth * first.ttft_s  # prefill of the whole context, step after step


@pytest.mark.slow
def test_past_kv_capacity_the_cached_ratio_collapses_preemptions_rise_and_ttft_jumps(
    small_sim: str,
) -> None:
    session = {"steps": 5, "system_tokens": 1000, "chunk_tokens": 1000}  # up to ~5k tokens each

    def load(sessions: int, prefix: str) -> tuple[float, float, float]:
        before = preemptions(small_sim)
        results = run_sessions(small_sim, sessions, prefix, **session)
        later = [f for figures in results for f in figures[1:]]
        ratio = statistics.mean(f.cached_ratio for f in later)
        ttft_s = statistics.median(f.ttft_s for f in later)
        for index, figures in enumerate(results[:2]):
            show(f"{sessions} sessions, #{index}", figures)
        return ratio, ttft_s, preemptions(small_sim) - before

    # 2 x 5k tokens fit in 16k; 8 x 5k do not
    fits_ratio, fits_ttft_s, fits_preemptions = load(2, "fits")
    over_ratio, over_ttft_s, over_preemptions = load(8, "over")
    print(
        f"cached ratio {fits_ratio:.2f} -> {over_ratio:.2f}, TTFT p50 {fits_ttft_s * 1000:.0f} -> "
        f"{over_ttft_s * 1000:.0f} ms, preemptions {fits_preemptions:.0f} -> {over_preemptions:.0f}"
    )
    assert fits_ratio > 0.7 and fits_preemptions == 0
    assert over_ratio < fits_ratio / 2
    assert over_preemptions > 0
    assert over_ttft_s > 3 * fits_ttft_s


def test_out_of_blocks_the_latest_admitted_is_preempted_and_waits_out_the_step() -> None:
    # vLLM: the running request that cannot grow takes the blocks of the latest admitted one, which
    # goes back to the head of the queue (to recompute) and is not admitted again in the same step
    params = dataclasses.replace(PROFILES["vllm"], block_size=4, kv_blocks=9, max_model_len=36)
    engine = Engine(params)
    seqs = [
        Sequence(name, [base + t for t in range(8)], 12, 1 << 60, 0, 0.0)
        for name, base in (("a", 0), ("b", 100), ("c", 200))
    ]
    for seq in seqs:
        engine.add(seq)
    now, victims_in_order = 0.0, []
    while not engine.idle:
        admitted_order = [seq.request_id for seq in engine.running]
        preemptions_before = [seq.preemptions for seq in seqs]
        step = engine.schedule(now)
        victims = [s for s, n in zip(seqs, preemptions_before, strict=True) if s.preemptions > n]
        for victim in victims:
            assert victim.request_id == admitted_order[-1] and victim is engine.waiting[0]
            victims_in_order.append(victim.request_id)
        now += step.duration_s
        engine.commit(step, now)
    assert victims_in_order[0] == "c"
    assert all(seq.output_count == seq.max_tokens for seq in seqs)


def test_evicted_cached_blocks_go_least_recently_used_first() -> None:
    engine = Engine(dataclasses.replace(PROFILES["vllm"], block_size=4, kv_blocks=12, max_model_len=48))
    sessions = {name: [base + t for t in range(16)] for name, base in (("early", 0), ("late", 100))}
    for name, prompt in sessions.items():  # each finishes, its 4 full blocks stay cached
        engine.add(Sequence(name, prompt, 1, 1 << 60, 0, 0.0))
        run_until_idle(engine)
    newcomer = Sequence("new", [500 + t for t in range(24)], 1, 1 << 60, 0, 0.0)
    engine.add(newcomer)  # needs 6 blocks: the 4 free, then 2 cached ones
    run_until_idle(engine)
    again = {name: Sequence(name, prompt, 1, 1 << 60, 0, 0.0) for name, prompt in sessions.items()}
    engine.add(again["late"])
    engine.add(again["early"])
    run_until_idle(engine)
    # only the early session's blocks went, its deepest first (a request frees its blocks tail first,
    # as vLLM's do): 2 to the newcomer, 1 to the late session's recomputed last block; of 16 prompt
    # tokens 15 may hit (3 full blocks), so the late session finds all it can
    assert (again["early"].num_cached, again["late"].num_cached) == (4, 12)


def run_until_idle(engine: Engine) -> None:
    now = 0.0
    for _ in range(10_000):
        if engine.idle:
            return
        step = engine.schedule(now)
        now += step.duration_s
        engine.commit(step, now)
    raise AssertionError("engine did not drain")

"""The scheduler and KV caches of the simulated engine, driven step by step with a fake clock."""

from __future__ import annotations

import dataclasses
import random

from grill_locust.sim.engine import Engine
from grill_locust.sim.kvcache import BlockCache, SlotCache, common_prefix_length
from grill_locust.sim.params import PROFILES, EngineParams
from grill_locust.sim.sequence import FINISHED, Sequence


def make_seq(
    name: str, prompt: list[int], max_tokens: int = 8, arrival: float = 0.0, log: list | None = None
) -> Sequence:
    def on_token(seq: Sequence, now: float) -> None:
        if log is not None:
            log.append((seq.request_id, seq.output_count, now))

    return Sequence(name, prompt, max_tokens, 1 << 60, 0, arrival, on_token=on_token)


def run_until_idle(engine: Engine, now: float = 0.0, max_steps: int = 100_000, check=None) -> float:
    for _ in range(max_steps):
        if engine.idle:
            return now
        step = engine.schedule(now)
        if check is not None:
            check(engine)
        now += step.duration_s
        engine.commit(step, now)
    raise AssertionError("engine did not drain")


def block_invariant(engine: Engine) -> None:
    cache = engine.cache
    assert isinstance(cache, BlockCache)
    referenced = {h for s in engine.running for h in s.shared_blocks}
    own = sum(s.own_blocks for s in engine.running)
    assert cache.free_blocks >= 0
    assert cache.free_blocks + len(cache.evictable) + len(referenced) + own == cache.total_blocks
    assert cache.used_blocks() <= cache.total_blocks
    for seq in engine.running:
        assert cache.held_blocks(seq) * cache.block_size >= seq.num_computed


def test_kv_never_over_capacity_and_no_request_lost_under_pressure():
    params = dataclasses.replace(
        PROFILES["vllm"], kv_blocks=64, max_model_len=512, max_num_batched_tokens=256
    )
    engine = Engine(params)
    rng = random.Random(7)
    seqs = []
    for index in range(40):
        prompt = [rng.randrange(1000) for _ in range(rng.randrange(20, 300))]
        seq = make_seq(f"r{index}", prompt, max_tokens=rng.randrange(1, 60))
        seqs.append(seq)
        engine.add(seq)
    run_until_idle(engine, check=block_invariant)
    assert all(s.state == FINISHED and s.output_count == s.max_tokens for s in seqs)
    assert engine.counters.preemptions > 0  # the pressure was real
    assert engine.cache.used_blocks() == 0


def test_admission_is_first_in_first_out():
    params = dataclasses.replace(PROFILES["vllm"], max_num_seqs=3)
    engine = Engine(params)
    seqs = [make_seq(f"r{i}", [i] * 40, max_tokens=5 + (i % 4)) for i in range(12)]
    for seq in seqs:
        engine.add(seq)
    admitted: list[str] = []

    def record(engine: Engine) -> None:
        for seq in engine.running:
            if seq.request_id not in admitted:
                admitted.append(seq.request_id)
        assert len(engine.running) <= 3

    run_until_idle(engine, check=record)
    assert admitted == [s.request_id for s in seqs]


def test_chunked_prefill_respects_the_token_budget():
    params = dataclasses.replace(PROFILES["vllm"], max_num_batched_tokens=100)
    engine = Engine(params)
    engine.add(make_seq("long", list(range(450)), max_tokens=2))
    engine.add(make_seq("short", list(range(1000, 1030)), max_tokens=2))
    steps = []
    now = 0.0
    while not engine.idle:
        step = engine.schedule(now)
        assert step.prefill_tokens + step.decode_batch <= 100
        steps.append(step)
        now += step.duration_s
        engine.commit(step, now)
    assert steps[0].prefill_tokens == 100
    assert steps[0].duration_s > steps[-1].duration_s  # prefill costs more than a lone decode


def test_repeated_prompt_hits_the_prefix_cache_by_blocks():
    engine = Engine(PROFILES["vllm"])
    prompt = list(range(100))
    first, second = make_seq("a", prompt), make_seq("b", prompt)
    engine.add(first)
    run_until_idle(engine)
    engine.add(second)
    run_until_idle(engine)
    assert first.num_cached == 0
    assert second.num_cached == 96  # whole 16-token blocks, the last token always recomputed
    assert engine.cache.hit_tokens == 96 and engine.cache.query_tokens == 200


def test_no_prefix_cache_profile_never_hits():
    engine = Engine(PROFILES["vllm-no-prefix-cache"])
    for name in ("a", "b"):
        seq = make_seq(name, list(range(100)))
        engine.add(seq)
        run_until_idle(engine)
        assert seq.num_cached == 0


def test_sglang_reuses_at_token_granularity():
    engine = Engine(PROFILES["sglang"])
    engine.add(make_seq("a", list(range(50))))
    run_until_idle(engine)
    second = make_seq("b", list(range(45)) + [999, 998])
    engine.add(second)
    run_until_idle(engine)
    assert second.num_cached == 45


def test_lru_evicts_unreferenced_blocks_first():
    cache = BlockCache(total_blocks=8, block_size=4, prefix_caching=True)
    params = dataclasses.replace(PROFILES["vllm"], block_size=4, kv_blocks=8, max_model_len=32)
    engine = Engine(params)
    engine.cache = cache
    old = make_seq("old", list(range(17)), max_tokens=1)
    engine.add(old)
    run_until_idle(engine)
    assert len(cache.evictable) == 4  # its four full prompt blocks stay cached, unreferenced
    newer = make_seq("new", list(range(100, 125)), max_tokens=1)
    engine.add(newer)
    run_until_idle(engine)
    again = make_seq("again", list(range(17)), max_tokens=1)
    engine.add(again)
    run_until_idle(engine)
    assert again.num_cached < 16  # part of the old prefix had to go


def test_llamacpp_slot_keeps_only_its_last_prompt():
    engine = Engine(PROFILES["llamacpp"])
    cache = engine.cache
    assert isinstance(cache, SlotCache)
    shared = list(range(200))
    first = make_seq("a", shared + [1, 2, 3])
    engine.add(first)
    run_until_idle(engine)
    follow = make_seq("b", shared + [7, 8])
    engine.add(follow)
    run_until_idle(engine)
    assert follow.num_cached == 200
    assert follow.slot == -1 and sum(cache.busy) == 0


def test_llamacpp_serves_at_most_its_slots_at_once():
    engine = Engine(PROFILES["llamacpp"])
    for index in range(10):
        engine.add(make_seq(f"r{index}", [index] * 30, max_tokens=4))

    def check(engine: Engine) -> None:
        assert len(engine.running) <= 4

    run_until_idle(engine, check=check)


def test_common_prefix_length():
    assert common_prefix_length([1, 2, 3, 4], [1, 2, 9]) == 2
    assert common_prefix_length([], [1]) == 0
    assert common_prefix_length([5] * 1000, [5] * 700 + [1]) == 700


def test_cancelled_request_frees_its_blocks():
    engine = Engine(PROFILES["vllm"])
    seq = make_seq("gone", list(range(300)), max_tokens=100)
    engine.add(seq)
    now = 0.0
    for _ in range(3):
        step = engine.schedule(now)
        now += step.duration_s
        engine.commit(step, now)
    engine.cancel(seq, now)
    run_until_idle(engine, now)
    assert seq.state == FINISHED and seq.finish_reason is None
    assert engine.cache.used_blocks() == 0


def test_a_request_cancelled_while_waiting_leaves_the_queue_at_once():
    engine = Engine(dataclasses.replace(PROFILES["llamacpp"], max_num_seqs=1))
    running, queued = make_seq("running", list(range(50)), max_tokens=50), make_seq("queued", list(range(60)))
    engine.add(running)
    engine.add(queued)
    step = engine.schedule(0.0)
    engine.commit(step, step.duration_s)
    assert list(engine.waiting) == [queued]
    finished_at = []
    queued.on_finish = lambda seq, now: finished_at.append(now)
    engine.cancel(queued, 0.5)
    assert not engine.waiting and queued.state == FINISHED and finished_at == [0.5]


def test_a_preempted_request_reports_the_cache_hits_of_its_first_admission_only():
    # no prompt shared: after a preemption the request finds its own blocks, which is no hit
    engine = Engine(dataclasses.replace(PROFILES["vllm"], kv_blocks=24))
    seqs = [make_seq(f"s{i}", [1000 * i + t for t in range(115)], max_tokens=200) for i in range(4)]
    for seq in seqs:
        engine.add(seq)
    run_until_idle(engine)
    assert engine.counters.preemptions > 0
    assert [seq.num_cached for seq in seqs] == [0, 0, 0, 0]
    assert engine.cache.hit_tokens == 0 and engine.cache.query_tokens == 4 * 115


def test_a_llamacpp_slot_keeps_what_it_computed_not_what_it_was_sent():
    engine = Engine(PROFILES["llamacpp"])
    prompt = list(range(5000))
    first = make_seq("a", prompt)
    engine.add(first)
    step = engine.schedule(0.0)  # one chunk of the prefill, then the client goes
    engine.commit(step, step.duration_s)
    computed = first.num_computed
    assert 0 < computed < len(prompt)
    engine.cancel(first, step.duration_s)
    run_until_idle(engine, step.duration_s)
    again = make_seq("b", prompt)
    engine.add(again)
    run_until_idle(engine)
    assert again.num_cached == computed


def test_step_time_formula():
    params = EngineParams(step_a_ms=10, step_b_ms=1, step_c_ms=0.5, step_d_ms=0.001)
    assert abs(params.step_time_s(4, 100, 1000) - (10 + 4 + 50 + 1) / 1000) < 1e-12


def test_the_truth_log_writes_even_when_every_step_is_shorter_than_its_margin(tmp_path):
    from grill_locust.sim.truth import MAX_PENDING, TruthLog

    log = TruthLog(str(tmp_path / "truth.jsonl"))
    for i in range(MAX_PENDING + 50):
        log.add({"request_id": str(i)})
    log.drain(until=-1.0)  # the deadline passed before the drain began
    assert len(log.pending) == MAX_PENDING  # down to the bound: memory stays bounded
    log.drain(until=-1.0)
    assert len(log.pending) == MAX_PENDING - 1  # and one a step at least
    log.close()
    assert len((tmp_path / "truth.jsonl").read_text().splitlines()) == MAX_PENDING + 50


def test_the_next_turn_finds_the_previous_reply_in_the_prefix_cache():
    # vLLM caches a request's generated tokens too (SGLang's radix tree as well): the next turn's
    # prompt, history + reply + a new question, hits all of it but the partial last block
    from grill_locust.sim.text import output_ids

    # the last generated token was never fed back: its KV does not exist
    for profile, expected in (("vllm", (130 + 49) // 16 * 16), ("sglang", 130 + 49)):
        engine = Engine(PROFILES[profile])
        turn = make_seq("t0", list(range(130)), max_tokens=50)
        engine.add(turn)
        run_until_idle(engine)
        history = turn.prompt_ids + output_ids(turn.output_start, turn.output_count)
        follow = make_seq("t1", history + list(range(5000, 5020)))
        engine.add(follow)
        run_until_idle(engine)
        assert follow.num_cached == expected, profile

"""The step loop of the simulated engine, without I/O: queue, admission, chunked prefill, decode, preemption.

`Engine.schedule(now)` plans one step (who prefills how much, who decodes) and says how long it takes;
the caller waits that long, then calls `Engine.commit(step, now)`, which produces the step's tokens
through each sequence's `on_token` callback. Tests drive it with a fake clock.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field

from grill_locust.sim.kvcache import BlockCache, KvCache, SlotCache, prefill_target
from grill_locust.sim.params import CACHE_SLOTS, EngineParams
from grill_locust.sim.sequence import FINISHED, RUNNING, WAITING, Sequence

FINISH_LENGTH = "length"
FINISH_STOP = "stop"

# vLLM's buckets for vllm:time_to_first_token_seconds
TTFT_BUCKETS_S = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)


@dataclass(slots=True)
class Step:
    """One planned step: its duration and the sequences that produce a token at its end."""

    duration_s: float
    decode_batch: int = 0
    prefill_tokens: int = 0
    kv_tokens: int = 0
    emitting: list[Sequence] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.emitting and self.prefill_tokens == 0


@dataclass(slots=True)
class EngineCounters:
    """Cumulative counters, exported on /metrics."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    # requests that ended by themselves, by finish reason (vLLM's `request_success_total`)
    finished_by_reason: dict[str, int] = field(default_factory=lambda: {FINISH_STOP: 0, FINISH_LENGTH: 0})
    steps: int = 0
    ttft_bucket_counts: list[int] = field(default_factory=lambda: [0] * (len(TTFT_BUCKETS_S) + 1))
    ttft_sum_s: float = 0.0
    ttft_count: int = 0

    def observe_ttft(self, ttft_s: float) -> None:
        self.ttft_bucket_counts[bisect_left(TTFT_BUCKETS_S, ttft_s)] += 1
        self.ttft_sum_s += ttft_s
        self.ttft_count += 1


class Engine:
    """Continuous batching over a paged (or slotted) KV cache, one step at a time."""

    def __init__(self, params: EngineParams) -> None:
        self.params = params
        self.cache: KvCache
        if params.cache_kind == CACHE_SLOTS:
            self.cache = SlotCache(params.max_num_seqs, params.slot_tokens, params.prefix_caching)
        else:
            self.cache = BlockCache(params.kv_blocks, params.block_size, params.prefix_caching)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.counters = EngineCounters()
        self.kv_tokens = 0  # tokens in KV over the running sequences
        self.preempted_in_step = False

    # -- requests in
    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def cancel(self, seq: Sequence, now: float) -> None:
        """The client went away: a waiting sequence leaves now, a running one at the next step."""
        seq.cancelled = True
        if seq.state == WAITING and seq in self.waiting:
            self.waiting.remove(seq)
            self._finish(seq, now, None)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def earliest_trickle_s(self) -> float | None:
        """When a running sequence held back by the trickle fault may produce its next token."""
        times = [s.next_token_at for s in self.running if s.min_gap_s > 0]
        return min(times) if times else None

    # -- one step
    def schedule(self, now: float) -> Step:
        params = self.params
        cache = self.cache
        budget = params.max_num_batched_tokens
        emitting: list[Sequence] = []
        decode_batch = 0
        prefill_tokens = 0
        self.preempted_in_step = False
        self._drop_cancelled(now)

        index = 0
        running = self.running
        while index < len(running) and budget > 0:
            seq = running[index]
            index += 1
            context = seq.prompt_len + seq.output_count
            remaining = context - seq.num_computed
            if seq.output_count and remaining <= 1:  # decode: one token
                if seq.min_gap_s and now < seq.next_token_at:
                    continue
                if not self._grow(seq, seq.num_computed + 1):
                    continue
                seq.num_computed += 1
                budget -= 1
                decode_batch += 1
                emitting.append(seq)
            else:  # prefill, or recompute after preemption (up to the last sampled token)
                chunk = min(prefill_target(seq) - seq.num_computed, budget)
                if not self._grow(seq, seq.num_computed + chunk):
                    continue
                seq.num_computed += chunk
                budget -= chunk
                prefill_tokens += chunk
                if seq.num_computed == context:
                    emitting.append(seq)

        # as vLLM's scheduler: a step that had to preempt admits nobody (the victim would come straight
        # back into the memory it just gave up); a step left with no work at all is vLLM's next one
        admit = not self.preempted_in_step or not (emitting or prefill_tokens)
        waiting = self.waiting
        while admit and waiting and budget > 0 and len(running) < params.max_num_seqs:
            seq = waiting[0]
            if seq.cancelled:
                waiting.popleft()
                self._finish(seq, now, None)
                continue
            if not cache.admit(seq, budget):
                break  # FIFO: the head waits for room, nobody overtakes it
            waiting.popleft()
            seq.state = RUNNING
            if seq.admitted_at is None:
                seq.admitted_at = now
            running.append(seq)
            context = seq.prompt_len + seq.output_count
            chunk = min(prefill_target(seq) - seq.num_computed, budget)
            if chunk > 0:
                if not self._grow(seq, seq.num_computed + chunk):
                    break
                seq.num_computed += chunk
                budget -= chunk
                prefill_tokens += chunk
            if seq.num_computed == context:
                emitting.append(seq)
        kv_tokens = self.kv_tokens = sum(s.num_computed for s in running)
        self.counters.steps += 1
        duration = params.step_time_s(decode_batch, prefill_tokens, kv_tokens)
        return Step(duration, decode_batch, prefill_tokens, kv_tokens, emitting)

    def commit(self, step: Step, now: float) -> None:
        """The step's forward pass is over: every emitting sequence gets its next token."""
        finished = []
        counters = self.counters
        for seq in step.emitting:
            if seq.state != RUNNING:
                continue  # preempted after it was planned
            seq.output_count += 1
            if seq.output_count == 1:
                seq.first_token_at = now
                counters.observe_ttft(now - seq.arrival)
            if seq.min_gap_s:
                seq.next_token_at = now + seq.min_gap_s
            done = seq.output_count >= seq.output_limit
            if done:
                seq.finish_reason = FINISH_LENGTH if seq.output_count >= seq.max_tokens else FINISH_STOP
            if seq.on_token is not None and not seq.cancelled:
                seq.on_token(seq, now)
            if done:
                finished.append(seq)
        counters.generation_tokens += len(step.emitting)
        for seq in finished:
            self.running.remove(seq)
            self._finish(seq, now, seq.finish_reason)

    # -- inside
    def _grow(self, seq: Sequence, new_computed: int) -> bool:
        """Room in KV for `seq`, preempting the latest admitted others if needed; False if `seq` itself went."""
        while not self.cache.grow(seq, new_computed):
            victim = self.running[-1]
            self._preempt(victim)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Sequence) -> None:
        """Out of KV: free the sequence's blocks and put it back at the head of the queue (recompute)."""
        self.running.remove(seq)
        self.cache.release(seq)
        seq.num_computed = 0
        seq.state = WAITING
        seq.preemptions += 1
        self.counters.preemptions += 1
        self.preempted_in_step = True
        self.waiting.appendleft(seq)

    def _drop_cancelled(self, now: float) -> None:
        if any(s.cancelled for s in self.running):
            for seq in [s for s in self.running if s.cancelled]:
                self.running.remove(seq)
                self._finish(seq, now, None)

    def _finish(self, seq: Sequence, now: float, reason: str | None) -> None:
        if seq.state == RUNNING:
            self.cache.release(seq)
        if seq.state != FINISHED:
            self.counters.prompt_tokens += seq.prompt_len
            if reason in self.counters.finished_by_reason:
                self.counters.finished_by_reason[reason] += 1
        seq.state = FINISHED
        seq.finish_reason = reason
        if seq.on_finish is not None:
            seq.on_finish(seq, now)

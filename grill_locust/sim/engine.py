"""The step loop of the simulated engine, without I/O: queue, admission, chunked prefill, decode, preemption.

`Engine.schedule(now)` plans one step (who prefills how much, who decodes) and says how long it takes;
the caller waits that long, then calls `Engine.commit(step, now)`, which produces the step's tokens
through each sequence's `on_token` callback. Tests drive it with a fake clock.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field

from grill_locust.sim.kvcache import BlockCache, KvCache, SlotCache, prefill_target
from grill_locust.sim.params import CACHE_SLOTS, EngineParams
from grill_locust.sim.sequence import FINISHED, NEVER, RUNNING, WAITING, Sequence

FINISH_LENGTH = "length"
FINISH_STOP = "stop"
FINISH_ABORT = "abort"  # vLLM's finished_reason label of a request its client abandoned

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
    # requests by finish reason (vLLM's `request_success_total`): ended by themselves or by their abort
    finished_by_reason: dict[str, int] = field(
        default_factory=lambda: {FINISH_STOP: 0, FINISH_LENGTH: 0, FINISH_ABORT: 0}
    )
    # requests whose client closed the stream, and every token generated for them (wasted work):
    # in all, and after the close
    aborted_requests: int = 0
    aborted_generation_tokens: int = 0
    aborted_tokens_after_close: int = 0
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
        self.aborting: list[Sequence] = []  # cancelled or abandoned, dropped at their abort_at

    # -- requests in
    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def cancel(self, seq: Sequence, now: float) -> None:
        """The engine itself drops the request (a fault): a waiting one now, a running one at the next step."""
        seq.cancelled = True
        seq.abort_at = now
        self._drop_or_hold(seq, now)

    def abort(self, seq: Sequence, now: float) -> None:
        """The client closed the stream: the engine drops the request when the profile says it notices
        (`abort_poll_ms`, `abort_delay_ms`); until then it keeps its place, its KV and its tokens' work."""
        if seq.cancelled or seq.state == FINISHED:
            return  # a fault ended it already
        params = self.params
        seq.cancelled = True
        seq.closed_at = now
        seq.output_at_close = seq.output_count
        noticed = NEVER if params.abort_on_write else now  # the write of its next token fails
        if params.abort_poll_ms > 0:
            poll_s = params.abort_poll_ms / 1000.0
            noticed = min(noticed, seq.arrival + math.ceil((now - seq.arrival) / poll_s) * poll_s)
        seq.abort_at = noticed + params.abort_delay_ms / 1000.0
        self._drop_or_hold(seq, now)

    def _drop_or_hold(self, seq: Sequence, now: float) -> None:
        if seq.abort_at <= now and seq.state == WAITING and seq in self.waiting:
            self.waiting.remove(seq)
            self._finish(seq, now, None)
        elif seq not in self.aborting:
            self.aborting.append(seq)

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
        self.preempted_in_step = False
        self._drop_aborted(now)
        step = Step(0.0)
        budget = params.max_num_batched_tokens
        if params.chunked_prefill:
            budget = self._plan_running(step, budget, now)
            # as vLLM's scheduler: a step that had to preempt admits nobody (the victim would come straight
            # back into the memory it just gave up); a step left with no work at all is vLLM's next one
            if not self.preempted_in_step or step.empty:
                self._admit_waiting(step, budget, now, whole=False)
        else:  # vLLM V0: whole prompts first, in a step of their own; decodes when none can start
            self._admit_waiting(step, budget, now, whole=True)
            if step.empty:
                self._plan_running(step, budget, now)
        step.kv_tokens = self.kv_tokens = sum(s.num_computed for s in self.running)
        self.counters.steps += 1
        step.duration_s = params.step_time_s(step.decode_batch, step.prefill_tokens, step.kv_tokens)
        return step

    def _chunk_cap(self, budget: int) -> int:
        threshold = self.params.long_prefill_token_threshold
        return min(budget, threshold) if threshold else budget

    def _plan_running(self, step: Step, budget: int, now: float) -> int:
        """Decodes and prefill chunks of the running sequences, in admission order; the budget left."""
        running = self.running
        emitting = step.emitting
        index = 0
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
                step.decode_batch += 1
                emitting.append(seq)
            else:  # prefill, or recompute after preemption (up to the last sampled token)
                chunk = min(prefill_target(seq) - seq.num_computed, self._chunk_cap(budget))
                if not self._grow(seq, seq.num_computed + chunk):
                    continue
                seq.num_computed += chunk
                budget -= chunk
                step.prefill_tokens += chunk
                if seq.num_computed == context:
                    emitting.append(seq)
        return budget

    def _admit_waiting(self, step: Step, budget: int, now: float, whole: bool) -> None:
        """Admit waiting sequences in order with the budget left, each with its first chunk (or, `whole`,
        its whole prompt: the first one past the budget if need be, the others only if they fit, judged by
        their uncached length)."""
        params = self.params
        running = self.running
        waiting = self.waiting
        while waiting and budget > 0 and len(running) < params.max_num_seqs:
            seq = waiting[0]
            if whole and step.prefill_tokens and prefill_target(seq) > budget:
                break
            room = prefill_target(seq) if whole else self._chunk_cap(budget)
            if not self.cache.admit(seq, room):
                break  # FIFO: the head waits for room, nobody overtakes it
            waiting.popleft()
            seq.state = RUNNING
            if seq.admitted_at is None:
                seq.admitted_at = now
            running.append(seq)
            context = seq.prompt_len + seq.output_count
            chunk = min(prefill_target(seq) - seq.num_computed, room)
            if chunk > 0:
                if not self._grow(seq, seq.num_computed + chunk):
                    break
                seq.num_computed += chunk
                budget -= chunk
                step.prefill_tokens += chunk
            if seq.num_computed == context:
                step.emitting.append(seq)

    def commit(self, step: Step, now: float) -> None:
        """The step's forward pass is over: every emitting sequence gets its next token."""
        finished = []
        counters = self.counters
        poll_writes = self.params.abort_on_write
        delay_s = self.params.abort_delay_ms / 1000.0
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
            elif seq.closed_at is not None and poll_writes:  # writing it to the closed stream fails
                seq.abort_at = min(seq.abort_at, now + delay_s)
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

    def _drop_aborted(self, now: float) -> None:
        """Sequences whose abort is due leave, waiting or running."""
        if not self.aborting:
            return
        for seq in [s for s in self.aborting if s.abort_at <= now]:
            if seq.state == RUNNING:
                self.running.remove(seq)
            elif seq.state == WAITING:
                self.waiting.remove(seq)
            self._finish(seq, now, None)

    def _finish(self, seq: Sequence, now: float, reason: str | None) -> None:
        if seq.state == RUNNING:
            self.cache.release(seq)
        if seq.cancelled and seq in self.aborting:
            self.aborting.remove(seq)
        if seq.state != FINISHED:
            counters = self.counters
            counters.prompt_tokens += seq.prompt_len
            if reason is None and seq.closed_at is not None:
                reason_counted: str | None = FINISH_ABORT
            else:
                reason_counted = reason
            if reason_counted in counters.finished_by_reason:
                counters.finished_by_reason[reason_counted] += 1
            if seq.closed_at is not None:  # the client went away: all it was given is wasted work
                counters.aborted_requests += 1
                counters.aborted_generation_tokens += seq.output_count
                counters.aborted_tokens_after_close += seq.output_count - seq.output_at_close
        seq.state = FINISHED
        seq.finish_reason = reason
        if seq.on_finish is not None:
            seq.on_finish(seq, now)

"""A request inside the simulated engine, as its scheduler and its KV cache see it (vLLM's `Sequence`)."""

from __future__ import annotations

from collections.abc import Callable

WAITING = 0
RUNNING = 1
FINISHED = 2
NEVER = float("inf")


class Sequence:
    """One request inside the engine."""

    __slots__ = (
        "request_id",
        "prompt_ids",
        "prompt_len",
        "max_tokens",
        "stop_after",
        "output_start",
        "output_count",
        "num_computed",
        "num_cached",
        "block_hashes",
        "shared_blocks",
        "own_blocks",
        "registered_blocks",
        "slot",
        "state",
        "cancelled",
        "abort_at",
        "closed_at",
        "output_at_close",
        "preemptions",
        "arrival",
        "admitted_at",
        "first_token_at",
        "finish_reason",
        "min_gap_s",
        "next_token_at",
        "on_token",
        "on_finish",
    )

    def __init__(
        self,
        request_id: str,
        prompt_ids: list[int],
        max_tokens: int,
        stop_after: int,
        output_start: int,
        arrival: float,
        on_token: Callable[[Sequence, float], None] | None = None,
        on_finish: Callable[[Sequence, float], None] | None = None,
        min_gap_s: float = 0.0,
    ) -> None:
        self.request_id = request_id
        self.prompt_ids = prompt_ids
        self.prompt_len = len(prompt_ids)
        self.max_tokens = max_tokens
        self.stop_after = stop_after  # outputs after which the answer ends by itself ("stop")
        self.output_start = output_start
        self.output_count = 0
        self.num_computed = 0
        self.num_cached = 0
        self.block_hashes: list[int] | None = None
        self.shared_blocks: list[int] = []
        self.own_blocks = 0
        self.registered_blocks = 0
        self.slot = -1
        self.state = WAITING
        self.cancelled = False  # nobody reads its tokens any more
        self.abort_at = NEVER  # when the engine drops it (a fault: now; a closed stream: per profile)
        self.closed_at: float | None = None  # when its client closed the stream
        self.output_at_close = 0
        self.preemptions = 0
        self.arrival = arrival
        self.admitted_at: float | None = None
        self.first_token_at: float | None = None
        self.finish_reason: str | None = None
        self.min_gap_s = min_gap_s  # trickle fault: at least this long between two tokens
        self.next_token_at = 0.0
        self.on_token = on_token
        self.on_finish = on_finish

    @property
    def output_limit(self) -> int:
        return min(self.max_tokens, self.stop_after)

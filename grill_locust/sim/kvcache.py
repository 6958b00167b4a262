"""KV cache models of the simulated engine: paged blocks with prefix caching, or llama.cpp-style slots.

Both answer the scheduler the same questions (`KvCache`): can this request be admitted (and how many of
its prompt tokens are already cached), can it grow by N tokens, what happens when it finishes.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

from grill_locust.sim.sequence import Sequence
from grill_locust.sim.text import output_ids


class KvCache(Protocol):
    """What the scheduler asks of a KV cache, and what /metrics reads from it; `BlockCache` and
    `SlotCache` are its two kinds. Sizes are in blocks (a slot cache's blocks are tokens)."""

    @property
    def query_tokens(self) -> int:
        """Prompt tokens looked up in the prefix cache, over every request's first admission."""

    @property
    def hit_tokens(self) -> int:
        """Of those, the tokens found cached."""

    def usage(self) -> float:
        """Fraction of the cache held by running requests (vLLM's `kv_cache_usage_perc`)."""

    def used_blocks(self) -> int: ...

    def held_blocks(self, seq: Sequence) -> int: ...

    def admit(self, seq: Sequence, budget: int) -> bool:
        """Take `seq` in with its cached prefix and room for its first chunk (what is not cached, up to
        `budget` tokens); False if it must wait."""

    def grow(self, seq: Sequence, new_computed: int) -> bool:
        """Room for `new_computed` tokens of `seq`; False when memory is out (nothing taken)."""

    def release(self, seq: Sequence) -> None:
        """`seq` finished or was preempted: its memory goes back (what is cached stays findable)."""


def prefill_target(seq: Sequence) -> int:
    """Tokens to compute before `seq` samples its next token: its whole context, or, recomputing after
    a preemption, all but its last sampled token (which is fed as the next input)."""
    context = seq.prompt_len + seq.output_count
    return context - 1 if seq.output_count else context


def chain_hashes(ids: list[int], block_size: int) -> list[int]:
    """Hash of every full block of `ids`, each chained to the one before (equal hash = equal prefix)."""
    hashes = []
    parent = 0
    if block_size == 1:
        for value in ids:
            parent = hash((parent, value))
            hashes.append(parent)
        return hashes
    for start in range(0, len(ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(ids[start : start + block_size])))
        hashes.append(parent)
    return hashes


class _PrefixHits:
    """The prefix-cache counters (tokens looked up, tokens found) and a request's `num_cached`: set at
    its first admission only, as vLLM's `num_cached_tokens` (a preempted request that comes back finds
    its own blocks, which is no hit)."""

    query_tokens = 0
    hit_tokens = 0

    def _count_hit(self, seq: Sequence, cached_tokens: int) -> None:
        if seq.preemptions == 0:
            seq.num_cached = cached_tokens
            self.query_tokens += seq.prompt_len
            self.hit_tokens += cached_tokens


class BlockCache(_PrefixHits):
    """Paged KV cache: fixed number of blocks; full blocks (prompt, then output) are cached by chained
    hash, LRU eviction.

    Invariant: free_blocks + len(evictable) + blocks referenced by running requests == total_blocks.
    """

    def __init__(self, total_blocks: int, block_size: int, prefix_caching: bool) -> None:
        self.total_blocks = total_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.free_blocks = total_blocks
        self.ref_counts: dict[int, int] = {}  # cached block hash -> running requests using it
        self.evictable: OrderedDict[int, None] = OrderedDict()  # cached, unreferenced, oldest first

    # -- what the scheduler asks
    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def available_blocks(self) -> int:
        return self.free_blocks + len(self.evictable)

    def used_blocks(self) -> int:
        return self.total_blocks - self.free_blocks - len(self.evictable)

    def usage(self) -> float:
        return self.used_blocks() / self.total_blocks

    def match(self, seq: Sequence) -> int:
        """Prompt tokens already cached; at least one token is always computed again."""
        if not self.prefix_caching:
            return 0
        if seq.block_hashes is None:
            seq.block_hashes = chain_hashes(seq.prompt_ids, self.block_size)
        limit = (seq.prompt_len - 1) // self.block_size
        ref_counts = self.ref_counts
        matched = 0
        for block_hash in seq.block_hashes[:limit]:
            if block_hash not in ref_counts:
                break
            matched += 1
        return matched * self.block_size

    def admit(self, seq: Sequence, budget: int) -> bool:
        """Take the cached prefix and room for the first chunk, or nothing (and return False)."""
        cached_tokens = self.match(seq)
        matched_blocks = cached_tokens // self.block_size
        hashes = seq.block_hashes[:matched_blocks] if matched_blocks and seq.block_hashes else []
        revived = sum(1 for h in hashes if self.ref_counts[h] == 0)
        first_chunk = min(prefill_target(seq) - cached_tokens, budget)
        need = self.blocks_for(cached_tokens + first_chunk) - matched_blocks
        if need > self.available_blocks() - revived:
            return False
        for block_hash in hashes:
            if self.ref_counts[block_hash] == 0:
                del self.evictable[block_hash]
            self.ref_counts[block_hash] += 1
        seq.shared_blocks = list(hashes)
        seq.own_blocks = 0
        seq.num_computed = cached_tokens
        seq.registered_blocks = matched_blocks
        self._count_hit(seq, cached_tokens)
        return True

    def grow(self, seq: Sequence, new_computed: int) -> bool:
        """Room for `new_computed` tokens of `seq` in KV; False when memory is out (nothing taken)."""
        block_size = self.block_size
        held = len(seq.shared_blocks) + seq.own_blocks
        if new_computed > held * block_size:
            need = -(-new_computed // block_size) - held
            if need > self.free_blocks + len(self.evictable):
                return False
            self._take(need)
            seq.own_blocks += need
        if self.prefix_caching:  # generated tokens too: the next turn's prompt carries the reply
            full_blocks = new_computed // block_size
            if full_blocks > seq.registered_blocks:
                self._register(seq, full_blocks)
        return True

    def release(self, seq: Sequence) -> None:
        """Finished or preempted: cached blocks become evictable (deepest first), the rest free."""
        ref_counts = self.ref_counts
        evictable = self.evictable
        for block_hash in reversed(seq.shared_blocks):
            count = ref_counts[block_hash] - 1
            ref_counts[block_hash] = count
            if count == 0:
                evictable[block_hash] = None
        self.free_blocks += seq.own_blocks
        seq.shared_blocks = []
        seq.own_blocks = 0
        seq.registered_blocks = 0

    def held_blocks(self, seq: Sequence) -> int:
        return len(seq.shared_blocks) + seq.own_blocks

    # -- inside
    def _take(self, count: int) -> None:
        from_free = min(count, self.free_blocks)
        self.free_blocks -= from_free
        for _ in range(count - from_free):
            block_hash, _ = self.evictable.popitem(last=False)
            del self.ref_counts[block_hash]

    def _register(self, seq: Sequence, full_blocks: int) -> None:
        """Newly full blocks become cached blocks (unless an equal block is cached already): the
        prompt's, then those of prompt and output together, as vLLM caches a request's generated tokens."""
        if seq.block_hashes is None:
            seq.block_hashes = chain_hashes(seq.prompt_ids, self.block_size)
        if full_blocks > len(seq.block_hashes):
            _extend_hashes(seq, full_blocks, self.block_size)
        ref_counts = self.ref_counts
        for index in range(seq.registered_blocks, full_blocks):
            block_hash = seq.block_hashes[index]
            if block_hash in ref_counts:
                continue  # computed twice at once: keep ours anonymous, as vLLM does
            ref_counts[block_hash] = 1
            seq.own_blocks -= 1
            seq.shared_blocks.append(block_hash)
        seq.registered_blocks = full_blocks


def _extend_hashes(seq: Sequence, full_blocks: int, block_size: int) -> None:
    """Chain the hashes of `seq` on through its output up to `full_blocks` blocks (as `chain_hashes`
    would hash the prompt and output together)."""
    hashes = seq.block_hashes
    assert hashes is not None
    start, end, prompt_len = len(hashes) * block_size, full_blocks * block_size, seq.prompt_len
    from_output = max(start, prompt_len)
    tokens = seq.prompt_ids[start:end] + output_ids(
        seq.output_start + from_output - prompt_len, end - from_output
    )
    parent = hashes[-1] if hashes else 0
    for offset in range(0, end - start, block_size):
        block = tokens[offset] if block_size == 1 else tuple(tokens[offset : offset + block_size])
        parent = hash((parent, block))
        hashes.append(parent)


def common_prefix_length(a: list[int], b: list[int]) -> int:
    """Length of the common prefix of two lists (binary search on C-speed slice comparisons)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


class SlotCache(_PrefixHits):
    """llama.cpp's server: N slots, each with its own context; a slot keeps only its last prompt + reply.

    A new request takes the idle slot whose kept tokens share the longest prefix with its prompt
    (the least recently used one on a tie), and reuses that prefix.
    """

    def __init__(self, slots: int, slot_tokens: int, prefix_caching: bool) -> None:
        self.slot_tokens = slot_tokens
        self.prefix_caching = prefix_caching
        self.kept: list[list[int]] = [[] for _ in range(slots)]
        self.busy: list[bool] = [False] * slots
        self.last_used: list[int] = [0] * slots
        self.use_counter = 0
        self.held_tokens = 0
        self.total_blocks = slots * slot_tokens  # reported in tokens

    def usage(self) -> float:
        return self.held_tokens / self.total_blocks

    def used_blocks(self) -> int:
        return self.held_tokens

    def admit(self, seq: Sequence, budget: int) -> bool:
        best_slot, best_common = -1, -1
        for slot, busy in enumerate(self.busy):
            if busy:
                continue
            common = common_prefix_length(self.kept[slot], seq.prompt_ids) if self.prefix_caching else 0
            if common > best_common or (
                common == best_common and self.last_used[slot] < self.last_used[best_slot]
            ):
                best_slot, best_common = slot, common
        if best_slot < 0:
            return False
        cached_tokens = min(best_common, seq.prompt_len - 1)
        self.busy[best_slot] = True
        self.use_counter += 1
        self.last_used[best_slot] = self.use_counter
        seq.slot = best_slot
        seq.num_computed = cached_tokens
        seq.own_blocks = cached_tokens
        self.held_tokens += cached_tokens
        self._count_hit(seq, cached_tokens)
        return True

    def grow(self, seq: Sequence, new_computed: int) -> bool:
        if new_computed > self.slot_tokens:
            return False
        self.held_tokens += new_computed - seq.own_blocks
        seq.own_blocks = new_computed
        return True

    def release(self, seq: Sequence) -> None:
        if seq.slot >= 0:
            self.busy[seq.slot] = False
            # what the slot computed: a request cancelled or preempted mid-prefill left the rest out
            kept = seq.prompt_ids + output_ids(seq.output_start, seq.output_count)
            self.kept[seq.slot] = kept[: seq.num_computed]
        self.held_tokens -= seq.own_blocks
        seq.own_blocks = 0
        seq.slot = -1

    def held_blocks(self, seq: Sequence) -> int:
        return seq.own_blocks

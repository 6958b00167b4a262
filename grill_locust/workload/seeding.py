"""Seeded random streams: the same parts give the same draws in every process, so master and workers
agree on a workload without sending it around."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass


def seeded_rng(seed: int, *parts: str) -> random.Random:
    """A random stream for `seed` and `parts`. 128 bits of seed, so 64-bit ids are not capped by it."""
    key = "|".join((str(seed), *parts)).encode("utf-8")
    return random.Random(int.from_bytes(hashlib.blake2b(key, digest_size=16).digest(), "big"))


@dataclass(frozen=True)
class ShapeKey:
    """Where a conversation's load shape is drawn from (an agent session's steps, tools, result sizes):
    the same for one developer and iteration on every target, while its text is drawn per user key."""

    seed: int
    key: str

    def rng(self, *parts: str) -> random.Random:
        return seeded_rng(self.seed, "shape", self.key, *parts)

"""Faults the simulated engine injects on demand: by rate (seeded) or per request by header."""

from __future__ import annotations

import random
from dataclasses import dataclass

from grill_locust.errors import GrillError

FAULT_HEADER = "x-grill-fault"
# stall: accepted, then nothing; stall_mid: the first output event, then nothing (the connection stays open);
# error_mid: some output, then the engine fails the request (an error event ends the stream; not streamed: a 500)
FAULT_KINDS = ("500", "503", "429", "stall", "cut", "bad_json", "trickle", "stall_mid", "error_mid")
# the engine refusing the request as sent (a setting or feature it lacks), not failing it: asked for by
# name only, never drawn into the default mix
REFUSAL_KINDS = ("400", "501")
KNOWN_KINDS = FAULT_KINDS + REFUSAL_KINDS
MIX = "mix"


@dataclass(frozen=True, slots=True)
class FaultSettings:
    rate: float = 0.0  # share of requests that get a fault
    kinds: tuple[str, ...] = FAULT_KINDS
    seed: int = 0
    trickle_gap_ms: float = 500.0  # gap between two tokens of a trickled stream
    retry_after_s: int = 1  # Retry-After of a 429


def parse_kinds(text: str, source: str = "--fault-kinds") -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    for kind in kinds:
        if kind not in KNOWN_KINDS:
            raise GrillError(f"{source}: unknown fault {kind!r} (one of {', '.join(KNOWN_KINDS)})")
    if not kinds:
        raise GrillError(f"{source}: name at least one fault kind")
    return kinds


class FaultPicker:
    """Decides each request's fault: the header wins; otherwise a seeded draw at the configured rate."""

    def __init__(self, settings: FaultSettings) -> None:
        self.settings = settings
        self.rng = random.Random(settings.seed)

    def pick(self, header_value: str | None) -> str | None:
        """The fault for one request, or None; raises ValueError for an unknown header value."""
        if header_value:
            value = header_value.strip().lower()
            if value == MIX:
                return self.rng.choice(self.settings.kinds)
            if value in ("none", "ok"):
                return None
            if value not in KNOWN_KINDS:
                raise ValueError(value)
            return value
        if self.settings.rate > 0 and self.rng.random() < self.settings.rate:
            return self.rng.choice(self.settings.kinds)
        return None

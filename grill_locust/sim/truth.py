"""Ground truth: one JSON line per request with the true time of every event, on the `time.time()` clock.

Records are queued by the step loop and serialised in the gaps between steps, a few at a time, so that
writing never delays a step.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable
from typing import IO

TRUTH_BUFFER_BYTES = 1 << 20


MAX_PENDING = 1000  # records queued past this are written even late (a step may slip)


class TruthLog:
    def __init__(self, path: str) -> None:
        self.path = path
        self.file: IO[str] = open(path, "a", encoding="utf-8", buffering=TRUTH_BUFFER_BYTES)  # noqa: SIM115
        self.pending: deque[dict[str, object]] = deque()
        self.written = 0

    def add(self, record: dict[str, object]) -> None:
        self.pending.append(record)

    def drain(self, until: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        """Write queued records; stop when `clock()` passes `until` (the next step's deadline margin),
        but after one record at least, and not while more than MAX_PENDING wait: steps shorter than the
        margin would otherwise never write, and the queue would grow for as long as the engine is busy."""
        pending = self.pending
        write = self.file.write
        wrote = False
        while pending:
            if until is not None and wrote and len(pending) <= MAX_PENDING and clock() > until:
                return
            wrote = True
            write(json.dumps(pending.popleft(), separators=(",", ":")) + "\n")
            self.written += 1

    def flush(self) -> None:
        self.drain()
        self.file.flush()

    def close(self) -> None:
        self.flush()
        self.file.close()

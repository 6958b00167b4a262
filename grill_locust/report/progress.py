"""A one-line progress bar on stderr for long report work (drawn only on a terminal unless forced)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

BAR_WIDTH = 28


class Progress:
    """`step(label)` after each unit of work; `close()` ends the line. Silent when not enabled."""

    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.started = time.monotonic()

    def step(self, label: str) -> None:
        self.done = min(self.done + 1, self.total)
        if not self.enabled:
            return
        filled = int(BAR_WIDTH * self.done / self.total)
        elapsed_s = time.monotonic() - self.started
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        self.stream.write(f"\r[{bar}] {self.done}/{self.total} {elapsed_s:5.1f} s {label[:40]:<40}")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()

"""A small progress bar for long CLI phases (a redrawn bar on a terminal, a line per 10 % otherwise)."""

from __future__ import annotations

import sys
import time


class Progress:
    """``with Progress("put", total) as p: p.update(n)``; prints to stderr."""

    def __init__(self, label: str, total: int, stream=None) -> None:
        self.label, self.total = label, max(total, 1)
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.done = 0
        self._last_pct = -10
        self._last_draw = 0.0
        self.start = time.perf_counter()

    def __enter__(self) -> "Progress":
        return self

    def update(self, n: int = 1) -> None:
        self.done += n
        pct = 100 * self.done // self.total
        if self.tty:
            now = time.perf_counter()
            if now - self._last_draw >= 0.1 or self.done >= self.total:
                self._last_draw = now
                fill = 30 * self.done // self.total
                rate = self.done / max(now - self.start, 1e-9)
                self.stream.write(f"\r{self.label:<10} [{'#' * fill}{'.' * (30 - fill)}] "
                                  f"{self.done:>9,}/{self.total:,} {rate:>10,.0f}/s")
                self.stream.flush()
        elif pct >= self._last_pct + 10:
            self._last_pct = pct - pct % 10
            self.stream.write(f"{self.label}: {self._last_pct}% ({self.done:,}/{self.total:,})\n")
            self.stream.flush()

    def __exit__(self, *exc: object) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

"""The per-file pass's progress: one line on stderr and the same count for a listener (a Prefect
progress artifact, flows.orchestration.chunk_tasks.ProgressArtifact)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

OnProgress = Callable[[int, int], None]  # (documents done, total): e.g. a Prefect progress artifact


class Progress:
    """One line on stderr, rewritten in place on a terminal, every few percent elsewhere; and the
    same count handed to `listener` (called at the start and after every step, from any thread)."""

    def __init__(
        self, total: int, label: str, enabled: bool = True, listener: OnProgress | None = None
    ) -> None:
        self.total, self.label, self.done, self.enabled = total, label, 0, enabled
        self.started = time.monotonic()
        self._last = -1
        self._shown = -1  # the count last printed
        self._lock = threading.Lock()  # chunks finish on several threads
        self.listener = listener
        if listener is not None:
            listener(0, total)

    def add(self, n: int) -> None:
        with self._lock:
            self.done += n
            if self.listener is not None:
                self.listener(self.done, self.total)
            self._print()

    def finish(self) -> None:
        """A pass that ends early (a budget stop): its last count on a line of its own, so the bar
        does not end on an older figure (or mid-line on a terminal)."""
        with self._lock:
            if self.enabled and self.total and self._shown != self.done:
                self._last = -100  # print whatever the percentage
                self._print(final=True)

    def _print(self, final: bool = False) -> None:
        if not self.enabled or not self.total:
            return
        pct = int(100 * self.done / self.total)
        tty = sys.stderr.isatty()
        if tty or pct // 10 != self._last // 10 or self.done == self.total:
            rate = self.done / max(time.monotonic() - self.started, 1e-6)
            bar = "#" * (pct // 5) + "." * (20 - pct // 5)
            end = "\r" if tty and self.done < self.total and not final else "\n"
            print(
                f"{self.label} [{bar}] {self.done}/{self.total} docs {rate:.1f}/s", end=end, file=sys.stderr
            )
            self._last, self._shown = pct, self.done

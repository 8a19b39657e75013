"""The emulator's virtual clock (frozen, or running at a chosen speed; tests move it) and its
RFC 3339 time format (a leaf).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime


class VirtualClock:
    """Wall time plus an offset tests can advance; optionally frozen (time moves only on
    advance) or sped up (`speed` virtual seconds per real second, for demos of long batches)."""

    def __init__(self, frozen: bool = False, start: float | None = None, speed: float = 1.0) -> None:
        self._base = time.time() if start is None else start
        self._real0 = time.monotonic()
        self._frozen = frozen
        self._speed = speed
        self.offset = 0.0

    def _elapsed(self) -> float:
        return 0.0 if self._frozen else (time.monotonic() - self._real0) * self._speed

    def now(self) -> float:
        return self._base + self._elapsed() + self.offset

    def set_rate(self, *, frozen: bool, speed: float) -> None:
        """Change how time flows from now on, without a jump."""
        self._base += self._elapsed()
        self._real0 = time.monotonic()
        self._frozen, self._speed = frozen, speed

    def advance(self, seconds: float) -> None:
        self.offset += seconds

    def real_seconds(self, virtual: float) -> float:
        """Real seconds that `virtual` seconds of this clock take (scaled by its speed): how long a
        stall or an answer's generation keeps a client waiting."""
        return max(0.0, virtual) / self._speed if self._speed > 0 else 0.0


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

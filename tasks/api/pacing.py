"""Client-side pacing shared by every thread of one `ModelClient`.

Two token buckets (requests/min and input tokens/min) refill continuously; `acquire(tokens)`
blocks (with the injected `sleep`) until both can pay. The limiter also reacts to the server:
a 429's `retry-after` pauses everyone until then, and `anthropic-ratelimit-*-remaining: 0` pauses
everyone until the matching `-reset` time. Time is injectable (`clock`, `sleep`, `wall`) so tests
record waits instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from docmill.errors import BudgetExhausted

# Never pause longer than this on the word of a rate-limit header (a bad clock must not stall a run).
MAX_HEADER_PAUSE = 120.0
HEADER_KINDS = ("requests", "tokens", "input-tokens", "output-tokens")


@dataclass
class TokenBucket:
    """`per_minute` units, refilled continuously; capacity = one minute's worth."""

    per_minute: float
    level: float
    updated: float

    def refill(self, now: float) -> None:
        self.level = min(self.per_minute, self.level + max(0.0, now - self.updated) * self.per_minute / 60.0)
        self.updated = now

    def wait_for(self, amount: float) -> float:
        need = min(amount, self.per_minute) - self.level
        return 0.0 if need <= 0 else need * 60.0 / self.per_minute

    def take(self, amount: float) -> None:
        self.level -= min(amount, self.per_minute)


class RateLimiter:
    def __init__(
        self,
        requests_per_minute: int,
        input_tokens_per_minute: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._clock, self._sleep, self._wall = clock, sleep, wall
        now = clock()
        self._requests = TokenBucket(float(requests_per_minute), float(requests_per_minute), now)
        self._tokens = TokenBucket(float(input_tokens_per_minute), float(input_tokens_per_minute), now)
        self._paused_until = 0.0
        self._lock = threading.Lock()
        self.waited: list[float] = []  # every wait this limiter made, for reports and tests

    def acquire(self, input_tokens: int) -> float:
        """Block until one request of `input_tokens` may go; returns the seconds waited."""
        total = 0.0
        while True:
            with self._lock:
                now = self._clock()
                wait = self._paused_until - now
                if wait <= 0:
                    self._requests.refill(now)
                    self._tokens.refill(now)
                    wait = max(self._requests.wait_for(1), self._tokens.wait_for(input_tokens))
                    if wait <= 0:
                        self._requests.take(1)
                        self._tokens.take(input_tokens)
                        return total
            self._sleep(wait)
            self.waited.append(wait)
            total += wait

    def pause(self, seconds: float) -> None:
        """Hold every caller for `seconds` from now (a 429's retry-after)."""
        if seconds <= 0:
            return
        with self._lock:
            self._paused_until = max(self._paused_until, self._clock() + seconds)

    @property
    def paused_for(self) -> float:
        with self._lock:
            return max(0.0, self._paused_until - self._clock())

    def observe(self, headers: Mapping[str, str] | Any) -> None:
        """React to `anthropic-ratelimit-<kind>-remaining` / `-reset` response headers."""
        if headers is None:
            return
        for kind in HEADER_KINDS:
            remaining = headers.get(f"anthropic-ratelimit-{kind}-remaining")
            reset = headers.get(f"anthropic-ratelimit-{kind}-reset")
            if remaining is None or reset is None:
                continue
            try:
                if int(float(remaining)) > 0:
                    continue
                at = datetime.fromisoformat(reset.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
            self.pause(min(at - self._wall(), MAX_HEADER_PAUSE))


class Budget:
    """The run's cost cap, process-wide: a request reserves its worst-case cost before it is sent
    and settles to the billed cost after, so concurrent requests never overshoot the cap together.
    `spent_usd` starts at what the run already spent (set it from the cost ledger on resume)."""

    def __init__(self, cap_usd: float | None, spent_usd: float = 0.0) -> None:
        self.cap_usd = cap_usd
        self.spent_usd = spent_usd
        self.reserved_usd = 0.0
        self._changed = threading.Condition()

    def reserve(self, worst_case_usd: float) -> float:
        """Hold `worst_case_usd`. When only other requests' reservations stand in the way, wait for
        them to settle (most cost less than their worst case); raise BudgetExhausted once what is
        already spent leaves no room for this request."""
        with self._changed:
            while (
                self.cap_usd is not None
                and self.spent_usd + self.reserved_usd + worst_case_usd > self.cap_usd
            ):
                if self.reserved_usd <= 0 or self.spent_usd + worst_case_usd > self.cap_usd:
                    raise BudgetExhausted(
                        f"the next request (up to ${worst_case_usd:.4f}) would pass the run's cap of "
                        f"${self.cap_usd:.2f} (spent ${self.spent_usd:.4f}, in flight ${self.reserved_usd:.4f})",
                        hint="resume the run with a higher --max-cost-usd",
                        spent_usd=self.spent_usd,
                        cap_usd=self.cap_usd,
                    )
                self._changed.wait(timeout=1.0)
            self.reserved_usd += worst_case_usd
            return worst_case_usd

    def settle(self, reserved_usd: float, actual_usd: float) -> None:
        with self._changed:
            self.reserved_usd = max(0.0, self.reserved_usd - reserved_usd)
            self.spent_usd += actual_usd
            self._changed.notify_all()

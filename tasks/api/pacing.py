"""Client-side pacing shared by every thread of one `ModelClient`, and the run's cost cap.

`RateLimiter` runs at the server's limits, never above them and never far below:

- **Adopts the server's limits.** Every answer (and every 429) carries
  `anthropic-ratelimit-<kind>-limit` / `-remaining` for requests, input tokens and output tokens.
  `-limit` replaces the configured guess; `-remaining`, less what docmill has sent that the server
  may not have counted yet, becomes the local picture of the server's bucket.
- **Refills continuously** at `limit / 60 s`. `-reset` (when the bucket is *full* again) is never
  waited for: a bucket at zero lets the next request go after `1 / (limit / 60 s)`.
- **Ramps.** The send rate starts at `ramp_start` of the limit and grows linearly to the limit over
  `ramp_seconds` (the API also limits sharp ramps); a 429 halves it and ramps again. The send rate is
  never above the limit, so the server's bucket stays near full and absorbs latency jitter.
- **Output tokens count**: a request reserves its `max_tokens` when sent and the answer's usage
  gives back what it did not use (as the API itself does). Input tokens are estimated from the body,
  corrected by the ratio counted/estimate seen so far. What counts is what the API counts against
  the input-token limit: uncached input and cache writes; cache reads do not for current models
  (`counts_cache_reads=True` for an endpoint that counts them), so a cached prefix lets more
  requests through, as it does on the API.
- **In flight: as many as the limit needs, at most `concurrency`**: about twice the requests the
  rate admits during the observed latency, plus two.
- `retry-after` is not handled here: it delays only the request that got the 429 (tasks.api.client).
- **A share of the organisation's limits.** `set_share(fraction)` makes this process use that
  fraction of every limit (configured or stated by the headers, whose `-remaining` counts the whole
  organisation); tasks.api.shared_limit sets it from the store, so processes on several machines
  share one limit instead of each assuming all of it. `stats.adopted` keeps the limits as the
  headers state them (whole organisation) and `stats.sent` counts requests sent, for that layer.

Time is injectable (`clock`, `sleep`) so tests record waits instead of sleeping.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from docmill.errors import BudgetExhausted

REQUESTS, INPUT, OUTPUT = "requests", "input-tokens", "output-tokens"
KINDS = (REQUESTS, INPUT, OUTPUT)
BURST_SECONDS = 2.0  # the send-rate bucket holds this much: a stalled moment is caught up, no more
MARGIN = 0.01  # of a limit kept unspent in the local picture (header rounding, clock skew)
EWMA = 0.2  # weight of the newest latency / token-ratio sample
MIN_WAIT = 0.001
WINDOW_START = 4  # requests in flight before the first answer says how long answers take
INPUT_COUNTED = ("input_tokens", "cache_creation_input_tokens")  # against the input-token limit


@dataclass
class TokenBucket:
    """`per_minute` units refilled continuously, holding at most `capacity` (default one minute's
    worth). A request larger than the capacity waits for a full bucket and leaves it in debt (of at
    most one minute)."""

    per_minute: float
    level: float
    updated: float
    capacity: float = 0.0

    def __post_init__(self) -> None:
        if self.capacity <= 0:
            self.capacity = self.per_minute

    def refill(self, now: float) -> None:
        gained = max(0.0, now - self.updated) * self.per_minute / 60.0
        self.level = min(self.capacity, self.level + gained)
        self.updated = now

    def wait_for(self, amount: float, keep: float = 0.0) -> float:
        """Seconds until `amount` (at most the capacity) can be taken leaving `keep` behind."""
        amount = min(amount, self.capacity)
        need = amount + min(keep, self.capacity - amount) - self.level  # an oversized request keeps none
        return 0.0 if need <= 0 else need * 60.0 / self.per_minute

    def take(self, amount: float) -> None:
        self.level -= min(amount, self.per_minute)  # an oversized request costs one minute, not more


class Told(TypedDict, total=False):
    """What one attempt tells the pacer: the server's headers, the billed usage, a 429."""

    headers: Any
    usage: dict[str, Any]
    throttled: bool


@dataclass
class Ticket:
    """What one sent request holds until `RateLimiter.release`."""

    input_tokens: int  # the estimate, corrected by what answers billed so far
    output_tokens: int
    sent_at: float
    waited: float = 0.0
    ramp: int = 0  # the ramp it was sent under (a 429 backs off the ramp it was sent under, once)
    estimate: int = 0  # the caller's raw estimate of its input tokens


@dataclass
class _Kind:
    """One server limit: the local picture of the server's bucket, the send-rate bucket, and what
    is in flight (sent, not yet answered)."""

    server: TokenBucket | None  # None: no limit known (the server never said, none configured)
    pace: TokenBucket | None
    in_flight: float = 0.0
    adopted: bool = False


@dataclass
class PacerStats:
    """Counters for reports, benchmarks and tests."""

    waits: list[float] = field(default_factory=list)
    throttled: int = 0
    adopted: dict[str, float] = field(default_factory=dict)  # the organisation's, as headers state them
    sent: int = 0


class RateLimiter:
    def __init__(
        self,
        requests_per_minute: int,
        input_tokens_per_minute: int,
        output_tokens_per_minute: int | None = None,
        *,
        concurrency: int = 8,
        ramp_seconds: float = 20.0,
        ramp_start: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        counts_cache_reads: bool = False,
    ) -> None:
        self._clock, self._sleep = clock, sleep
        self.counts_cache_reads = counts_cache_reads
        self.concurrency = concurrency
        self.ramp_seconds, self._ramp_floor = ramp_seconds, ramp_start
        now = clock()
        self._ramp_from = now
        self._ramps = 0
        configured = {
            REQUESTS: requests_per_minute,
            INPUT: input_tokens_per_minute,
            OUTPUT: output_tokens_per_minute,
        }
        self._kinds = {k: self._new_kind(v, now) for k, v in configured.items()}
        self._input_ratio = 1.0  # billed input tokens / our estimate
        self._latency: float | None = None
        self._in_flight = 0
        self._lock = threading.Condition()
        self.stats = PacerStats()
        self._share = 1.0  # of the organisation's limits (set_share)

    @staticmethod
    def _new_kind(per_minute: float | None, now: float) -> _Kind:
        if not per_minute:
            return _Kind(None, None)
        return _Kind(TokenBucket(float(per_minute), float(per_minute), now), None)

    # ---- what the limiter allows now --------------------------------------------------------

    def ramp(self, now: float) -> float:
        """The share of the limit the send rate may use now (ramp_start .. 1)."""
        if self.ramp_seconds <= 0:
            return 1.0
        return min(
            1.0, self._ramp_floor + (1.0 - self._ramp_floor) * (now - self._ramp_from) / self.ramp_seconds
        )

    @property
    def window(self) -> int:
        """Requests allowed in flight: enough to fill the request limit at the observed latency."""
        requests = self._kinds[REQUESTS].server
        if self._latency is None or requests is None:
            return min(self.concurrency, WINDOW_START)
        need = 2.0 * requests.per_minute / 60.0 * self._latency + 2
        return max(1, min(self.concurrency, math.ceil(need)))

    @property
    def limits(self) -> dict[str, float | None]:
        with self._lock:
            return {k: (s.server.per_minute if s.server else None) for k, s in self._kinds.items()}

    @property
    def waited(self) -> list[float]:
        return self.stats.waits

    def _wait_needed(self, now: float, wants: Mapping[str, float]) -> float:
        factor = self.ramp(now)
        wait = 0.0
        for kind, state in self._kinds.items():
            amount = wants[kind]
            if state.server is None or amount <= 0:
                continue
            state.server.refill(now)
            wait = max(wait, state.server.wait_for(amount, MARGIN * state.server.per_minute))
            if kind == OUTPUT:
                continue  # the output reservation is given back at the answer: no send rate for it
            rate = state.server.per_minute * factor
            if state.pace is None:
                state.pace = TokenBucket(rate, rate * BURST_SECONDS / 60.0, now, rate * BURST_SECONDS / 60.0)
            state.pace.refill(now)
            state.pace.per_minute, state.pace.capacity = rate, max(1.0, rate * BURST_SECONDS / 60.0)
            wait = max(wait, state.pace.wait_for(amount))
        return wait

    # ---- one request ------------------------------------------------------------------------

    def acquire(self, input_tokens: int, max_tokens: int = 0) -> Ticket:
        """Block until a request of about `input_tokens` (reserving `max_tokens` of output) may go."""
        total = 0.0
        while True:
            with self._lock:
                while self._in_flight >= self.window:
                    self._lock.wait(timeout=0.05)
                now = self._clock()
                tokens = math.ceil(input_tokens * self._input_ratio)
                wants = {REQUESTS: 1.0, INPUT: float(tokens), OUTPUT: float(max_tokens)}
                wait = self._wait_needed(now, wants)
                if wait <= 0:
                    for kind, amount in wants.items():
                        state = self._kinds[kind]
                        state.in_flight += amount
                        for bucket in (state.server, state.pace):
                            if bucket is not None:
                                bucket.take(amount)
                    self._in_flight += 1
                    self.stats.sent += 1
                    return Ticket(tokens, max_tokens, now, total, self._ramps, input_tokens)
            wait = max(wait, MIN_WAIT)  # a float-rounding sliver must still move the clock
            self._sleep(wait)
            self.stats.waits.append(wait)
            total += wait

    def release(
        self,
        ticket: Ticket,
        *,
        usage: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | Any = None,
        throttled: bool = False,
    ) -> None:
        """The request of `ticket` is over: give back what it did not use (from `usage`), learn
        its latency, adopt the server's limits from `headers`, back off the ramp on a 429."""
        with self._lock:
            now = self._clock()
            self._in_flight = max(0, self._in_flight - 1)
            held = {REQUESTS: 1.0, INPUT: float(ticket.input_tokens), OUTPUT: float(ticket.output_tokens)}
            for kind, amount in held.items():
                self._kinds[kind].in_flight = max(0.0, self._kinds[kind].in_flight - amount)
            if usage is not None:
                self._settle_usage(ticket, usage)
                latency = max(0.0, now - ticket.sent_at)
                self._latency = (
                    latency if self._latency is None else (1 - EWMA) * self._latency + EWMA * latency
                )
            if throttled:
                self.stats.throttled += 1
            if throttled and ticket.ramp == self._ramps:  # one back-off per ramp, not per 429
                self._ramps += 1
                self._ramp_floor = max(0.05, self.ramp(now) / 2.0)
                self._ramp_from = now
            self._adopt(headers, now)
            self._lock.notify_all()

    def _settle_usage(self, ticket: Ticket, usage: Mapping[str, Any]) -> None:
        # the input tokens the API counts against its limit: cache reads only where it counts them
        counted = INPUT_COUNTED + (("cache_read_input_tokens",) if self.counts_cache_reads else ())
        billed_in = sum(int(usage.get(f) or 0) for f in counted)
        billed_out = int(usage.get("output_tokens") or 0)
        if billed_in and ticket.estimate:
            sample = billed_in / ticket.estimate
            self._input_ratio = (1 - EWMA) * self._input_ratio + EWMA * sample
        for kind, held, billed in (
            (INPUT, ticket.input_tokens, billed_in),
            (OUTPUT, ticket.output_tokens, billed_out),
        ):
            bucket = self._kinds[kind].server
            if bucket is not None and held:
                bucket.level = min(bucket.capacity, bucket.level + held - billed)

    def set_share(self, fraction: float) -> None:
        """Use `fraction` (0 < f <= 1) of the organisation's limits from now on: the local picture of
        each server bucket is scaled to it (tasks.api.shared_limit calls this as shares change)."""
        with self._lock:
            fraction = min(1.0, max(float(fraction), 1e-4))
            scale, self._share = fraction / self._share, fraction
            now = self._clock()
            for state in self._kinds.values():
                if state.server is not None:
                    state.server.refill(now)
                    state.server.per_minute *= scale
                    state.server.capacity *= scale
                    state.server.level *= scale
            self._lock.notify_all()

    def observe(self, headers: Mapping[str, str] | Any) -> None:
        """Adopt `anthropic-ratelimit-<kind>-limit` / `-remaining` from a response's headers."""
        with self._lock:
            self._adopt(headers, self._clock())

    def _adopt(self, headers: Mapping[str, str] | Any, now: float) -> None:
        if headers is None:
            return
        for kind, state in self._kinds.items():
            limit = _number(headers.get(f"anthropic-ratelimit-{kind}-limit"))
            remaining = _number(headers.get(f"anthropic-ratelimit-{kind}-remaining"))
            if limit is not None and limit > 0:
                self.stats.adopted[kind] = limit
                limit *= self._share  # this process's share of the organisation's limit
                if state.server is None:
                    state.server = TokenBucket(limit, limit, now)
                state.server.refill(now)
                state.server.per_minute = state.server.capacity = limit
                state.server.level = min(state.server.level, limit)
                state.adopted = True
            if remaining is not None and state.server is not None:
                # our share of what the server counted, less what we sent it may not have counted yet
                state.server.refill(now)
                state.server.level = min(state.server.capacity, remaining * self._share - state.in_flight)


def _number(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


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

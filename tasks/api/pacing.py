"""Client-side pacing shared by every request of one `ModelClient` (all sent from its event loop).

`RateLimiter` runs at the server's limits, never above them and never far below:

- **Adopts the server's limits.** Every answer (and every 429) carries
  `anthropic-ratelimit-<kind>-limit` / `-remaining` for requests, input and output tokens. `-limit`
  replaces the configured guess; `-remaining`, less what docmill sent that the server may not have
  counted yet, becomes the local picture of the server's bucket, refilled continuously at
  `limit / 60 s` (`-reset`, when the bucket is *full* again, is never waited for).
- **Ramps.** The send rate starts at `ramp_start` of the limit and grows linearly to it over
  `ramp_seconds` (the API also limits sharp ramps); a 429 halves it and ramps again. It is never
  above the limit, so the server's bucket stays near full and absorbs latency jitter.
- **Output tokens count.** A request goes only when its whole `max_tokens` fits in the output bucket,
  but in flight it holds what answers actually use (1.5 x the mean billed output; `max_tokens`
  until the first answer), and output is paced at the mean billed output per request: holding
  `max_tokens` (4,096) while answers use ~270 capped a tier-4 run at ~0.7 of its limit. Input
  tokens: estimated from the body, corrected by the ratio billed/estimated so far, counted as the
  API does (cache reads only with `counts_cache_reads=True`).
- **In flight: what the limit needs (Little's law).** The window is the request rate the tightest
  limit admits times the observed latency, x1.5 plus 4 (before the first answer the latency is at
  least the age of the first request). `concurrency` is an optional ceiling.
- **A share of the organisation's limits.** `set_share(fraction)` paces at that fraction of every
  limit; tasks.api.shared_limit sets it from the store, so processes on several machines share one
  limit instead of each assuming all of it.

`try_acquire` is the one admission decision (a ticket, or how long to wait); `tasks.api.aio.Gate`
waits for it on the client's event loop, woken early when an answer comes. The clock is injectable
(`clock`) so tests move time instead of waiting.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from docmill.logs import get_logger

log = get_logger("api")
REQUESTS, INPUT, OUTPUT = "requests", "input-tokens", "output-tokens"
BURST_SECONDS = 2.0  # the send-rate bucket holds this much: a stalled moment is caught up, no more
MARGIN = 0.01  # of a limit kept unspent in the local picture (header rounding, clock skew)
EWMA = 0.2  # weight of the newest latency / token-ratio sample
MIN_WAIT = 0.001
WINDOW_START = 16  # requests in flight before anything says how long answers take
WINDOW_HEADROOM = 1.5  # x the rate the limits admit x the latency (latency varies; the pacer paces)
WINDOW_PAD = 4
WINDOW_MAX = 10_000  # no ceiling given: at most this many requests in flight
DECLARE_GROWTH = 1.125  # what is declared in flight grows at least this much at a time (`declare_to`)
DECLARE_FLOOR = 4  # and is at least this (fewer writes while a run starts)
DECLARE_RETRY = 1.0  # seconds before asking again when the declaration could not be written
OUTPUT_HOLD = 1.5  # a request in flight holds this x the mean billed output (plus OUTPUT_PAD)
OUTPUT_PAD = 64
WINDOW_FULL = -1.0  # try_acquire: the window is full, wait for an answer
INPUT_COUNTED = ("input_tokens", "cache_creation_input_tokens")  # against the input-token limit


@dataclass
class TokenBucket:
    """`per_minute` units refilled continuously, holding at most `capacity` (a server's bucket: one
    minute's worth). A request larger than the capacity waits for a full bucket and leaves it in debt
    (of at most one minute)."""

    per_minute: float
    level: float
    updated: float
    capacity: float

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
    limit: float = 0.0  # the whole limit (configured or adopted); the bucket paces at limit x share


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
        concurrency: int | None = None,
        ramp_seconds: float = 20.0,
        ramp_start: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
        counts_cache_reads: bool = False,
    ) -> None:
        self._clock = clock
        self.concurrency = concurrency  # a ceiling on the window; None: the limits decide
        self.ramp_seconds, self._ramp_floor = ramp_seconds, ramp_start
        now = clock()
        self._ramp_from = now
        self._ramps = 0
        self._share = 1.0  # of every limit, configured or adopted (set_share changes it)
        configured = {
            REQUESTS: requests_per_minute,
            INPUT: input_tokens_per_minute,
            OUTPUT: output_tokens_per_minute,
        }
        self._kinds = {k: self._new_kind(v, now) for k, v in configured.items()}
        self._input_ratio = 1.0  # billed input tokens / our estimate
        self._input_mean: float | None = None  # input tokens per request (corrected estimates)
        self._output_mean: float | None = None  # billed output tokens per answer
        self.latency: float | None = None  # the observed answer time (moving average)
        self._first_sent: float | None = None
        self._in_flight = 0
        self._lock = threading.Lock()
        self.declare: Callable[[int], None] | None = None  # see `declare_to`
        self.declared_for: str | None = None
        self._declared = 0
        self.stats = PacerStats()
        self.counts_cache_reads = counts_cache_reads

    def _new_kind(self, per_minute: float | None, now: float) -> _Kind:
        if not per_minute:
            return _Kind(None, None)
        rate = float(per_minute) * self._share
        return _Kind(TokenBucket(rate, rate, now, rate), None, limit=float(per_minute))

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
        """Requests allowed in flight: the rate the limits admit x the latency (Little's law)."""
        with self._lock:
            return self._window(self._clock())

    def declare_to(self, owner: str, declare: Callable[[int], None]) -> None:
        """Record the most requests ever in flight before passing it (checkpoints.inflight: a killed
        process had at most that many in flight, whatever its chunks held): a request that would pass
        what was declared goes only after `declare(n)` has returned, n growing by `DECLARE_GROWTH`
        (at least `DECLARE_FLOOR`), so a few dozen small writes in a process's life at most. `owner`
        (a run id): a new owner declares anew."""
        with self._lock:
            self.declared_for, self.declare, self._declared = owner, declare, 0

    def _declared_room(self) -> bool:
        """Whether one more request in flight stays within what was declared (declaring more if not)."""
        if self.declare is None or self._in_flight < self._declared:
            return True
        grown = max(self._in_flight + 1, math.ceil(self._declared * DECLARE_GROWTH), DECLARE_FLOOR)
        try:
            self.declare(grown)
        except Exception as exc:  # not recorded: no more in flight than was declared
            log.warning("could not record the requests in flight: %s", exc)
            return False
        self._declared = grown
        return True

    def _window(self, now: float) -> int:
        ceiling = self.concurrency or WINDOW_MAX
        latency = self.latency
        if latency is None and self._first_sent is not None and self._in_flight:
            latency = now - self._first_sent  # no answer yet: at least this long
        rate = self._admissible_rate()
        if latency is None or rate is None:
            return min(ceiling, WINDOW_START)
        need = rate * latency * WINDOW_HEADROOM + WINDOW_PAD
        return max(1, min(ceiling, max(math.ceil(need), WINDOW_START if self.latency is None else 1)))

    def _admissible_rate(self) -> float | None:
        """Requests per second the tightest known limit admits (None: no limit known)."""
        per_request = {REQUESTS: 1.0, INPUT: self._input_mean, OUTPUT: self._output_mean}
        rates = [
            state.server.per_minute / 60.0 / max(per_request[kind] or 0.0, 1.0)
            for kind, state in self._kinds.items()
            if state.server is not None and (kind == REQUESTS or per_request[kind])
        ]
        return min(rates) if rates else None

    @property
    def limits(self) -> dict[str, float | None]:
        with self._lock:
            return {k: (s.server.per_minute if s.server else None) for k, s in self._kinds.items()}

    def set_share(self, share: float) -> None:
        """Pace at `share` (0 < share <= 1) of every limit from now on, configured or adopted:
        the part of an organisation's limit this process may use (a pacer shared across workers
        sets it, and may change it at any time). Buckets keep their fill in proportion."""
        if not share > 0:
            raise ValueError(f"share must be in (0, 1], not {share}")
        share = min(1.0, float(share))  # a sum of fair shares may round a hair above 1
        with self._lock:
            now = self._clock()
            for state in self._kinds.values():
                bucket = state.server
                if bucket is None:
                    continue
                bucket.refill(now)
                fill = bucket.level / bucket.capacity if bucket.capacity else 1.0
                bucket.per_minute = bucket.capacity = state.limit * share
                bucket.level = fill * bucket.capacity
            self._share = share

    def _wait_needed(self, now: float, fits: Mapping[str, float], paced: Mapping[str, float]) -> float:
        """Seconds until `fits` fits in every server bucket and `paced` in every send-rate bucket."""
        factor = self.ramp(now)
        wait = 0.0
        for kind, state in self._kinds.items():
            if state.server is None:
                continue
            if fits[kind] > 0:
                state.server.refill(now)
                wait = max(wait, state.server.wait_for(fits[kind], MARGIN * state.server.per_minute))
            if paced[kind] <= 0:
                continue
            rate = state.server.per_minute * factor
            if state.pace is None:
                state.pace = TokenBucket(rate, rate * BURST_SECONDS / 60.0, now, rate * BURST_SECONDS / 60.0)
            state.pace.refill(now)
            state.pace.per_minute, state.pace.capacity = rate, max(1.0, rate * BURST_SECONDS / 60.0)
            wait = max(wait, state.pace.wait_for(paced[kind]))
        return wait

    def _output_hold(self, max_tokens: int) -> int:
        """What a request in flight holds of the output bucket (see the module doc)."""
        if not max_tokens or self._output_mean is None:
            return max_tokens
        return min(max_tokens, math.ceil(OUTPUT_HOLD * self._output_mean) + OUTPUT_PAD)

    # ---- one request ------------------------------------------------------------------------

    def try_acquire(self, input_tokens: int, max_tokens: int = 0) -> Ticket | float:
        """The one admission decision: a `Ticket` if a request of about `input_tokens` (up to
        `max_tokens` of output) may go now, else the seconds to wait before asking again, or
        `WINDOW_FULL` while the window is full (an answer frees it)."""
        with self._lock:
            now = self._clock()
            if self._in_flight >= self._window(now):
                return WINDOW_FULL
            tokens = math.ceil(input_tokens * self._input_ratio)
            hold = self._output_hold(max_tokens)
            # output is paced at what answers use on average (nothing before the first answer)
            expected = min(float(max_tokens), self._output_mean or 0.0)
            fits = {REQUESTS: 1.0, INPUT: float(tokens), OUTPUT: float(max_tokens)}
            paced = {REQUESTS: 1.0, INPUT: float(tokens), OUTPUT: expected}
            wait = self._wait_needed(now, fits, paced)
            if wait > 0:
                return max(wait, MIN_WAIT)  # a float-rounding sliver must still move the clock
            if not self._declared_room():
                return DECLARE_RETRY  # the record could not be written: ask again a little later
            for kind, held in ((REQUESTS, 1.0), (INPUT, float(tokens)), (OUTPUT, float(hold))):
                state = self._kinds[kind]
                state.in_flight += held
                if state.server is not None:
                    state.server.take(held)
                if state.pace is not None:
                    state.pace.take(paced[kind])
            self._in_flight += 1
            self.stats.sent += 1
            if self._first_sent is None:
                self._first_sent = now
            self._input_mean = _ewma(self._input_mean, float(tokens))
            return Ticket(tokens, hold, now, 0.0, self._ramps, input_tokens)

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
                self.latency = _ewma(self.latency, latency)
            if throttled:
                self.stats.throttled += 1
            if throttled and ticket.ramp == self._ramps:  # one back-off per ramp, not per 429
                self._ramps += 1
                self._ramp_floor = max(0.05, self.ramp(now) / 2.0)
                self._ramp_from = now
            self._adopt(headers, now)

    def _settle_usage(self, ticket: Ticket, usage: Mapping[str, Any]) -> None:
        # the input tokens the API counts against its limit: cache reads only where it counts them
        counted = INPUT_COUNTED + (("cache_read_input_tokens",) if self.counts_cache_reads else ())
        billed_in = sum(int(usage.get(f) or 0) for f in counted)
        billed_out = int(usage.get("output_tokens") or 0)
        if billed_in and ticket.estimate:
            self._input_ratio = _ewma(self._input_ratio, billed_in / ticket.estimate)
        if ticket.output_tokens:
            self._output_mean = _ewma(self._output_mean, billed_out)
        for kind, held, billed in (
            (INPUT, ticket.input_tokens, billed_in),
            (OUTPUT, ticket.output_tokens, billed_out),
        ):
            bucket = self._kinds[kind].server
            if bucket is not None and held:
                bucket.level = min(bucket.capacity, bucket.level + held - billed)

    def observe(self, headers: Mapping[str, str] | Any) -> None:
        """Adopt `anthropic-ratelimit-<kind>-limit` / `-remaining` from a response's headers."""
        with self._lock:
            self._adopt(headers, self._clock())

    def _adopt(self, headers: Mapping[str, str] | Any, now: float) -> None:
        if headers is None:
            return
        share = self._share
        for kind, state in self._kinds.items():
            limit = _number(headers.get(f"anthropic-ratelimit-{kind}-limit"))
            remaining = _number(headers.get(f"anthropic-ratelimit-{kind}-remaining"))
            if limit is not None and limit > 0:
                self.stats.adopted[kind] = limit  # the organisation's: this process paces at a share
                if state.server is None:
                    state.server = TokenBucket(limit * share, limit * share, now, limit * share)
                state.server.refill(now)
                state.limit = limit
                state.server.per_minute = state.server.capacity = limit * share
                state.server.level = min(state.server.level, limit * share)
            if remaining is not None and state.server is not None:
                # our share of what the server counted, less what we sent it may not have counted yet
                state.server.refill(now)
                state.server.level = min(state.server.capacity, remaining * share - state.in_flight)


def _ewma(mean: float | None, sample: float) -> float:
    """The moving average `mean` after `sample` (the sample itself when there is none yet)."""
    return sample if mean is None else (1 - EWMA) * mean + EWMA * sample


def _number(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None

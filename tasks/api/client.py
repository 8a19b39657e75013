"""`ModelClient`: the realtime Messages call with one transport retry layer (tenacity, invariant 6),
bounded concurrency, client-side pacing and the overload degradation ladder.

- The SDK client is built with `max_retries=0`; tenacity (policy in tasks.api.retrying) re-sends.
- A semaphore of `settings.api.concurrency` bounds requests in flight across all threads. It is
  held until `on_response` has persisted the answer, so a crash re-sends at most that many
  requests (invariant 3).
- Pacing (tasks.api.pacing): each attempt takes a ticket and gives it back with what it was told;
  a 429's `retry-after` is this request's own retry wait and holds no other request.
- Degradation ladder: after `overloads_before_fallback` consecutive 529s of the primary model,
  the request goes to `settings.api.fallback_model`; the result says which model answered. When
  the fallback's attempts are spent too, `ApiCallError(failure_type="transport_exhausted")`.
- Errors leave as `docmill.errors.ApiCallError` (never a tenacity RetryError) with status,
  request_id, attempts, model, failure_type ("api_error:<status>" or "transport_exhausted").
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import anthropic
from pydantic import SecretStr
from tenacity import RetryCallState, RetryError, Retrying, retry_if_exception

from docmill.errors import SpendLimitReached
from docmill.logs import get_logger
from docmill.prices import priced_usd, worst_usd
from docmill.shutdown import SHUTDOWN
from tasks.api.answers import OnPossiblyBilled, PossiblyBilled, answer, sent_before_timeout
from tasks.api.breaker import API_CAUSES, CircuitBreaker
from tasks.api.ladder import Ladder, call_error
from tasks.api.pacing import Budget, RateLimiter, Told
from tasks.api.retrying import (
    describe,
    is_retryable,
    is_spend_limit,
    spend_limit_error,
    wait_seconds,
)
from tasks.api.usage import add_usage, estimate_input_tokens

if TYPE_CHECKING:
    from docmill.settings import Settings

log = get_logger("api")
OnResponse = Callable[[int, dict[str, Any]], object]
T = TypeVar("T")


@dataclass
class CallResult:
    message: dict[str, Any]
    usage: dict[str, int]
    model: str
    request_id: str | None
    attempts: int
    cost_usd: float
    fell_back: bool = False
    errors: list[str] = field(default_factory=list)


class ModelClient:
    """One per process; share it between threads."""

    def __init__(
        self,
        settings: Settings,
        *,
        base_url: str | None = None,
        api_key: str | SecretStr | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        wall: Callable[[], float] = time.time,
        rng: Callable[[], float] = random.random,
        budget: Budget | None = None,
    ) -> None:
        api = settings.api
        key = api_key.get_secret_value() if isinstance(api_key, SecretStr) else api_key
        self.settings = settings
        self._sdk = anthropic.Anthropic(
            api_key=key, base_url=base_url, max_retries=0, timeout=api.timeout_seconds
        )
        self.semaphore = threading.BoundedSemaphore(api.concurrency)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self.concurrency = api.concurrency
        self.limiter = RateLimiter(
            api.requests_per_minute, api.input_tokens_per_minute, api.output_tokens_per_minute,
            concurrency=api.concurrency, ramp_seconds=api.ramp_seconds, ramp_start=api.ramp_start,
            clock=clock, sleep=sleep,
        )  # fmt: skip
        self._sleep, self._rng = sleep, rng
        self.budget = budget or Budget(settings.cost.max_cost_usd)
        self.sleeps: list[float] = []  # transport backoff waits, for reports and tests
        self.stopped: SpendLimitReached | None = None  # a spend-limit refusal: nothing more is sent
        self.wall = wall
        # the run's cost ledger hook (flows.extract sets it); without one they are only kept here
        self.on_possibly_billed: OnPossiblyBilled | None = None
        self.possibly_billed: list[PossiblyBilled] = []
        self.breaker = CircuitBreaker(api.circuit_breaker_calls)  # systemic failures stop the run

    def __repr__(self) -> str:
        return f"ModelClient(base_url={str(self._sdk.base_url)!r}, concurrency={self.concurrency})"

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._sdk.close()

    def pool(self) -> ThreadPoolExecutor:
        """Threads shared by every chunk's documents (tasks.per_file.realtime), as many as the
        concurrency: a chunk waiting for its slowest document holds one thread, not the limit."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="docmill-call")
            return self._pool

    @property
    def sdk(self) -> anthropic.Anthropic:
        """The SDK client (max_retries=0): only call it through `run` or `call`."""
        return self._sdk

    def run(self, fn: Callable[[], T], *, pace_tokens: int = 0, model: str | None = None,
            max_tokens: int = 0) -> T:  # fmt: skip
        """Any other SDK call (count_tokens, compaction, ...) through the one transport layer: retries,
        pacer, concurrency bound and, given `model`, the cost cap (worst case reserved, then settled)."""
        api = self.settings.api
        attempts = [0]

        def once() -> T:
            SHUTDOWN.check()
            self.breaker.check()
            attempts[0] += 1
            ticket = self.limiter.acquire(pace_tokens, max_tokens) if pace_tokens else None
            billed, used = 0.0, None
            try:
                worst = self._worst_case_usd(model, pace_tokens, max_tokens) if model else 0.0
                hold = self.budget.reserve(worst) if model else 0.0
                try:
                    with self.semaphore:
                        result = fn()
                    usage = getattr(result, "usage", None)
                    used = (
                        usage.model_dump(mode="json")
                        if usage is not None and hasattr(usage, "model_dump")
                        else usage
                    )
                    billed = self._cost(model, used) if model and used is not None else 0.0
                    return result
                finally:
                    self.budget.settle(hold, billed)
            finally:
                if ticket is not None:
                    self.limiter.release(ticket, usage=used if isinstance(used, dict) else None)

        retrying = Retrying(
            retry=retry_if_exception(is_retryable),
            stop=lambda _s: attempts[0] >= api.max_attempts,
            wait=lambda st: self._wait_any(st, attempts[0]),
            sleep=self._backoff,
            reraise=True,
        )
        try:
            return retrying(once)
        except anthropic.APIStatusError as e:
            if is_spend_limit(e):
                raise spend_limit_error(e) from e
            raise

    # ---- one HTTP attempt ----------------------------------------------------------------------

    def _send(self, request: dict[str, Any], ladder: Ladder, on_response: OnResponse | None) -> Any:
        if self.stopped is not None:
            raise self.stopped
        SHUTDOWN.check()  # after SIGINT/SIGTERM nothing new is sent
        self.breaker.check()  # tripped: nothing more is sent
        ladder.attempts += 1
        ladder.attempts_on_model += 1
        body = {**request, "model": ladder.model}
        estimate = estimate_input_tokens(body)
        max_tokens = int(body["max_tokens"])
        ticket = self.limiter.acquire(estimate, max_tokens)
        told: Told = {}
        try:
            worst = self._worst_case_usd(ladder.model, estimate, max_tokens)
            hold = self.budget.reserve(worst)
            billed = 0.0
            try:
                with self.semaphore:  # held until the answer is persisted: invariant 3
                    SHUTDOWN.check()  # again: a signal or a trip may have come while this request waited
                    self.breaker.admit(SHUTDOWN.check)  # a streak near the threshold: one at a time
                    try:
                        data, request_id, headers = self._post(body, ladder, told)
                    except anthropic.APITimeoutError as e:
                        if sent_before_timeout(e):
                            billed = worst  # the cap keeps what it may have cost
                            self._possibly_billed(ladder, body, estimate, worst)
                        raise
                    finally:
                        self.breaker.done()
                    told["headers"] = headers
                    data["_request_id"] = request_id
                    data["_asked_model"] = ladder.model  # priced by this, whatever `model` the answer names
                    told["usage"] = data.get("usage") or {}
                    billed = self._cost(ladder.model, data.get("usage"))
                    if on_response is not None:
                        on_response(ladder.attempts, data)
            finally:
                self.budget.settle(hold, billed)
        finally:  # a 429's retry-after delays only this request (the retry wait), never the others
            self.limiter.release(ticket, **told)
        return data

    def _possibly_billed(self, ladder: Ladder, body: dict[str, Any], estimate: int, worst: float) -> None:
        ladder.timeouts += 1
        entry = PossiblyBilled(
            pass_name=ladder.pass_name, doc_id=ladder.doc_id, key=ladder.key, attempt=ladder.attempts,
            model=ladder.model, input_tokens=estimate, max_tokens=int(body["max_tokens"]), usd=worst,
            at=self.wall(),
        )  # fmt: skip
        self.possibly_billed.append(entry)
        log.warning(
            "%s call for %s timed out after it was sent: recorded as possibly billed (worst case $%.4f)",
            ladder.pass_name, ladder.doc_id, worst, extra={"doc_id": ladder.doc_id, "model": ladder.model},
        )  # fmt: skip
        if self.on_possibly_billed is not None:
            self.on_possibly_billed(entry)

    def _post(
        self, body: dict[str, Any], ladder: Ladder, told: Told
    ) -> tuple[dict[str, Any], str | None, Any]:
        """One HTTP attempt: (the answer as JSON, request id, response headers). A request whose
        max_tokens reaches `api.stream_min_max_tokens` streams (`messages.stream` -> final message), so
        a long answer never meets the read timeout while it is being generated."""
        try:
            return answer(
                self._sdk, body, stream=int(body["max_tokens"]) >= self.settings.api.stream_min_max_tokens
            )
        except anthropic.APIStatusError as e:
            told["headers"] = e.response.headers
            told["throttled"] = e.status_code == 429
            ladder.failed(e)
            raise
        except anthropic.APIConnectionError as e:
            ladder.failed(e)
            if isinstance(e.__cause__, ConnectionRefusedError) or "refused" in str(e.__cause__ or ""):
                self.breaker.api("connection_refused", describe(e))
            raise

    def _cost(self, model: str, usage: Any) -> float:
        """USD of an answer to `model` (the one asked for); 0 for a model with no price (warned once)."""
        return priced_usd(model, usage or {}) or 0.0

    def _worst_case_usd(self, model: str, input_tokens: int, max_tokens: int) -> float:
        """What a request can cost at most (docmill.prices.worst_usd). A model with no price reserves
        0 without a cap and infinity under one (the start check refuses it first: the cap is never off)."""
        worst = worst_usd(model, input_tokens, max_tokens)
        if worst is None:
            return math.inf if self.budget.cap_usd is not None else 0.0
        return worst

    def _wait(self, state: RetryCallState, ladder: Ladder) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if exc is None:
            return 0.0
        api = self.settings.api
        return wait_seconds(
            exc, max(ladder.attempts_on_model, 1), api.backoff_max_seconds, self._rng,
            asked_max=api.retry_after_max_seconds,
        )  # fmt: skip

    def _wait_any(self, state: RetryCallState, attempt: int) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if exc is None:
            return 0.0
        api = self.settings.api
        return wait_seconds(
            exc, attempt, api.backoff_max_seconds, self._rng, asked_max=api.retry_after_max_seconds
        )

    def _backoff(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self._sleep(seconds)

    # ---- the call ------------------------------------------------------------------------------

    def call(
        self,
        request: dict[str, Any],
        *,
        key: str,
        doc_id: str,
        pass_name: str,
        on_response: OnResponse | None = None,
        purpose: str = "call",
        prompt_version: str | None = None,
    ) -> CallResult:
        """Send one Messages request; `on_response(attempt, message)` runs the moment it answers.
        Every answered call leaves one structured log line (docmill.api, INFO)."""
        api = self.settings.api
        started = time.monotonic()
        ladder = Ladder(request["model"], api.fallback_model, api.overloads_before_fallback)
        ladder.key, ladder.doc_id, ladder.pass_name = key, doc_id, pass_name
        retrying = Retrying(
            retry=retry_if_exception(is_retryable),
            # a request that timed out after it was sent may be billed: resent `timeout_resends` times at most
            stop=lambda _s: (
                ladder.attempts_on_model >= api.max_attempts or ladder.timeouts > api.timeout_resends
            ),
            wait=lambda s: self._wait(s, ladder),
            sleep=self._backoff,
            reraise=False,
        )
        try:
            message = retrying(self._send, request, ladder, on_response)
        except RetryError as e:
            last = e.last_attempt.exception()
            raise call_error(last, ladder, key, doc_id, pass_name, "transport_exhausted") from last
        except (anthropic.APIStatusError, anthropic.APIConnectionError) as e:
            if isinstance(e, anthropic.APIStatusError) and is_spend_limit(e):
                self.stopped = spend_limit_error(e)
                raise self.stopped from e  # stops the run: no document is marked failed
            status = getattr(e, "status_code", None)
            kind = f"api_error:{status}" if status is not None else "transport_exhausted"
            if status in API_CAUSES:
                self.breaker.api(API_CAUSES[status], describe(e))
                self.breaker.check()  # tripped by this call (a 404 at once): the run stops, no document fails
            raise call_error(e, ladder, key, doc_id, pass_name, kind) from e
        except anthropic.APIResponseValidationError as e:
            self.breaker.api("not_a_message", str(e))
            raise call_error(e, ladder, key, doc_id, pass_name, "api_error:not_a_message") from e
        self.breaker.api(None)
        usage = add_usage({}, message.get("usage"))
        log.info(
            "%s call answered (%s)",
            pass_name,
            purpose,
            extra={
                "doc_id": doc_id, "request_id": message.get("_request_id"), "model": ladder.model,
                "prompt_version": prompt_version, "stop_reason": message.get("stop_reason"), "usage": usage,
                "latency_ms": round((time.monotonic() - started) * 1000, 1), "attempt": ladder.attempts,
                "cost_usd": round(self._cost(ladder.model, message.get("usage")), 6),
            },
        )  # fmt: skip
        return CallResult(
            message=message,
            usage=usage,
            model=ladder.model,
            request_id=message.get("_request_id"),
            attempts=ladder.attempts,
            cost_usd=self._cost(ladder.model, message.get("usage")),
            fell_back=ladder.fell_back,
            errors=ladder.errors,
        )

"""`ModelClient`: the realtime Messages call with one transport retry layer (tenacity, invariant 6),
bounded concurrency, client-side pacing and the overload degradation ladder. Its twin on an event
loop (tasks.api.aio.async_client, the per-file pass) is built from the same policy steps.

- The SDK client is built with `max_retries=0`; tenacity (policy in tasks.api.retrying) re-sends.
- A request's slot (the pacer's window, and `settings.api.concurrency` when given) is held until
  `on_response` has persisted the answer, so a crash re-sends at most the requests in flight
  (invariant 3).
- Pacing (tasks.api.pacing): each attempt takes a ticket and gives it back with what it was told;
  a 429's `retry-after` is this request's own retry wait and holds no other request.
- Degradation ladder: after `overloads_before_fallback` consecutive 529s of the primary model,
  the request goes to `settings.api.fallback_model`; the result says which model answered. When
  the fallback's attempts are spent too, `ApiCallError(failure_type="transport_exhausted")`.
- Errors leave as `docmill.errors.ApiCallError` (never a tenacity RetryError) with status,
  request_id, attempts, model, failure_type ("api_error:<status>" or "transport_exhausted").
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable
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
from tasks.api.ladder import CallResult as CallResult  # re-exported: what a call returns
from tasks.api.ladder import Ladder, call_error
from tasks.api.pacing import WINDOW_MAX, Budget, RateLimiter, Told
from tasks.api.retrying import describe, is_retryable, is_spend_limit, spend_limit_error, wait_seconds
from tasks.api.usage import add_usage, estimate_input_tokens

if TYPE_CHECKING:
    from docmill.settings import Settings
    from tasks.api.aio import AsyncModelClient

log = get_logger("api")
OnResponse = Callable[[int, dict[str, Any]], object]
T = TypeVar("T")
# what a call's retry loop can end with that `_ended` turns into the call's error
Ending = tuple[BaseException, BaseException | None]  # the error a call ends with, and its cause
TIMEOUT_COVERS = 2048  # output tokens `api.timeout_seconds` covers unstreamed (see `_read_timeout`)
ENDINGS = (
    RetryError,
    anthropic.APIStatusError,
    anthropic.APIConnectionError,
    anthropic.APIResponseValidationError,
)


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
        self.semaphore = threading.BoundedSemaphore(api.concurrency or WINDOW_MAX)
        self._aio: AsyncModelClient | None = None  # this client on an event loop (tasks.api.aio.async_client)
        self._aio_lock = threading.Lock()
        self.concurrency = api.concurrency
        self._key, self._base_url = key, base_url
        self.limiter = RateLimiter(
            api.requests_per_minute, api.input_tokens_per_minute, api.output_tokens_per_minute,
            concurrency=api.concurrency, ramp_seconds=api.ramp_seconds, ramp_start=api.ramp_start,
            share=api.limit_share, clock=clock, sleep=sleep,
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
        if self._aio is not None:
            self._aio.close()
        self._sdk.close()

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
        body, estimate, max_tokens = self._open(request, ladder)
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
                        billed = self._timed_out(e, ladder, body, estimate, worst)
                        raise
                    finally:
                        self.breaker.done()
                    billed = self._answered(data, request_id, headers, ladder, told)
                    if on_response is not None:
                        on_response(ladder.attempts, data)
            finally:
                self.budget.settle(hold, billed)
        finally:  # a 429's retry-after delays only this request (the retry wait), never the others
            self.limiter.release(ticket, **told)
        return data

    # ---- one attempt's policy, step by step: shared with tasks.api.aio.AsyncModelClient ---------

    def _open(self, request: dict[str, Any], ladder: Ladder) -> tuple[dict[str, Any], int, int]:
        """Before an attempt: nothing is sent after a spend-limit refusal, a signal (SIGINT/SIGTERM)
        or a trip; the attempt is counted. Returns the body for the ladder's model, its input-token
        estimate and its max_tokens."""
        if self.stopped is not None:
            raise self.stopped
        SHUTDOWN.check()  # after SIGINT/SIGTERM nothing new is sent
        self.breaker.check()  # tripped: nothing more is sent
        ladder.attempts += 1
        ladder.attempts_on_model += 1
        body = {**request, "model": ladder.model}
        return body, estimate_input_tokens(body), int(body["max_tokens"])

    def _streams(self, body: dict[str, Any]) -> bool:
        """Whether the answer streams (from `api.stream_min_max_tokens`: a long one, read by read)."""
        return int(body["max_tokens"]) >= self.settings.api.stream_min_max_tokens

    def _read_timeout(self, body: dict[str, Any]) -> float:
        """How long an unstreamed answer may take: `api.timeout_seconds` covers 2,048 output tokens
        (the SDK estimates 58 s for them); a larger max_tokens gets it in proportion."""
        return self.settings.api.timeout_seconds * max(1.0, int(body["max_tokens"]) / TIMEOUT_COVERS)

    def _failed(self, e: Exception, ladder: Ladder, told: Told) -> None:  # what pacer, ladder, breaker learn
        if isinstance(e, anthropic.APIStatusError):
            told["headers"] = e.response.headers
            told["throttled"] = e.status_code == 429
            ladder.failed(e)
        elif isinstance(e, anthropic.APIConnectionError):
            ladder.failed(e)
            if _refused(e):
                self.breaker.api("connection_refused", describe(e))

    def _timed_out(
        self, e: anthropic.APITimeoutError, ladder: Ladder, body: dict[str, Any], estimate: int, worst: float
    ) -> float:
        """A timeout: what the cap keeps of it (its worst case, recorded as possibly billed, when the
        request went out before it timed out; else nothing)."""
        if not sent_before_timeout(e):
            return 0.0
        self._possibly_billed(ladder, body, estimate, worst)
        return worst

    def _answered(
        self, data: dict[str, Any], request_id: str | None, headers: Any, ladder: Ladder, told: Told
    ) -> float:
        """An answer: noted for the pacer, marked with its request id and the model asked for (it is
        priced by that, whatever `model` the answer names); returns its cost."""
        told["headers"] = headers
        data["_request_id"] = request_id
        data["_asked_model"] = ladder.model
        told["usage"] = data.get("usage") or {}
        return self._cost(ladder.model, data.get("usage"))

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
        max_tokens reaches `api.stream_min_max_tokens` streams (`messages.stream` -> final message);
        below it the answer comes whole within `_read_timeout`."""
        try:
            stream = self._streams(body)
            return answer(
                self._sdk, body, stream=stream, timeout=None if stream else self._read_timeout(body)
            )
        except (anthropic.APIStatusError, anthropic.APIConnectionError) as e:
            self._failed(e, ladder, told)
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
        return 0.0 if exc is None else self._wait_for(exc, ladder)

    def _wait_for(self, exc: BaseException, ladder: Ladder) -> float:
        """The wait before the next attempt after `exc` (retrying.wait_seconds)."""
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
        started = time.monotonic()
        ladder = self._ladder(request, key, doc_id, pass_name)
        retrying = Retrying(
            retry=retry_if_exception(is_retryable),
            stop=lambda _s: self._spent(ladder),
            wait=lambda s: self._wait(s, ladder),
            sleep=self._backoff,
            reraise=False,
        )
        try:
            message = retrying(self._send, request, ladder, on_response)
        except ENDINGS as e:
            error, cause = self._ended(e, ladder)
            raise error from cause
        return self._result(message, ladder, started, purpose, prompt_version)

    # ---- one call's policy around its attempts: shared with tasks.api.aio.AsyncModelClient --------

    def _ladder(self, request: dict[str, Any], key: str, doc_id: str, pass_name: str) -> Ladder:
        api = self.settings.api
        ladder = Ladder(request["model"], api.fallback_model, api.overloads_before_fallback)
        ladder.key, ladder.doc_id, ladder.pass_name = key, doc_id, pass_name
        return ladder

    def _spent(self, ladder: Ladder) -> bool:
        """No attempt more: the model's attempts are spent, or a request that timed out after it was
        sent (it may be billed) was already resent `timeout_resends` times."""
        api = self.settings.api
        return ladder.attempts_on_model >= api.max_attempts or ladder.timeouts > api.timeout_resends

    def _ended(self, e: BaseException, ladder: Ladder, *, exhausted: bool = False) -> Ending:
        """The error a call ends with when its retry loop gives up on `e` (one of `ENDINGS`; a
        retryable one when its attempts are spent: `exhausted`), and its cause: a spend-limit refusal
        stops the run (no document is marked failed); 401-404 feed the breaker; everything else is an
        `ApiCallError`."""
        key, doc_id, pass_name = ladder.key, ladder.doc_id, ladder.pass_name
        if isinstance(e, RetryError) or exhausted:
            last = e.last_attempt.exception() if isinstance(e, RetryError) else e
            return call_error(last, ladder, key, doc_id, pass_name, "transport_exhausted"), last
        if isinstance(e, anthropic.APIResponseValidationError):
            self.breaker.api("not_a_message", str(e))
            return call_error(e, ladder, key, doc_id, pass_name, "api_error:not_a_message"), e
        if isinstance(e, anthropic.APIStatusError) and is_spend_limit(e):
            self.stopped = spend_limit_error(e)
            return self.stopped, e
        status = getattr(e, "status_code", None)
        kind = f"api_error:{status}" if status is not None else "transport_exhausted"
        if status in API_CAUSES:
            self.breaker.api(API_CAUSES[status], describe(e))
            self.breaker.check()  # tripped by this call (a 404 at once): the run stops, no document fails
        return call_error(e, ladder, key, doc_id, pass_name, kind), e

    def _result(
        self,
        message: dict[str, Any],
        ladder: Ladder,
        started: float,
        purpose: str,
        prompt_version: str | None,
    ) -> CallResult:
        """An answered call: the breaker's API streak reset, one structured log line, the result."""
        self.breaker.api(None)
        usage = add_usage({}, message.get("usage"))
        cost = self._cost(ladder.model, message.get("usage"))
        if log.isEnabledFor(logging.INFO):
            log.info(
                "%s call answered (%s)",
                ladder.pass_name,
                purpose,
                extra={
                    "doc_id": ladder.doc_id, "request_id": message.get("_request_id"), "model": ladder.model,
                    "prompt_version": prompt_version, "stop_reason": message.get("stop_reason"),
                    "usage": usage, "latency_ms": round((time.monotonic() - started) * 1000, 1),
                    "attempt": ladder.attempts, "cost_usd": round(cost, 6),
                },
            )  # fmt: skip
        return CallResult(
            message=message, usage=usage, model=ladder.model, request_id=message.get("_request_id"),
            attempts=ladder.attempts, cost_usd=cost, fell_back=ladder.fell_back, errors=ladder.errors,
        )  # fmt: skip


def _refused(e: BaseException) -> bool:
    """A refused connection (nothing listens): the thread's transport names it in the cause, the
    event loop's wraps it a few causes deep."""
    seen, depth = e.__cause__, 0
    while seen is not None and depth < 6:
        if isinstance(seen, ConnectionRefusedError) or "refused" in str(seen):
            return True
        seen, depth = seen.__cause__ or seen.__context__, depth + 1
    return False

"""`ModelClient`: the realtime Messages call on threads with one transport retry layer (tenacity,
invariant 6; the SDK's `max_retries=0`), bounded concurrency, client-side pacing and the overload
degradation ladder. Its twin on an event loop (tasks.api.aio.async_client) calls the same policy
steps, the methods below marked as shared.

- A request's slot (the pacer's window, and `settings.api.concurrency` when given) is held until
  `on_response` has persisted the answer: a crash re-sends at most the requests in flight (invariant 3).
- A 429's `retry-after` is this request's own retry wait and holds no other request.
- After `overloads_before_fallback` consecutive 529s the request goes to `settings.api.fallback_model`
  (tasks.api.ladder). Errors leave as `ApiCallError` (never a tenacity RetryError).
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from functools import cache, partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import SecretStr
from tenacity import RetryCallState, RetryError

from docmill.errors import SpendLimitReached
from docmill.prices import priced_usd, worst_usd
from docmill.sdk import Once, anthropic
from docmill.shutdown import SHUTDOWN
from tasks.api.answers import (
    CallLabel,
    OnPossiblyBilled,
    PossiblyBilled,
    StreamProgress,
    answer,
    paid_attempt,
    paid_record,
    read_timeout,
    stream_message,
    timed_out_after_sending,
)
from tasks.api.breaker import API_CAUSES, CircuitBreaker
from tasks.api.budget import Budget
from tasks.api.ladder import CallResult as CallResult  # re-exported: what a call returns
from tasks.api.ladder import Ladder, answered, call_error
from tasks.api.pacing import WINDOW_MAX, RateLimiter, Told
from tasks.api.retrying import (
    describe,
    failure,
    is_invalid_request,
    is_refused,
    is_spend_limit,
    spend_limit_error,
    transport,
    wait_seconds,
)
from tasks.api.usage import estimate_input_tokens, usage_of

if TYPE_CHECKING:
    from docmill.settings import Settings

OnResponse = Callable[[int, dict[str, Any]], object]
T = TypeVar("T")
Ending = tuple[BaseException, BaseException | None]  # the error a call ends with, and its cause


@cache
def endings() -> tuple[type[BaseException], ...]:
    """What a call's retry loop can end with that `_ended` turns into the call's error (the SDK's
    classes: asked for only when a call's loop ended in error, so the SDK is loaded by then)."""
    return (
        RetryError,
        anthropic.APIStatusError,
        anthropic.APIConnectionError,
        anthropic.APIResponseValidationError,
    )


class Closes(Protocol):  # this client's twin on an event loop (tasks.api.aio.AsyncModelClient)
    def close(self) -> None: ...


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
        rng: Callable[[], float] = random.random,
    ) -> None:
        api = settings.api
        key = api_key.get_secret_value() if isinstance(api_key, SecretStr) else api_key
        self.settings = settings
        self._sdk = Once(  # made at the first call: a run that sends nothing never imports the SDK
            lambda: anthropic.Anthropic(
                api_key=key, base_url=base_url, max_retries=0, timeout=api.timeout_seconds
            )
        )
        self.semaphore = threading.BoundedSemaphore(api.concurrency or WINDOW_MAX)
        self._aio: Closes | None = None  # this client on an event loop (tasks.api.aio.async_client)
        self._aio_lock = threading.Lock()
        self.concurrency = api.concurrency
        self._key, self._base_url = key, base_url
        self.limiter = RateLimiter(
            api.requests_per_minute,
            api.input_tokens_per_minute,
            api.output_tokens_per_minute,
            concurrency=api.concurrency,
            ramp_seconds=api.ramp_seconds,
            ramp_start=api.ramp_start,
            clock=clock,
            sleep=sleep,
            counts_cache_reads=api.input_limit_counts_cache_reads,
        )
        self._sleep, self._rng = sleep, rng
        self.budget = Budget(settings.cost.max_cost_usd)
        self.sleeps: list[float] = []  # transport backoff waits, for reports and tests
        self.stopped: SpendLimitReached | None = None  # a spend-limit refusal: nothing more is sent
        # the run's cost ledger (flows.entry sets it); without one they are only kept here
        self.on_possibly_billed: OnPossiblyBilled | None = None
        self.possibly_billed: list[PossiblyBilled] = []
        self.breaker = CircuitBreaker(api.circuit_breaker_calls)  # systemic failures stop the run

    def __repr__(self) -> str:
        return f"ModelClient(base_url={self._base_url!r}, concurrency={self.concurrency})"

    def close(self) -> None:
        with self._aio_lock:  # the twin as tasks.api.aio.close_twin ends it, then this client's pool
            twin, self._aio = self._aio, None
        if twin is not None:
            twin.close()
        if self._sdk.made:
            self._sdk.get().close()

    @property
    def sdk(self) -> anthropic.Anthropic:
        """The SDK client (max_retries=0): only call it through `run` or `call`."""
        return self._sdk.get()

    def run(self, fn: Callable[[], T]) -> T:
        """A free SDK call (count_tokens) through the one transport layer: retries and the concurrency
        bound; nothing is paced, reserved or billed."""
        return self._run(lambda _progress: fn(), None, CallLabel("call", "*", ""))

    def stream(self, body: dict[str, Any], *, label: CallLabel, betas: list[str] | None = None) -> Any:
        """One Messages call that may run long (long documents, long tasks, compaction), streamed so a
        long answer never meets the read timeout; the SDK's final Message (beta when `betas`). Paced,
        its worst case reserved under the cap, then settled. A timeout after sending is possibly billed
        and resent at most `api.timeout_resends` times; a stream that breaks is retried, each paid
        attempt recorded against `label` (`answers.paid_attempt`)."""
        return self._run(partial(stream_message, self.sdk, body, betas=betas), body, label)

    def _run(self, fn: Callable[[StreamProgress], T], body: dict[str, Any] | None, who: CallLabel) -> T:
        model = str(body["model"]) if body is not None else ""
        estimate = estimate_input_tokens(body) if body is not None else 0
        max_tokens = int(body.get("max_tokens") or 0) if body is not None else 0
        ladder = Ladder(model, None, 0, key=who.key, doc_id=who.doc_id, pass_name=who.pass_name)

        def once() -> T:
            SHUTDOWN.check()
            self.breaker.check()
            ladder.attempts += 1
            ladder.attempts_on_model += 1
            progress = StreamProgress()
            if body is None:  # a free call (count_tokens): not paced, reserved or billed
                with self.semaphore:
                    return fn(progress)
            ticket = self.limiter.acquire(estimate, max_tokens)
            used, billed = None, 0.0
            try:
                worst = self._worst_case_usd(model, estimate, max_tokens)
                hold = self.budget.reserve(worst)
                try:
                    try:
                        with self.semaphore:
                            result = fn(progress)
                    except Exception as e:
                        billed = self._failed_attempt(e, progress, ladder, worst, estimate, max_tokens, {})
                        raise
                    used = usage_of(result)
                    billed = self._cost(model, used) if used is not None else 0.0
                    return result
                finally:
                    self.budget.settle(hold, billed)
            finally:
                self.limiter.release(ticket, usage=used)

        retrying = transport(
            stop=partial(self._spent, ladder), wait=partial(self._wait, ladder), sleep=self._backoff
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
        progress = StreamProgress()
        try:
            worst = self._worst_case_usd(ladder.model, estimate, max_tokens)
            hold = self.budget.reserve(worst)
            billed = 0.0
            try:
                with self.semaphore:  # held until the answer is persisted: invariant 3
                    SHUTDOWN.check()  # again: a signal or a trip may have come while this request waited
                    self.breaker.admit(SHUTDOWN.check)  # a streak near the threshold: one at a time
                    try:  # streamed when max_tokens reaches `api.stream_min_max_tokens`
                        timeout = read_timeout(body, self.settings.api)
                        data, request_id, headers = answer(self.sdk, body, progress, timeout)
                    except Exception as e:
                        self._failed(e, ladder, told)
                        billed = self._failed_attempt(e, progress, ladder, worst, estimate, max_tokens, told)
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
        """Before an attempt (`check_stops`, counted): the ladder model's body, estimate, max_tokens."""
        self.check_stops()
        ladder.attempts += 1
        ladder.attempts_on_model += 1
        body = {**request, "model": ladder.model}
        known = ladder.estimate if ladder.model == request["model"] else None  # measured by the caller
        return body, estimate_input_tokens(body) if known is None else known, int(body["max_tokens"])

    def check_stops(self) -> None:
        """Nothing is sent after a spend-limit refusal, a signal (SIGINT/SIGTERM) or a trip."""
        if self.stopped is not None:
            raise self.stopped
        SHUTDOWN.check()
        self.breaker.check()

    def _failed(self, e: Exception, ladder: Ladder, told: Told) -> None:  # what pacer, ladder, breaker learn
        if isinstance(e, anthropic.APIStatusError):
            told["headers"] = e.response.headers
            told["throttled"] = e.status_code == 429
            ladder.failed(e)
        elif isinstance(e, anthropic.APIConnectionError):
            ladder.failed(e)
            if is_refused(e):
                self.breaker.api("connection_refused", describe(e))

    def _failed_attempt(
        self,
        exc: BaseException,
        progress: StreamProgress,
        ladder: Ladder,
        worst: float,
        estimate: int,
        max_tokens: int,
        told: Told,
    ) -> float:
        """What a failed per-call attempt may have cost (0: nothing), recorded when it is not 0; a
        timeout after sending counts against `api.timeout_resends`."""
        ladder.timeouts += timed_out_after_sending(exc)
        price = partial(priced_usd, ladder.model)
        paid = paid_attempt(exc, progress, worst_usd=worst, max_tokens=max_tokens, price=price)
        if paid is None:
            return 0.0
        if not paid.possibly and paid.usage is not None:
            told["usage"] = paid.usage  # the pacer learns what it really took
        label = CallLabel(ladder.pass_name, ladder.doc_id, ladder.key)
        entry = paid_record(label, ladder.attempts, ladder.model, estimate, max_tokens, paid, time.time())
        self.possibly_billed.append(entry)
        if self.on_possibly_billed is not None:
            self.on_possibly_billed(entry)
        return paid.usd  # the cap keeps what it may have cost

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

    def _wait(self, ladder: Ladder, state: RetryCallState) -> float:
        """The wait after the last attempt's error (retrying.wait_seconds), backing off by the attempts
        on the ladder's model (the count starts again after a fallback)."""
        exc, api = failure(state), self.settings.api
        if exc is None:
            return 0.0
        attempt = max(ladder.attempts_on_model, 1)
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
        retrying = transport(
            stop=partial(self._spent, ladder),
            wait=partial(self._wait, ladder),
            sleep=self._backoff,
            reraise=False,
        )
        try:
            message = retrying(self._send, request, ladder, on_response)
        except endings() as e:
            error, cause = self._ended(e, ladder)
            raise error from cause
        return self._result(message, ladder, started, purpose, prompt_version)

    # ---- one call's policy around its attempts: shared with tasks.api.aio.AsyncModelClient --------

    def _ladder(self, request: dict[str, Any], key: str, doc_id: str, pass_name: str) -> Ladder:
        api = self.settings.api
        fallback, overloads = api.fallback_model, api.overloads_before_fallback
        return Ladder(request["model"], fallback, overloads, key=key, doc_id=doc_id, pass_name=pass_name)

    def _spent(self, ladder: Ladder, _state: RetryCallState | None = None) -> bool:
        """No attempt more: the model's attempts are spent, or a request that timed out after it was
        sent (it may be billed) was already resent `timeout_resends` times."""
        api = self.settings.api
        return ladder.attempts_on_model >= api.max_attempts or ladder.timeouts > api.timeout_resends

    def _ended(self, e: BaseException, ladder: Ladder) -> Ending:
        """The error a call ends with when its retry loop gives up on `e` (one of `endings()`; tenacity's
        `RetryError` when a retryable failure's attempts are spent), and its cause: a spend-limit refusal
        stops the run (no document is marked failed); 401-404 feed the breaker; everything else is an
        `ApiCallError`."""
        if isinstance(e, RetryError):
            last = e.last_attempt.exception()
            return call_error(last, ladder, "transport_exhausted"), last
        if isinstance(e, anthropic.APIResponseValidationError):
            self.breaker.api("not_a_message", str(e))
            return call_error(e, ladder, "api_error:not_a_message"), e
        if isinstance(e, anthropic.APIStatusError) and is_spend_limit(e):
            self.stopped = spend_limit_error(e)
            return self.stopped, e
        status = getattr(e, "status_code", None)
        kind = f"api_error:{status}" if status is not None else "transport_exhausted"
        if status in API_CAUSES:
            self.breaker.api(API_CAUSES[status], describe(e))
            self.breaker.check()  # tripped by this call (a 404 at once): the run stops, no document fails
        elif is_invalid_request(e):  # the same 400 for every document: systemic
            self.breaker.invalid_request(describe(e), ladder.doc_id)
        return call_error(e, ladder, kind), e

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
        cost = self._cost(ladder.model, message.get("usage"))
        return answered(message, ladder, started, purpose, prompt_version, cost)

"""`ModelClient`: the realtime Messages call with one transport retry layer (tenacity, invariant 6;
the SDK's `max_retries=0`), client-side pacing, the run's cost cap, the overload degradation ladder
and the circuit breaker. Every request goes out from one event loop per client (`AsyncModelClient`,
`ModelClient.aio`), so one process keeps as many requests in flight as the pacer's window asks
(Little's law: hundreds at a tier-4 limit) without a thread each. The per-file pass awaits
`AsyncModelClient.call` there; threads (integration, batch repairs, long documents, compaction) call
`ModelClient.call`, `.stream` and `.count_tokens`, which run the same coroutines on the loop and wait
for them: one implementation sends, retries, records and stops for both.

- A request's slot (its place in the pacer's window, whose ceiling is `settings.api.concurrency`
  when given, and its budget reservation) is held until `on_response` has persisted the answer, on
  an I/O thread of the loop: a crash re-sends at most the requests in flight (invariant 3).
- A 429's `retry-after` is this request's own retry wait and holds no other request.
- After `overloads_before_fallback` consecutive 529s the request goes to `settings.api.fallback_model`
  (tasks.api.ladder). Errors leave `call` as `ApiCallError` (never a tenacity RetryError).
- Nothing blocks the loop: `tasks.api.aio.Gate` admits requests to the pacer first come, first
  served, and the budget and the breaker are asked again after answers; blocking work (the store, the
  gate's CPU) runs on the loop's I/O threads (tasks.api.loop_thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from functools import cache, partial
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import SecretStr
from tenacity import RetryCallState, RetryError

from docmill.errors import SpendLimitReached
from docmill.prices import priced_usd, worst_usd
from docmill.sdk import anthropic, httpx2
from docmill.shutdown import SHUTDOWN
from tasks.api.aio import Changes, Gate, Occupancy, loop_sleep
from tasks.api.answers import (
    CallLabel,
    OnPossiblyBilled,
    PossiblyBilled,
    StreamProgress,
    paid_attempt,
    paid_record,
    read_timeout,
    timed_out_after_sending,
)
from tasks.api.breaker import API_CAUSES, CircuitBreaker
from tasks.api.budget import Budget
from tasks.api.ladder import CallResult as CallResult  # re-exported: what a call returns
from tasks.api.ladder import Ladder, answered, call_error
from tasks.api.loop_thread import LoopThread
from tasks.api.pacing import WINDOW_MAX, RateLimiter, Ticket, Told
from tasks.api.retrying import (
    describe,
    failure,
    is_invalid_request,
    is_refused,
    is_spend_limit,
    spend_limit_error,
    transport_async,
    wait_seconds,
)
from tasks.api.sse import read_answer, stream_message
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


class ModelClient:
    """One per process; share it between threads. Its policy state (pacer, budget, breaker, what
    may have been billed) outlives its event loop: `close` ends the loop, a later call makes a new one."""

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
        self._aio: AsyncModelClient | None = None  # made at the first call (`aio`)
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

    @property
    def aio(self) -> AsyncModelClient:
        """This client on its event loop, made on first use (again after `close`)."""
        with self._aio_lock:
            if self._aio is None:
                self._aio = AsyncModelClient(self)
            return self._aio

    def close(self) -> None:
        """The event loop ends: its connections, its thread and I/O threads, once the last thread
        waiting on it returns (`LoopThread.close`). The client goes on (a next call makes a new one)."""
        with self._aio_lock:
            aio, self._aio = self._aio, None
        if aio is not None:
            aio.close()

    # ---- the faces for threads: each runs one coroutine of `AsyncModelClient` on the loop --------

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
        """Send one Messages request (`AsyncModelClient.call`); `on_response(attempt, message)` runs
        the moment it answers, before the request gives up its slot. Every answered call leaves one
        structured log line (docmill.api, INFO)."""
        aio = self.aio
        asked = aio.call(
            request,
            key=key,
            doc_id=doc_id,
            pass_name=pass_name,
            on_response=on_response,
            purpose=purpose,
            prompt_version=prompt_version,
        )
        return aio.loop.run(asked)

    def stream(self, body: dict[str, Any], *, label: CallLabel, betas: list[str] | None = None) -> Any:
        """One Messages call that may run long (long documents, long tasks, compaction), streamed
        (`AsyncModelClient.stream`): the SDK's final Message (beta when `betas`)."""
        aio = self.aio
        return aio.loop.run(aio.stream(body, label=label, betas=betas))

    def count_tokens(self, body: dict[str, Any], betas: list[str] | None = None) -> Any:
        """The SDK's count of `body`'s input tokens (beta when `betas`), `AsyncModelClient.count_tokens`."""
        aio = self.aio
        return aio.loop.run(aio.count_tokens(body, betas))

    # ---- one attempt's policy, step by step (AsyncModelClient sends) ----------------------------

    def _open(self, request: dict[str, Any], ladder: Ladder) -> tuple[dict[str, Any], int, int]:
        """Before an attempt (`begin`): the ladder model's body, estimate, max_tokens."""
        self.begin(ladder)
        body = {**request, "model": ladder.model}
        known = ladder.estimate if ladder.model == request["model"] else None  # measured by the caller
        return body, estimate_input_tokens(body) if known is None else known, int(body["max_tokens"])

    def begin(self, ladder: Ladder) -> None:
        """Every attempt of a call, a stream or a count: nothing is sent after a stop; counted."""
        self.check_stops()
        ladder.attempts += 1
        ladder.attempts_on_model += 1

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

    # ---- one call's policy around its attempts ----------------------------------------------

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


Then = Callable[[dict[str, Any]], object]


class Slot:
    """A request's place in the pacer's window and its budget reservation, given back once: on the
    I/O thread as soon as its answer is persisted (`answered`), else on the loop when the
    attempt ends. Then the waiters on the loop look again."""

    def __init__(self, aio: AsyncModelClient, ticket: Ticket) -> None:
        self.aio, self.client, self.ticket = aio, aio.client, ticket
        self.told: Told = {}
        self.hold: float | None = None  # the budget's reservation, once made
        self.billed = 0.0
        self._given = False

    def give_back(self) -> None:
        if self._given:
            return
        self._given = True
        try:
            if self.hold is not None:
                self.client.budget.settle(self.hold, self.billed)
        finally:
            self.client.limiter.release(self.ticket, **self.told)
            if threading.get_ident() == self.aio.loop.thread.ident:
                self.aio.changes.notify()
            else:
                self.aio.loop.loop.call_soon_threadsafe(self.aio.changes.notify)

    def answered(
        self, on_response: OnResponse | None, then: Then | None, attempt: int, data: dict[str, Any]
    ) -> None:
        """On an I/O thread: persist the answer, give back the slot, then the work that follows."""
        if on_response is not None:
            on_response(attempt, data)  # persisted before the slot is given back: invariant 3
        self.give_back()
        if then is not None:
            then(data)


def _close_sdk(loop: LoopThread, sdk: anthropic.AsyncAnthropic) -> None:
    """Close the SDK client's connections on its loop (once; at most a few seconds; from the loop's
    own thread, where a collection may run it, without waiting)."""
    if not loop.loop.is_running():
        return
    closing = asyncio.run_coroutine_threadsafe(sdk.close(), loop.loop)
    if threading.get_ident() != loop.thread.ident:
        with contextlib.suppress(Exception):
            closing.result(timeout=5)


class AsyncModelClient:
    """The one implementation that sends: `ModelClient`'s calls as coroutines on its event loop
    (one per client: `ModelClient.aio`), each attempt taking `ModelClient`'s policy steps in turn."""

    def __init__(self, client: ModelClient) -> None:
        self.client = client
        self.loop = LoopThread()
        self.changes = Changes()
        self.occupancy = Occupancy()
        self._asleep = loop_sleep(client._sleep)
        self.gate = Gate(client.limiter, self.changes, self._asleep, client.check_stops)
        # the unpaced calls (count_tokens) held to the same ceiling as requests in flight
        self._free = asyncio.Semaphore(client.settings.api.concurrency or WINDOW_MAX)
        self._sdk: anthropic.AsyncAnthropic | None = None
        self._close_sdk: weakref.finalize[Any, Any] | None = None

    @property
    def sdk(self) -> anthropic.AsyncAnthropic:
        """The SDK client, made on the loop when a request first needs it (a pass whose documents
        all have their answers in the ledger never imports the SDK). Read it on the loop only."""
        if self._sdk is None:
            self._sdk = self._make_sdk()
            # a client dropped without close() (a signal's exit, a script) still closes its connections
            # (aiohttp logs an error for a session left open at exit)
            self._close_sdk = weakref.finalize(self, _close_sdk, self.loop, self._sdk)
        return self._sdk

    def _make_sdk(self) -> anthropic.AsyncAnthropic:
        c = self.client
        api = c.settings.api
        # as many connections as requests in flight (the SDK's default pool stops at 1,000; aiohttp's
        # at 100 when given none: the pacer's window is the bound)
        keep = api.concurrency or 1000
        http: httpx2.AsyncClient
        if api.http_client == "aiohttp":
            limits = httpx2.Limits(
                max_connections=api.concurrency or WINDOW_MAX, max_keepalive_connections=keep
            )
            http = anthropic.DefaultAioHttpClient(limits=limits, timeout=api.timeout_seconds)
        else:
            limits = httpx2.Limits(max_connections=None, max_keepalive_connections=keep)
            http = anthropic.DefaultAsyncHttpxClient(limits=limits, timeout=api.timeout_seconds)
        return anthropic.AsyncAnthropic(
            api_key=c._key, base_url=c._base_url, max_retries=0, timeout=api.timeout_seconds, http_client=http
        )

    def close(self) -> None:
        self.loop.close(before=lambda: self._close_sdk() if self._close_sdk is not None else None)

    async def _backoff(self, seconds: float) -> None:
        self.client.sleeps.append(seconds)
        await self._asleep(seconds)

    async def _reserve(self, worst: float) -> float:
        """The budget's reservation of `worst`, asked again after answers while others stand in the way."""
        while (hold := self.client.budget.try_reserve(worst)) is None:
            await self.changes.wait(1.0)
        return hold

    # ---- the call ------------------------------------------------------------------------------

    async def call(
        self,
        request: dict[str, Any],
        *,
        key: str,
        doc_id: str,
        pass_name: str,
        on_response: OnResponse | None = None,
        purpose: str = "call",
        prompt_version: str | None = None,
        estimate: int | None = None,
        then: Then | None = None,
    ) -> CallResult:
        """Send one Messages request: the transport retry loop, the fallback ladder, the errors, one
        log line and the result; `estimate`: the request's input-token estimate when the caller
        measured it already. `on_response(attempt, message)` is blocking work (it persists the
        answer): it runs on an I/O thread before the request gives up its slot (invariant 3);
        `then(message)`, the blocking work after it (the gate, the ledger), runs in the same I/O step
        once the slot is given back, so the window does not wait for it."""
        c = self.client
        started = time.monotonic()
        ladder = c._ladder(request, key, doc_id, pass_name)
        ladder.estimate = estimate
        stop, wait = partial(c._spent, ladder), partial(c._wait, ladder)
        retrying = transport_async(stop=stop, wait=wait, sleep=self._backoff, reraise=False)
        try:
            message: dict[str, Any] = await retrying(self._send, request, ladder, on_response, purpose, then)
        except endings() as e:  # anything else (a signal, a trip, the cap, a bug) leaves as it is
            error, cause = c._ended(e, ladder)
            raise error from cause
        return c._result(message, ladder, started, purpose, prompt_version)

    async def _send(
        self,
        request: dict[str, Any],
        ladder: Ladder,
        on_response: OnResponse | None,
        purpose: str,
        then: Then | None = None,
    ) -> Any:
        c = self.client
        body, estimate, max_tokens = c._open(request, ladder)
        # a document's follow-up (a repair, a retry after truncation, a transport retry) goes first
        follow_up = purpose != "first" or ladder.attempts > 1
        slot = Slot(self, await self.gate.acquire(estimate, max_tokens, follow_up=follow_up))
        progress = StreamProgress()
        try:
            worst = c._worst_case_usd(ladder.model, estimate, max_tokens)
            slot.hold = await self._reserve(worst)
            SHUTDOWN.check()  # again: a signal or a trip may have come while this request waited
            # the breaker asked again after answers (a streak near its threshold: one at a time)
            while not c.breaker.try_admit(SHUTDOWN.check):
                await self.changes.wait(0.1)
            try:
                timeout = read_timeout(body, c.settings.api)
                stream = timeout is None
                data, request_id, headers = await read_answer(
                    self.sdk, body, stream=stream, progress=progress, timeout=timeout
                )
            except Exception as e:  # what pacer, ladder, breaker learn; what it may have cost (paid_attempt)
                c._failed(e, ladder, slot.told)
                slot.billed = c._failed_attempt(e, progress, ladder, worst, estimate, max_tokens, slot.told)
                raise
            finally:
                c.breaker.done()
            slot.billed = c._answered(data, request_id, headers, ladder, slot.told)
            if on_response is not None or then is not None:
                await self.loop.io(slot.answered, on_response, then, ladder.attempts, data)
        finally:  # a 429's retry-after delays only this request (the retry wait), never the others
            slot.give_back()
        return data

    # ---- long calls, streamed, and the free count ----------------------------------------------

    async def stream(self, body: dict[str, Any], *, label: CallLabel, betas: list[str] | None = None) -> Any:
        """One Messages call that may run long (long documents, long tasks, compaction), streamed so a
        long answer never meets the read timeout; the SDK's final Message (beta when `betas`). Paced,
        its worst case reserved under the cap, then settled; no fallback, and errors leave as the
        SDK's. A timeout after sending is possibly billed and resent at most `api.timeout_resends`
        times; a stream that breaks is retried, each paid attempt recorded against `label`
        (`answers.paid_attempt`)."""
        model, max_tokens = str(body["model"]), int(body.get("max_tokens") or 0)
        ladder = Ladder(model, None, 0, key=label.key, doc_id=label.doc_id, pass_name=label.pass_name)
        attempt = partial(self._stream_once, body, betas, ladder, estimate_input_tokens(body), max_tokens)
        return await self._retried(ladder, attempt)

    async def _stream_once(
        self, body: dict[str, Any], betas: list[str] | None, ladder: Ladder, estimate: int, max_tokens: int
    ) -> Any:
        c = self.client
        self.client.begin(ladder)
        slot = Slot(self, await self.gate.acquire(estimate, max_tokens, follow_up=ladder.attempts > 1))
        progress = StreamProgress()
        try:
            worst = c._worst_case_usd(ladder.model, estimate, max_tokens)
            slot.hold = await self._reserve(worst)
            try:
                final = await stream_message(self.sdk, body, progress, betas=betas)
            except Exception as e:  # what pacer, ladder, breaker learn; what it may have cost
                c._failed(e, ladder, slot.told)
                slot.billed = c._failed_attempt(e, progress, ladder, worst, estimate, max_tokens, slot.told)
                raise
            used = usage_of(final)
            if used is not None:
                slot.told["usage"] = used
                slot.billed = c._cost(ladder.model, used)
        finally:
            slot.give_back()
        return final

    async def count_tokens(self, body: dict[str, Any], betas: list[str] | None = None) -> Any:
        """A free SDK call (count_tokens) through the one transport layer: retried, held to the
        concurrency ceiling; nothing is paced, reserved or billed."""
        ladder = Ladder("", None, 0, key="", doc_id="*", pass_name="call")
        return await self._retried(ladder, partial(self._count_once, body, betas, ladder))

    async def _count_once(self, body: dict[str, Any], betas: list[str] | None, ladder: Ladder) -> Any:
        self.client.begin(ladder)
        async with self._free:
            if betas:
                return await self.sdk.beta.messages.count_tokens(betas=betas, **body)
            return await self.sdk.messages.count_tokens(**body)

    async def _retried(self, ladder: Ladder, attempt: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """`attempt` through the transport retry loop (`stream`, `count_tokens`): the SDK's error as
        it is once no retry helps, a spend-limit refusal as the error that stops the run."""
        c = self.client
        retrying = transport_async(
            stop=partial(c._spent, ladder), wait=partial(c._wait, ladder), sleep=self._backoff
        )
        try:
            return await retrying(attempt)
        except anthropic.APIStatusError as e:
            if is_spend_limit(e):
                raise spend_limit_error(e) from e
            raise

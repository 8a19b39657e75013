"""The realtime Messages call on an event loop: `AsyncModelClient`, the twin of `ModelClient.call`
that the per-file pass uses, so one process keeps as many requests in flight as the pacer's window
asks (Little's law: hundreds at a tier-4 limit) without a thread each.

One event loop per `ModelClient` runs in its own thread (tasks.api.loop_thread); blocking work (the
store, the gate's CPU) runs on its I/O threads. Every policy is `ModelClient`'s own, called step by
step (the `RateLimiter`, `Budget` and `CircuitBreaker` decisions, `_open`, `_failed_attempt`,
`_answered`, `_spent`, `_wait`, `_ended`, `_result`), so a change applies to threads and loop alike.
Only the waiting differs: `Gate` admits requests first come, first served, and the budget and the
breaker are asked again after each answer instead of blocking a thread. `on_response` (persisting
the answer, invariant 3) runs on an I/O thread while the request still holds its slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from docmill.sdk import anthropic, httpx2
from docmill.shutdown import SHUTDOWN
from tasks.api.answers import StreamProgress, read_timeout
from tasks.api.client import CallResult, ModelClient, OnResponse, endings
from tasks.api.loop_thread import LoopThread
from tasks.api.pacing import WINDOW_FULL, WINDOW_MAX, RateLimiter, Ticket, Told
from tasks.api.retrying import transport_async
from tasks.api.sse import read_answer

if TYPE_CHECKING:
    from tasks.api.ladder import Ladder

T = TypeVar("T")
WAKE_SECONDS = 0.05  # a waiter looks again at least this often (a thread's call may have answered)
Lane = deque[tuple[asyncio.Future[Ticket], int, int]]


def _close_sdk(loop: LoopThread, sdk: anthropic.AsyncAnthropic) -> None:
    """Close the SDK client's connections on its loop (once; at most a few seconds; from the loop's
    own thread, where a collection may run it, without waiting)."""
    if not loop.loop.is_running():
        return
    closing = asyncio.run_coroutine_threadsafe(sdk.close(), loop.loop)
    if threading.get_ident() != loop.thread.ident:
        with contextlib.suppress(Exception):
            closing.result(timeout=5)


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


class Occupancy:
    """Work items (documents) handed to the loop and not finished yet, counted across threads, so a
    feeder can wait until the loop wants more (tasks.per_file.realtime.feed)."""

    def __init__(self) -> None:
        self.active = 0
        self._changed = threading.Condition()

    def enter(self, n: int = 1) -> None:
        with self._changed:
            self.active += n

    def leave(self, n: int = 1) -> None:
        with self._changed:
            self.active -= n
            self._changed.notify_all()

    def wait_below(self, limit: Callable[[], int], timeout: float = 1.0) -> bool:
        """Wait (at most `timeout`) until fewer than `limit()` items are active; True if so."""
        with self._changed:
            if self.active < limit():
                return True
            self._changed.wait(timeout)
            return self.active < limit()


class Changes:
    """Waiters for 'something finished' on the loop (an answer freed a slot, settled a budget
    reservation, ended a breaker streak); each also looks again after `WAKE_SECONDS`."""

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    def notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def wait(self, timeout: float = WAKE_SECONDS) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(waiter, timeout)


class Gate:
    """First come, first served admission to the pacer on the loop, follow-ups (a document's repair
    or retry) ahead of first requests, so a started document finishes before new ones start. While
    nobody waits a request asks `RateLimiter.try_acquire` at once; otherwise it queues and one pump
    asks for the head of the queue, sleeping what the pacer says or waiting for an answer when the
    window is full. `stop` runs before each admission: once it raises (a signal, a trip, a
    spend-limit refusal) every waiting request gets that error at once instead of waiting its turn."""

    def __init__(
        self,
        limiter: RateLimiter,
        changes: Changes,
        asleep: Callable[[float], Awaitable[None]],
        stop: Callable[[], None],
    ) -> None:
        self.limiter, self.changes, self.asleep, self.stop = limiter, changes, asleep, stop
        self._lanes: tuple[Lane, Lane] = (deque(), deque())  # follow-ups, first requests
        self._pump: asyncio.Task[None] | None = None

    async def acquire(self, input_tokens: int, max_tokens: int, *, follow_up: bool = False) -> Ticket:
        if not (self._lanes[0] or self._lanes[1]):
            self.stop()
            got = self.limiter.try_acquire(input_tokens, max_tokens)
            if isinstance(got, Ticket):
                return got
        future: asyncio.Future[Ticket] = asyncio.get_running_loop().create_future()
        self._lanes[0 if follow_up else 1].append((future, input_tokens, max_tokens))
        if self._pump is None or self._pump.done():
            self._pump = asyncio.get_running_loop().create_task(self._run())
        return await future

    async def _run(self) -> None:
        waited = 0.0
        while lane := self._lanes[0] or self._lanes[1]:
            future, input_tokens, max_tokens = lane[0]
            if future.done():  # cancelled while it waited
                lane.popleft()
                continue
            try:
                self.stop()
            except BaseException as e:
                for each in self._lanes:
                    while each:
                        waiting = each.popleft()[0]
                        if not waiting.done():
                            waiting.set_exception(e)
                return
            got = self.limiter.try_acquire(input_tokens, max_tokens)
            if isinstance(got, Ticket):
                lane.popleft()
                got.waited, waited = waited, 0.0
                future.set_result(got)
            elif got == WINDOW_FULL:
                await self.changes.wait()
            else:
                slept = await self._nap(got)
                self.limiter.stats.waits.append(slept)
                waited += slept

    async def _nap(self, seconds: float) -> float:
        """Wait what the pacer said, or less: on the real clock an answer ends the wait early (its
        headers may raise the limits: the first answers replace the assumed ones, and a run that
        waited on those would idle until its turn under limits it no longer has)."""
        if self.asleep is not asyncio.sleep:
            await self.asleep(seconds)
            return seconds
        loop = asyncio.get_running_loop()
        start = loop.time()
        await self.changes.wait(seconds)
        return loop.time() - start


def loop_sleep(sleep: Callable[[float], None]) -> Callable[[float], Awaitable[None]]:
    """The loop's sleep for a client given `sleep`: asyncio's for the real one, else the given
    (fake) sleep and a turn of the loop, so tests that own the clock own it here too."""
    if sleep is time.sleep:
        return asyncio.sleep

    async def fake(seconds: float) -> None:
        sleep(seconds)
        await asyncio.sleep(0)

    return fake


def async_client(client: ModelClient) -> AsyncModelClient:
    """The client's twin on its event loop, made on first use (one per `ModelClient`, which closes it)."""
    with client._aio_lock:
        if client._aio is None:
            client._aio = AsyncModelClient(client)
        twin = client._aio
    assert isinstance(twin, AsyncModelClient)
    return twin


def close_twin(client: ModelClient) -> None:
    """The client's twin ends: its connections, event loop and I/O threads, once the last thread
    waiting on the loop returns (`LoopThread.close`). The client goes on (a next call makes a new one)."""
    with client._aio_lock:
        twin, client._aio = client._aio, None
    if twin is not None:
        twin.close()


class AsyncModelClient:
    """`ModelClient.call` on its event loop; made by `async_client` (one per client)."""

    def __init__(self, client: ModelClient) -> None:
        self.client = client
        self.loop = LoopThread()
        self.changes = Changes()
        self.occupancy = Occupancy()
        self._asleep = loop_sleep(client._sleep)
        self.gate = Gate(client.limiter, self.changes, self._asleep, client.check_stops)
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
        """`ModelClient.call` on the loop: the same retry loop, ladder, errors, log line and result;
        `estimate`: the request's input-token estimate when the caller measured it already.
        `on_response(attempt, message)` is blocking work (it persists the answer): it runs on an
        I/O thread before the request gives up its slot (invariant 3); `then(message)`, the blocking
        work after it (the gate, the ledger), runs in the same I/O step once the slot is given back,
        so the window does not wait for it."""
        c = self.client
        started = time.monotonic()
        ladder = c._ladder(request, key, doc_id, pass_name)
        ladder.estimate = estimate
        stop, wait = partial(c._spent, ladder), partial(c._wait, ladder)
        retrying = transport_async(stop=stop, wait=wait, sleep=self._backoff, reraise=False)
        try:  # the thread's policy (ModelClient.call): the same stop, wait and endings
            message: dict[str, Any] = await retrying(self._send, request, ladder, on_response, purpose, then)
        except endings() as e:  # anything else (a signal, a trip, the cap, a bug) leaves as it is
            error, cause = c._ended(e, ladder)
            raise error from cause
        return c._result(message, ladder, started, purpose, prompt_version)

    async def _backoff(self, seconds: float) -> None:
        self.client.sleeps.append(seconds)
        await self._asleep(seconds)

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
            # the budget and the breaker (a streak near its threshold: one at a time) asked again after answers
            while (hold := c.budget.try_reserve(worst)) is None:
                await self.changes.wait(1.0)
            slot.hold = hold
            SHUTDOWN.check()  # again: a signal or a trip may have come while this request waited
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

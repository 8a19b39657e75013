"""Waiting on the client's event loop (tasks.api.client.AsyncModelClient) without blocking it: `Gate`
admits requests to the pacer first come, first served (a document's follow-ups first); `Changes`
wakes the requests that wait for an answer (a slot in the window, a budget reservation settled, a
breaker streak ended), so the budget and the breaker are asked again after answers; `Occupancy`
lets a feeder thread wait until the loop wants more work; `loop_sleep` is the loop's sleep for a
client's (possibly fake) `sleep`, so tests that own the clock own it on the loop too.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable

from tasks.api.pacing import WINDOW_FULL, RateLimiter, Ticket

WAKE_SECONDS = 0.05  # a waiter looks again at least this often (a share set from another thread)
Lane = deque[tuple[asyncio.Future[Ticket], int, int]]


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

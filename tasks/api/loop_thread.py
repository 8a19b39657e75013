"""`LoopThread`: an event loop in its own thread that other threads hand coroutines to and wait on,
with a small pool of I/O threads for the blocking work its coroutines need (tasks.api.client)."""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from docmill.errors import DocmillError

T = TypeVar("T")
IO_THREADS = 16  # store writes and the gate of answers, off the loop


class LoopThread:
    """An event loop running in its own daemon thread, and the I/O threads its coroutines use.
    `close` while other threads still wait in `run` (a flow's chunk tasks finishing after the run
    stopped) is carried out when the last of them returns: none is left waiting on a stopped loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pool = ThreadPoolExecutor(IO_THREADS, thread_name_prefix="docmill-io")
        self.thread = threading.Thread(target=self.loop.run_forever, name="docmill-loop", daemon=True)
        self.thread.start()
        self._users = 0  # threads waiting in `run`
        self._closing: Callable[[], None] | None = None  # a close asked while some were
        self._closed = False
        self._lock = threading.Lock()
        # a client dropped without close() (tests, scripts) does not leave its thread behind
        weakref.finalize(self, _stop_loop, self.loop, self.pool)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop and wait for it on this thread (never the loop's own: it would
        wait for itself)."""
        with self._lock:
            if threading.get_ident() == self.thread.ident:
                coro.close()
                raise DocmillError("a blocking call on the client's event loop would wait for itself")
            if self._closed:
                coro.close()
                raise DocmillError("the client's event loop is closed: its run has ended")
            self._users += 1
        try:
            return asyncio.run_coroutine_threadsafe(coro, self.loop).result()
        finally:
            with self._lock:
                self._users -= 1
                closing = self._closing if self._users == 0 else None
                if closing:
                    self._closing, self._closed = None, True
            if closing:
                closing()

    async def io(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on an I/O thread, awaited on the loop."""
        return await self.loop.run_in_executor(self.pool, fn, *args)

    def close(self, before: Callable[[], None] | None = None) -> None:
        """`before()` (closing what runs on the loop), then the loop and its I/O threads end: now,
        or when the last thread waiting in `run` returns."""

        def closing() -> None:
            try:
                if before is not None:
                    before()
            finally:
                self._stop()

        with self._lock:
            if self._users:
                self._closing = closing
                return
            self._closed = True
        closing()

    def _stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
        self.pool.shutdown(wait=True)


def _stop_loop(loop: asyncio.AbstractEventLoop, pool: ThreadPoolExecutor) -> None:
    if loop.is_running():
        loop.call_soon_threadsafe(loop.stop)
    pool.shutdown(wait=False)

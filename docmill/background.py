"""`every(seconds, tick, name=...)`: run `tick` on a daemon thread every `seconds` while a block runs
(lease and claim renewals). An exception from `tick` is the tick's own to log: the thread goes on."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

JOIN_SECONDS = 5.0  # at the block's end, the time a tick in progress gets to finish


@contextmanager
def every(seconds: float, tick: Callable[[], None], *, name: str) -> Iterator[None]:
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(seconds):
            tick()

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=JOIN_SECONDS)

"""Graceful shutdown (invariant 12: an interruption is not an outcome).

The first SIGINT or SIGTERM sets one process-wide flag. From that moment no new request is sent
(`ModelClient` checks before sending and again inside its concurrency slot; the batch engine before
creating a batch and while following one): the call raises `Interrupted`, which no document turns
into an outcome. Requests already in flight get `settings.shutdown_grace_seconds` to answer and are
persisted as usual; the run is marked `stopped` and the CLI exits 130 (SIGINT) or 143 (SIGTERM),
printing the run id and `docmill resume RUN_ID`. If the in-flight work outlives the grace period, or
a second signal arrives, the process leaves at once with the same line (everything persisted so far
is kept; a resume re-sends at most the requests that were in flight: invariant 3).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

from docmill.errors import Interrupted
from docmill.logs import current_run

EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}


class Shutdown:
    """The process-wide stop flag (one instance, `SHUTDOWN`)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal_name = ""

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def request(self, signal_name: str) -> None:
        if not self._event.is_set():
            self.signal_name = signal_name
            self._event.set()

    def check(self) -> None:
        """Raise `Interrupted` once a stop was requested (called before anything is sent)."""
        if self._event.is_set():
            raise Interrupted(
                f"{self.signal_name} received: no new request is sent",
                hint="`docmill resume RUN_ID` continues the run",
                signal_name=self.signal_name,
                run_id=current_run(),
            )

    def reset(self) -> None:
        """Clear the flag (tests, and a process that runs again after an interruption)."""
        self._event.clear()
        self.signal_name = ""


SHUTDOWN = Shutdown()


def resume_line(signal_name: str, run_id: str | None) -> str:
    """The one line an interrupted run ends with."""
    if run_id:
        return f"docmill: interrupted ({signal_name}); run {run_id} stopped, `docmill resume {run_id}` continues it"
    return f"docmill: interrupted ({signal_name}) before a run started; nothing to resume"


def _leave(signal_name: str) -> None:
    print(resume_line(signal_name, current_run()), file=sys.stderr, flush=True)
    os._exit(EXIT_CODES.get(signal_name, 130))


def install(grace_seconds: float) -> Callable[[], None]:
    """Handle SIGINT and SIGTERM as above (main thread only; elsewhere a no-op). Returns a function
    that puts the previous handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    timers: list[threading.Timer] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if SHUTDOWN.requested:  # a second signal: leave now
            _leave(name)
        SHUTDOWN.request(name)
        print(
            f"docmill: {name}: no new request is sent; finishing the ones in flight (at most "
            f"{grace_seconds:.0f} s; {name} again leaves at once)",
            file=sys.stderr,
            flush=True,
        )
        timer = threading.Timer(grace_seconds, _leave, args=(name,))
        timer.daemon = True
        timer.start()
        timers.append(timer)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        """The previous handlers back; a grace timer still running is canceled (the work ended)."""
        for timer in timers:
            timer.cancel()
        for s, h in previous.items():
            signal.signal(s, h)

    return restore

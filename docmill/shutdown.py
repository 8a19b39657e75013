"""Graceful shutdown (invariant 12: an interruption is not an outcome).

The first SIGINT or SIGTERM sets one process-wide flag. From that moment no new request is sent
(`ModelClient` checks before sending and again once its request is admitted; the batch engine before
creating a batch and while following one): the call raises `Interrupted`, which no document turns
into an outcome. Requests already in flight get `settings.shutdown_grace_seconds` to answer and are
persisted as usual; the run is marked `stopped` and the CLI exits 130 (SIGINT) or 143 (SIGTERM),
printing the run id and `docmill resume RUN_ID`. If the in-flight work outlives the grace period, or
a second signal arrives, the process leaves at once, saying that requests in flight were left
(everything persisted so far is kept; a resume re-sends at most those requests: invariant 3). A
second signal within `SAME_STOP_SECONDS` of the first is the same stop delivered twice, not a
second one: `timeout -s INT` signals its child and then the child's process group, which holds it.

The grace period bounds the whole way out, not only the requests: once a stop is requested its timer
stays armed until the command is over (`Shutdown.reset`), so an orchestrator still reporting to a
server that is gone (Prefect's engine retries for minutes) cannot hold the exit past it; and
`leave_within` bounds the interpreter's own teardown (atexit flushes) after the command returned.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

from docmill.errors import Interrupted
from docmill.logs import current_run

EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}
SAME_STOP_SECONDS = 1.0  # a signal this soon after the first is the same stop (see the docstring)


class Shutdown:
    """The process-wide stop flag (one instance, `SHUTDOWN`)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal_name = ""
        self.timers: list[threading.Timer] = []  # grace deadlines of a requested stop
        self.said = False  # the resume line was printed (the deadline then leaves silently)
        self.at = 0.0  # when the stop was requested (time.monotonic)

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def request(self, signal_name: str) -> None:
        if not self._event.is_set():
            self.signal_name, self.at = signal_name, time.monotonic()
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
        """Clear the flag and cancel the grace deadline: the command is over (tests, and a process
        that runs again after an interruption)."""
        for timer in self.timers:
            timer.cancel()
        self.timers.clear()
        self._event.clear()
        self.signal_name = ""
        self.said = False


SHUTDOWN = Shutdown()


def resume_line(signal_name: str, run_id: str | None, *, left: bool = False) -> str:
    """The one line an interrupted run ends with (`left`: without waiting for requests in flight)."""
    if run_id and left:
        return (
            f"docmill: interrupted ({signal_name}); run {run_id} left with requests in flight "
            f"(`docmill status {run_id}` shows what they may cost), `docmill resume {run_id}` continues it"
        )
    if run_id:
        return f"docmill: interrupted ({signal_name}); run {run_id} stopped, `docmill resume {run_id}` continues it"
    return f"docmill: interrupted ({signal_name}) before a run started; nothing to resume"


def say_stopped(signal_name: str, run_id: str | None, *, left: bool = False) -> None:
    """Print the resume line once (the CLI's own end, or the grace deadline's)."""
    if not SHUTDOWN.said:
        SHUTDOWN.said = True
        print(resume_line(signal_name, run_id, left=left), file=sys.stderr, flush=True)


def _exit_now(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _after(seconds: float, fn: Callable[..., None], *args: object) -> threading.Timer:
    """`fn(*args)` in `seconds` on a daemon timer (it never holds the process up)."""
    timer = threading.Timer(seconds, fn, args=args)
    timer.daemon = True
    timer.start()
    return timer


def _leave(signal_name: str) -> None:
    say_stopped(signal_name, current_run(), left=True)
    _exit_now(EXIT_CODES.get(signal_name, 130))


def leave_within(seconds: float, code: int) -> None:
    """Exit with `code` at the latest `seconds` from now, whatever the interpreter's teardown still
    waits for (a Prefect client flushing events to a server that is gone). Console use only: a
    process that goes on running must not call it."""
    _after(seconds, _exit_now, code)


def install(grace_seconds: float) -> Callable[[], None]:
    """Handle SIGINT and SIGTERM as above (main thread only; elsewhere a no-op). Returns a function
    that puts the previous handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if SHUTDOWN.requested:
            if time.monotonic() - SHUTDOWN.at < SAME_STOP_SECONDS:
                return  # the same stop, delivered to the process and to its group
            _leave(name)  # a second signal: leave now
        SHUTDOWN.request(name)
        print(
            f"docmill: {name}: no new request is sent; finishing the ones in flight (at most "
            f"{grace_seconds:.0f} s; {name} again leaves at once)",
            file=sys.stderr,
            flush=True,
        )
        SHUTDOWN.timers.append(_after(grace_seconds, _leave, name))

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        """The previous handlers back. A requested stop keeps its grace deadline (the way out is
        not over yet: `SHUTDOWN.reset()` ends it)."""
        for s, h in previous.items():
            signal.signal(s, h)

    return restore

"""The circuit breaker (invariant 12): N calls in a row failing the same systemic way stop the run
early and loudly instead of paying for every document's doomed attempts.

Two streaks, both reset by a healthy call:
- API causes, fed by `ModelClient`: `auth` (401), `billing` (402), `permission` (403),
  `model_not_found` (404), `not_a_message` (a 200 whose body is not a Message: wrong base URL, a
  proxy's page), `connection_refused` (nothing listens; counted per attempt). Any answered Message
  resets it. Transient failures (429, 5xx, overload, resets) never count: they are retried and end
  retryable.
- Answer causes, fed by the per-file pass after the gate: every answer invalid alike (`invalid:` the
  same first validation error, or a refusal). An accepted answer resets it; an answer with another
  problem starts a new streak.
One bad file (at most 1 + repairs answers) or one 400 never reaches the default of 20
(`settings.api.circuit_breaker_calls`). A 404 for the model trips at once (`IMMEDIATE`): the model is
unknown or retired for this key, and every document would get the same answer. Once tripped, every later call raises `SystemicFailure` before
it is sent. So that the trip comes within N calls, not N plus whatever was in flight: while a streak
plus the requests in flight could reach N, a new request waits until those answer (`admit`/`done`;
a healthy run, whose streaks stay at 0, never waits). Callers: tasks.api.client.ModelClient,
tasks.per_file.realtime.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from docmill.errors import SystemicFailure

API_CAUSES = {401: "auth", 402: "billing", 403: "permission", 404: "model_not_found"}
# Causes that trip at the first call: a 404 for the model answers every later call the same way
# (the model is unknown or retired for this key), so no document is sent after it.
IMMEDIATE = frozenset({"model_not_found"})
HINTS = {
    "auth": "the API key is rejected: check ANTHROPIC_API_KEY",
    "billing": "the account cannot be billed: fix billing",
    "permission": "the key may not use this model or endpoint: check the workspace",
    "model_not_found": "the model does not exist: check DOCMILL_API__MODEL / --model",
    "not_a_message": "the endpoint does not answer like the Messages API: check DOCMILL_API__BASE_URL and proxies",
    "connection_refused": "nothing listens at the API base URL: check DOCMILL_API__BASE_URL",
    "invalid_answers": "every answer fails the gate the same way: check the model, the recipe and the endpoint",
}


class CircuitBreaker:
    """Thread-safe; one per `ModelClient` (so one per run process)."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self._lock = threading.Condition()
        self.in_flight = 0
        self._streaks: dict[str, tuple[str | None, int, str]] = {
            "api": (None, 0, ""),
            "answers": (None, 0, ""),
        }
        self.tripped: SystemicFailure | None = None

    def check(self) -> None:
        """Raise the trip's `SystemicFailure` (before a call is sent)."""
        if self.tripped is not None:
            raise self.tripped

    def admit(self, stop: Callable[[], None] = lambda: None) -> None:
        """Before a request is sent: wait while the longest streak plus the requests in flight could
        reach the threshold (those answers decide), then count it in flight. `stop` is checked
        while waiting (a signal). Raises the trip's `SystemicFailure` once tripped."""
        with self._lock:
            while True:
                self.check()
                stop()
                longest = (
                    max(n for cause, n, _ in self._streaks.values() if cause is not None)
                    if any(c is not None for c, _, _ in self._streaks.values())
                    else 0
                )
                if self.in_flight == 0 or longest + self.in_flight < self.threshold:
                    self.in_flight += 1
                    return
                self._lock.wait(0.1)

    def done(self) -> None:
        """A request admitted by `admit` came back (answered or failed)."""
        with self._lock:
            self.in_flight -= 1
            self._lock.notify_all()

    def api(self, cause: str | None, detail: str = "") -> None:
        """One API call's systemic cause, or None for an answered Message."""
        self._note("api", cause, detail)

    def answer(self, cause: str | None, detail: str = "") -> None:
        """One gated answer: None when accepted, else what is wrong with it (`invalid:<error>`)."""
        self._note("answers", cause, detail)

    def _note(self, streak: str, cause: str | None, detail: str) -> None:
        with self._lock:
            last, n, _ = self._streaks[streak]
            n = 0 if cause is None else (n + 1 if cause == last else 1)
            self._streaks[streak] = (cause, n, detail)
            self._lock.notify_all()
            kind = cause.split(":", 1)[0] if streak == "api" and cause else "invalid_answers"
            threshold = 1 if streak == "api" and kind in IMMEDIATE else self.threshold
            if cause is None or n < threshold or self.tripped is not None:
                return
            self.tripped = SystemicFailure(
                f"{n} calls in a row failed the same way ({kind}): {detail[:200]}",
                hint=f"{HINTS.get(kind, 'fix the cause')}, then `docmill resume RUN_ID`",
                cause=kind,
                calls=n,
                last_error=detail[:500],
            )

"""The circuit breaker (invariant 12): N calls in a row failing the same systemic way stop the run
early and loudly instead of paying for every document's doomed attempts
(`settings.api.circuit_breaker_calls`, 20 by default). Callers: tasks.api.client (ModelClient's
policy, AsyncModelClient's attempts), tasks.per_file.realtime.

Two streaks, both reset by a healthy call:
- API causes: `auth` (401), `billing` (402), `permission` (403), `model_not_found` (404: trips at
  once, `IMMEDIATE`, since every document would get the same answer), `not_a_message` (a 200 whose
  body is not a Message), `connection_refused` (per attempt), `invalid_request` (the same 400, word
  for word, for N different documents: one document's repeated 400 never trips it). Transient
  failures (429, 5xx, overload, resets) never count: they are retried and end retryable.
- Answer causes, fed by the per-file pass after the gate: every answer invalid alike (the same first
  validation error, or a refusal).
Once tripped, every later call raises `SystemicFailure` before it is sent. So that the trip comes
within N calls, not N plus whatever was in flight, a new request waits while a streak plus the
requests in flight could reach N (`try_admit`/`done`; a healthy run, whose streaks stay at 0, never waits).
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
    "invalid_request": "every document is refused with the same 400: fix the request it names (the recipe's "
    "schema, a setting; `docmill doctor` checks schemas with one call)",
}
INVALID_REQUEST = "invalid_request"


class CircuitBreaker:
    """Thread-safe; one per `ModelClient` (so one per run process)."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self._lock = threading.Lock()
        self.in_flight = 0
        self._streaks: dict[str, tuple[str | None, int, str]] = {k: (None, 0, "") for k in ("api", "answers")}
        self._who: set[str] = set()  # documents of the current API streak (invalid_request counts them)
        self.tripped: SystemicFailure | None = None

    def check(self) -> None:
        """Raise the trip's `SystemicFailure` (before a call is sent)."""
        if self.tripped is not None:
            raise self.tripped

    def try_admit(self, stop: Callable[[], None] = lambda: None) -> bool:
        """Before a request is sent: True (counted in flight), or False while the longest streak plus
        the requests in flight could reach the threshold (those answers decide: the caller asks
        again after answers). `stop` is checked too (a signal). Raises the trip's `SystemicFailure`."""
        with self._lock:
            self.check()
            stop()
            longest = max((n for cause, n, _ in self._streaks.values() if cause is not None), default=0)
            # no streak: nothing to wait for (a window of hundreds in flight is not held to N);
            # a streak: the requests in flight answer first while they could complete it
            if longest == 0 or self.in_flight == 0 or longest + self.in_flight < self.threshold:
                self.in_flight += 1
                return True
            return False

    def done(self) -> None:
        """A request admitted by `try_admit` came back (answered or failed)."""
        with self._lock:
            self.in_flight -= 1

    def api(self, cause: str | None, detail: str = "") -> None:
        """One API call's systemic cause, or None for an answered Message."""
        self._note("api", cause, detail)

    def invalid_request(self, detail: str, who: str) -> None:
        """A 400 `invalid_request_error` of document `who`; `detail` (the error, word for word) is the
        cause: the same refusal for N different documents in a row trips the breaker."""
        self._note("api", f"{INVALID_REQUEST}:{detail}", detail, who)

    def answer(self, cause: str | None, detail: str = "") -> None:
        """One gated answer: None when accepted, else what is wrong with it (`invalid:<error>`)."""
        self._note("answers", cause, detail)

    def _note(self, streak: str, cause: str | None, detail: str, who: str | None = None) -> None:
        """With `who` (the document), the streak counts documents: the same one again leaves it as it is."""
        with self._lock:
            last, n, _ = self._streaks[streak]
            if streak == "api" and cause != last:
                self._who = set()
            if who is not None and cause == last and who in self._who:
                return  # the same document again: not another document refused alike
            if who is not None:
                self._who.add(who)
            n = 0 if cause is None else (n + 1 if cause == last else 1)
            self._streaks[streak] = (cause, n, detail)
            kind = cause.split(":", 1)[0] if streak == "api" and cause else "invalid_answers"
            threshold = 1 if streak == "api" and kind in IMMEDIATE else self.threshold
            if cause is None or n < threshold or self.tripped is not None:
                return
            what = (
                f"{n} documents in a row were refused the same way ({kind})"
                if kind == INVALID_REQUEST
                else f"{n} calls in a row failed the same way ({kind})"
            )
            self.tripped = SystemicFailure(
                f"{what}: {detail[:200]}",
                hint=f"{HINTS.get(kind, 'fix the cause')}, then `docmill resume RUN_ID`",
                cause=kind,
                calls=n,
                last_error=detail[:500],
            )

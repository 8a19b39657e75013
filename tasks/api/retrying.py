"""The transport retry layer (invariant 6): the one place that decides what is retried and how long
to wait, and the one loop that re-sends (tenacity: `transport` on a thread, `transport_async`,
`AsyncRetrying`, on the event loop; callers give when to stop and how long to wait). Callers:
AsyncModelClient (call, stream, count_tokens: every realtime call), BatchApi (every batch call). Validation
repair is a separate layer (tasks.per_file.gate); the SDK's own retries are off (`max_retries=0`). A
layout test fails on a retry loop written by hand (tests/layout/test_mechanisms.py).

Retried, like the SDK's `_should_retry`: the `x-should-retry` header first (true/false wins), then
408, 409, 429, any 5xx (incl. 529), a mid-stream `overloaded_error`, connection errors, timeouts and
a stream broken after the 200 (`answers.StreamBroken`). Every other 4xx is final, and so is a 429
whose `error_code` says a spend limit is reached: `spend_limit_error` stops the run. Waits: the
server's `retry-after-ms` / `retry-after`, capped at `api.retry_after_max_seconds` (a capped wait is
logged), else exponential backoff with jitter capped at `backoff_max_seconds`.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, Retrying, retry_if_exception

from docmill.errors import SpendLimitReached
from docmill.logs import get_logger
from docmill.sdk import anthropic
from tasks.api.answers import StreamBroken

log = get_logger("api")
OVERLOADED = 529
RETRY_STATUSES = frozenset({408, 409, 429})
# `error.type` of the failures retried above, as a batch result's `errored` item names them: 429, 5xx
# and 529, 504, 408 and 409. Batch results use it, so realtime and batch retry the same failures.
RETRYABLE_ERROR_TYPES = frozenset(
    {"rate_limit_error", "overloaded_error", "api_error", "timeout_error", "conflict_error"}
)
# 429 error codes of the SDK's _error_classes.py that no wait fixes (a ramp limit does pass: retried)
SPEND_LIMIT_CODES = frozenset(
    {
        "enforced_spend_limit_reached",
        "contract_spend_limit_reached",
        "linked_organization_spend_limit_reached",
    }
)


def is_overloaded(exc: BaseException) -> bool:
    """A 529, or an `overloaded_error` event mid-stream: what moves a call toward the fallback model."""
    return isinstance(exc, anthropic.APIStatusError) and (
        exc.status_code == OVERLOADED or getattr(exc, "type", None) == "overloaded_error"
    )


def is_retryable(exc: BaseException) -> bool:
    """THE retry decision for one failed API attempt."""
    if isinstance(exc, anthropic.APIStatusError):
        if is_spend_limit(exc):
            return False
        header = exc.response.headers.get("x-should-retry")
        if header == "true":
            return True
        if header == "false":
            return False
        status = exc.status_code
        if status in RETRY_STATUSES or status >= 500:
            return True
        return status == 200 and getattr(exc, "type", None) == "overloaded_error"
    return isinstance(exc, anthropic.APIConnectionError)


def is_invalid_request(exc: BaseException) -> bool:
    """A 400 `invalid_request_error`: final for its document; the same one for every document is a
    systemic failure (tasks.api.breaker)."""
    return (
        isinstance(exc, anthropic.APIStatusError)
        and exc.status_code == 400
        and getattr(exc, "type", None) == "invalid_request_error"
    )


def is_spend_limit(exc: BaseException) -> bool:
    """A refusal because a spend limit is reached (429/402 with a spend-limit `error_code`)."""
    return isinstance(exc, anthropic.APIStatusError) and exc.error_code in SPEND_LIMIT_CODES


def spend_limit_error(exc: anthropic.APIStatusError) -> SpendLimitReached:
    """The one-line error that stops a run on a spend-limit refusal (raise it `from exc`)."""
    return SpendLimitReached(
        f"the API refused with {exc.status_code} {exc.error_code}: the organization's spend limit is reached; "
        "retrying cannot help",
        error_code=exc.error_code,
        request_id=exc.request_id,
    )


def retry_after_seconds(headers: Any, *, now: Callable[[], float] = time.time) -> float | None:
    """Seconds the server asked us to wait (`retry-after-ms`, then `retry-after` seconds or date)."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    return max(0.0, float(email.utils.mktime_tz(parsed)) - now())


def backoff_seconds(retry_number: int, cap: float, rng: Callable[[], float] = random.random) -> float:
    """Exponential backoff with jitter: 0.5 s * 2**(n-1), minus up to 25 %, capped at `cap`."""
    base = min(0.5 * 2.0 ** max(retry_number - 1, 0), cap)
    return max(0.0, base * (1.0 - 0.25 * rng()))


def wait_seconds(
    exc: BaseException,
    retry_number: int,
    cap: float,
    rng: Callable[[], float] = random.random,
    *,
    asked_max: float,
) -> float:
    """How long to wait before retry number `retry_number` (1-based) after `exc`: the server's
    `retry-after`, at most `asked_max` (logged when capped: one 429 asking for 600 s must not stall
    every request for ten minutes), else backoff capped at `cap`."""
    if isinstance(exc, anthropic.APIStatusError):
        asked = retry_after_seconds(exc.response.headers)
        if asked is not None and asked > asked_max:
            log.warning(
                "the API asked to wait %.0f s (HTTP %s); waiting the cap of %.0f s",
                asked,
                exc.status_code,
                asked_max,
            )
            return asked_max
        if asked:
            return asked
    return backoff_seconds(retry_number, cap, rng)


def describe(exc: BaseException) -> str:
    """One line about a failed attempt, without secrets (status, type, server message)."""
    if isinstance(exc, anthropic.APIStatusError):
        kind = getattr(exc, "type", None) or "error"
        msg = getattr(exc, "api_message", None) or exc.message
        return f"HTTP {exc.status_code} {kind}: {str(msg)[:300]}"
    if isinstance(exc, anthropic.APITimeoutError):
        return "request timed out"
    if isinstance(exc, StreamBroken):
        return exc.message
    if isinstance(exc, anthropic.APIConnectionError):
        return f"connection error: {type(exc.__cause__ or exc).__name__}"
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def is_refused(e: BaseException) -> bool:
    """A refused connection (nothing listens): the thread's transport names it in the cause, the
    event loop's wraps it a few causes deep."""
    seen, depth = e.__cause__, 0
    while seen is not None and depth < 6:
        if isinstance(seen, ConnectionRefusedError) or "refused" in str(seen):
            return True
        seen, depth = seen.__cause__ or seen.__context__, depth + 1
    return False


Stop = Callable[[RetryCallState], bool]
Wait = Callable[[RetryCallState], float]


def transport(
    *,
    stop: Stop,
    wait: Wait,
    sleep: Callable[[float], None],
    reraise: bool = True,
    retry: Callable[[BaseException], bool] = is_retryable,
) -> Retrying:
    """THE transport retry loop on a thread: re-runs the call while `is_retryable` says so and `stop`
    does not; `wait` says how long before the next attempt (`failure` names what failed), `sleep`
    waits. A final error is raised as it is; a retryable one whose attempts are spent is raised as it
    is (`reraise`) or as tenacity's `RetryError` (the caller tells the two apart). `retry` is
    `is_retryable` but for a batch's results stream (`broke_in_transit`). One object per call:
    tenacity keeps a call's state on it."""
    return Retrying(retry=retry_if_exception(retry), stop=stop, wait=wait, sleep=sleep, reraise=reraise)


def transport_async(
    *, stop: Stop, wait: Wait, sleep: Callable[[float], Awaitable[None]], reraise: bool = True
) -> AsyncRetrying:
    """`transport` on the event loop (tenacity's `AsyncRetrying`): the same decision; `sleep` is awaited."""
    retry = retry_if_exception(is_retryable)
    return AsyncRetrying(retry=retry, stop=stop, wait=wait, sleep=sleep, reraise=reraise)


def failure(state: RetryCallState) -> BaseException | None:
    """The error the attempt just made ended with (None after a success)."""
    return state.outcome.exception() if state.outcome is not None else None


def broke_in_transit(e: BaseException) -> bool:
    """A downloaded stream (a batch's results) that broke off in transit and is worth fetching again
    from where it stopped: a connection error, a reset, a truncated line; not a bug."""
    return isinstance(e, (anthropic.APIConnectionError, OSError, ValueError)) or type(
        e
    ).__module__.startswith("httpx")

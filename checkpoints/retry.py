"""The one retry layer for transient object-store faults.

botocore's own retries are switched off (`total_max_attempts=1`) so this tenacity policy is the only
place a store call is repeated. `is_transient` is the one function that decides what may be
retried: 5xx, throttling (503 SlowDown & co), connection errors, read/connect timeouts.
Never a 4xx (bad request, access denied, not found) and never 412 (a lost precondition).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import botocore.exceptions as bexc
import tenacity

from docmill.errors import TransientStoreError

T = TypeVar("T")

# Error codes S3 and S3-compatible servers use for "slow down / try again", whatever the status.
THROTTLING_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "BandwidthLimitExceeded",
        "RequestTimeout",  # 400 in S3: the socket idled; AWS documents it as retryable
        "RequestTimeoutException",
        "ConditionalRequestConflict",  # 409 while another conditional write is in flight; AWS: retry
        "InternalError",
        "ServiceUnavailable",
    }
)

_TRANSIENT = (
    bexc.ConnectionError,  # EndpointConnectionError, ConnectTimeoutError, ConnectionClosedError, proxy
    bexc.ReadTimeoutError,
    bexc.ResponseStreamingError,
    bexc.IncompleteReadError,
    bexc.HTTPClientError,  # urllib3-level failures wrapped by botocore
    ConnectionError,
    TimeoutError,
)


def code_status(e: bexc.ClientError) -> tuple[str, int]:
    """The S3 error code and HTTP status of a client error ("" and 0 when not given)."""
    err = e.response.get("Error", {}) or {}
    status = int((e.response.get("ResponseMetadata", {}) or {}).get("HTTPStatusCode", 0) or 0)
    return str(err.get("Code", "")), status


def is_transient(exc: BaseException) -> bool:
    """True when repeating the same store call may succeed."""
    if isinstance(exc, bexc.ClientError):
        code, status = code_status(exc)
        if status == 412 or code == "PreconditionFailed":
            return False
        return status >= 500 or status == 429 or code in THROTTLING_CODES
    return isinstance(exc, _TRANSIENT)


MAX_WAIT, JITTER = 5.0, 0.2  # seconds: the longest backoff wait, the most jitter added to one


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with jitter. `initial_wait=0` means no waiting (tests)."""

    attempts: int = 5
    initial_wait: float = 0.2

    @classmethod
    def from_env(cls) -> RetryPolicy:
        """From settings (DOCMILL_STORE_IO__RETRY_ATTEMPTS, DOCMILL_STORE_IO__RETRY_WAIT_SECONDS)."""
        from docmill.settings import get_settings

        io = get_settings().store_io
        return cls(attempts=io.retry_attempts, initial_wait=io.retry_wait_seconds)


def call_with_retry(policy: RetryPolicy, fn: Callable[[], T], *, what: str) -> T:
    """Run `fn`, repeating it on transient faults; afterwards raise `TransientStoreError` (`what`
    names the operation, never credentials) from the last fault. Other errors propagate at once."""
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(is_transient),
        stop=tenacity.stop_after_attempt(policy.attempts),
        wait=tenacity.wait_exponential_jitter(initial=policy.initial_wait, max=MAX_WAIT, jitter=JITTER)
        if policy.initial_wait > 0
        else tenacity.wait_none(),
        reraise=False,
    )
    try:
        return retrying(fn)
    except tenacity.RetryError as e:
        last = e.last_attempt.exception()
        raise TransientStoreError(
            f"{what} failed after {policy.attempts} attempts: {describe(last)}",
            hint="the store is overloaded or unreachable; check the endpoint and retry the run later "
            "(it resumes from its checkpoint)",
            attempts=policy.attempts,
        ) from last


def describe(exc: BaseException | None) -> str:
    """A short, credential-free description of a store fault."""
    if exc is None:
        return "unknown error"
    if isinstance(exc, bexc.ClientError):
        code, status = code_status(exc)
        return f"{code or 'error'} (HTTP {status or '?'})"
    return type(exc).__name__

"""One call's state across its attempts (`Ladder`: the retry loop's counts and the degradation ladder
to the fallback model after repeated overloads), what it returns (`CallResult`) and the error it ends
with (`call_error`), and the log line and result of an answered call (`answered`).
Used by `tasks.api.client.ModelClient.call` and `tasks.api.aio.AsyncModelClient.call`."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from docmill.errors import ApiCallError
from docmill.logs import get_logger
from docmill.sdk import anthropic
from tasks.api.retrying import describe, is_overloaded
from tasks.api.usage import add_usage

log = get_logger("api")
DEFAULT_HINT = "the API refused this request; it is not retried"
STATUS_HINTS = {
    400: "the request itself is invalid; fix the recipe or parameters, it will not be retried",
    401: "the API key was rejected; check ANTHROPIC_API_KEY and resume",
    402: "billing problem on the account; fix it and resume",
    403: "the key may not use this model or feature; check the workspace and resume",
    404: "unknown model or endpoint; check DOCMILL_API__MODEL / the base URL and resume",
    413: "the document is too large for one request; lower inventory.max_document_bytes",
}


@dataclass
class CallResult:
    """What an answered call returns (`ModelClient.call`, `AsyncModelClient.call`)."""

    message: dict[str, Any]
    usage: dict[str, int]
    model: str
    request_id: str | None
    attempts: int
    cost_usd: float
    fell_back: bool = False
    errors: list[str] = field(default_factory=list)


@dataclass
class Ladder:
    """Per-call state of the retry loop and the degradation ladder."""

    model: str
    fallback: str | None
    overloads_before_fallback: int
    attempts: int = 0
    attempts_on_model: int = 0
    consecutive_overloads: int = 0
    fell_back: bool = False
    errors: list[str] = field(default_factory=list)
    timeouts: int = 0  # read timeouts after the request was sent (possibly billed)
    estimate: int | None = None  # the request's input-token estimate, for its model, if measured
    key: str = ""
    doc_id: str = ""
    pass_name: str = ""

    def failed(self, exc: BaseException) -> None:
        self.errors.append(describe(exc))
        self.consecutive_overloads = self.consecutive_overloads + 1 if is_overloaded(exc) else 0
        if (
            not self.fell_back
            and self.fallback
            and self.fallback != self.model
            and self.consecutive_overloads >= self.overloads_before_fallback
        ):
            self.model, self.fell_back = self.fallback, True
            self.attempts_on_model = 0
            self.consecutive_overloads = 0


def call_error(exc: BaseException | None, ladder: Ladder, failure_type: str) -> ApiCallError:
    """The error a call ends with: what failed, after how many attempts, and how to fix it."""
    last = describe(exc) if exc is not None else "no attempt was made"
    status = getattr(exc, "status_code", None)
    if isinstance(exc, anthropic.APIResponseValidationError):
        last, status = str(exc), None  # a 200 whose body is not a Message
        hint = "check the base URL (DOCMILL_API__BASE_URL) and any proxy in between, then resume"
    elif failure_type.startswith("api_error:"):
        hint = STATUS_HINTS.get(status or 0, DEFAULT_HINT)
    else:
        hint = "the API kept failing; a resume of the run retries this document"
    return ApiCallError(
        f"{ladder.pass_name} call for {ladder.doc_id} failed after {ladder.attempts} attempt(s): {last}",
        hint=hint,
        status=status,
        request_id=getattr(exc, "request_id", None),
        attempts=ladder.attempts,
        model=ladder.model,
        doc_id=ladder.doc_id,
        key=ladder.key,
        failure_type=failure_type,
        last_error=last,
        errors=list(ladder.errors),
        fell_back=ladder.fell_back,
    )


def answered(
    message: dict[str, Any],
    ladder: Ladder,
    started: float,
    purpose: str,
    prompt_version: str | None,
    cost: float,
) -> CallResult:
    """An answered call's result, and its one structured log line (docmill.api, INFO)."""
    usage = add_usage({}, message.get("usage"))
    if log.isEnabledFor(logging.INFO):
        log.info(
            "%s call answered (%s)",
            ladder.pass_name,
            purpose,
            extra={
                "doc_id": ladder.doc_id,
                "request_id": message.get("_request_id"),
                "model": ladder.model,
                "prompt_version": prompt_version,
                "stop_reason": message.get("stop_reason"),
                "usage": usage,
                "latency_ms": round((time.monotonic() - started) * 1000, 1),
                "attempt": ladder.attempts,
                "cost_usd": round(cost, 6),
            },
        )
    return CallResult(
        message=message,
        usage=usage,
        model=ladder.model,
        request_id=message.get("_request_id"),
        attempts=ladder.attempts,
        cost_usd=cost,
        fell_back=ladder.fell_back,
        errors=ladder.errors,
    )

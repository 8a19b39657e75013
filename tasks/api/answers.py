"""What an attempt that brought no whole answer may have cost: THE decision, `paid_attempt`
(invariant 13), for every call of the Messages API (`AsyncModelClient.call` and `.stream`), never a
caller's. Both readers of tasks.api.sse (the raw events of `read_answer`, the SDK's stream helper in
`stream_message`) fill one `StreamProgress` per attempt and raise the same `StreamBroken` when the
connection breaks after the 200; the record of a paid attempt without an answer is a
`PossiblyBilled`, handed to the run's cost ledger. Also what decides how an answer is read
(`read_timeout`) and checks that it is a Message (`as_message`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from docmill.logs import get_logger
from docmill.sdk import anthropic, httpx2
from tasks.api.usage import as_json, prompt_tokens

if TYPE_CHECKING:
    from docmill.settings import ApiSettings

log = get_logger("api")

TIMEOUT_COVERS = 2048  # output tokens `api.timeout_seconds` covers unstreamed (see `read_timeout`)


@dataclass(frozen=True)
class PossiblyBilled:
    """An attempt that may have been billed but brought no whole answer: a timeout after sending, a
    connection that broke after the request went out, a stream that broke mid-way. `usd` is an upper
    bound (input as the stream reported it, else as cache writes; max_tokens of output) unless
    `possibly` is False: the stream broke after reporting its final usage (`usage`), billed exactly."""

    pass_name: str
    doc_id: str
    key: str
    attempt: int
    model: str
    input_tokens: int
    max_tokens: int
    usd: float
    at: float
    usage: dict[str, Any] | None = None  # what the stream reported (exact when not `possibly`)
    possibly: bool = True
    reason: str = "timeout"  # timeout | dropped | stream_error | broken


OnPossiblyBilled = Callable[[PossiblyBilled], None]


@dataclass(frozen=True)
class CallLabel:
    """Whom a call's costs are attributed to (the cost ledger's pass, document and key)."""

    pass_name: str
    doc_id: str
    key: str


@dataclass
class StreamProgress:
    """What one attempt showed before it ended or broke (one per attempt)."""

    answered: bool = False  # the API answered 200 and began streaming: the request reached the model
    request_id: str | None = None
    headers: Any = None
    start_usage: dict[str, Any] | None = None  # message_start: the input side, exact
    final_usage: dict[str, Any] | None = None  # message_delta, merged over message_start (cumulative)

    def on_response(self, request_id: str | None, headers: Any) -> None:
        self.answered, self.request_id, self.headers = True, request_id, headers

    def on_event(self, event: Any) -> None:
        """Read one stream event: the SDK's typed event (sync or async stream alike) or the event's
        JSON as a dict (a reader of the raw SSE bytes)."""
        kind = _field(event, "type")
        if kind == "message_start":
            self.start_usage = as_json(_field(_field(event, "message"), "usage") or {})
        elif kind == "message_delta":
            merged = dict(self.final_usage or self.start_usage or {})
            merged.update({k: v for k, v in as_json(_field(event, "usage") or {}).items() if v is not None})
            self.final_usage = merged


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


class StreamBroken(Exception):
    """The connection broke after the API answered 200 and began streaming (`timed_out`: a read timed
    out while the answer streamed). A connection error to the retry layer; `progress` says what the
    stream had shown. What is raised is `broken_class()(cause, request, progress)`, one of these that
    is also the SDK's `APIConnectionError` (a class that exists only once the SDK is imported)."""

    timed_out: bool
    progress: StreamProgress
    message: str


@cache
def broken_class() -> type[StreamBroken]:
    """`StreamBroken` joined with the SDK's `APIConnectionError`, made once, when a stream first broke
    (only a call with a client gets there, so the SDK is loaded by then)."""

    class Broken(StreamBroken, anthropic.APIConnectionError):
        def __init__(self, cause: BaseException, request: httpx2.Request, progress: StreamProgress) -> None:
            self.timed_out = isinstance(cause, httpx2.TimeoutException)
            self.progress = progress
            what = "timed out while the answer streamed" if self.timed_out else "dropped mid-stream"
            super().__init__(message=f"the connection {what} ({type(cause).__name__})", request=request)

    Broken.__name__ = Broken.__qualname__ = "StreamBroken"
    return Broken


def timed_out_after_sending(exc: BaseException) -> bool:
    """A timeout after the request was sent (unstreamed: a read, write or pool timeout, not a connect
    timeout; or while an answer streamed): resent at most `api.timeout_resends` times (the caller's
    stop condition)."""
    if isinstance(exc, StreamBroken):
        return exc.timed_out
    return isinstance(exc, anthropic.APITimeoutError) and type(exc.__cause__).__name__ != "ConnectTimeout"


@dataclass(frozen=True)
class Paid:
    """What a failed attempt may have cost (`paid_attempt`)."""

    usd: float
    possibly: bool  # False: `usage` is the final usage the API reported (exact)
    usage: dict[str, Any] | None
    reason: str


def paid_attempt(
    exc: BaseException,
    progress: StreamProgress,
    *,
    worst_usd: float,
    max_tokens: int,
    price: Callable[[Mapping[str, Any]], float | None],
) -> Paid | None:
    """What the failed attempt `exc` may have cost, or None when the API cannot have billed it.

    - The API answered 200 and the stream broke (a drop, a read timeout mid-stream, an `error` event):
      exact when `message_delta` had reported the final usage; else the input `message_start`
      reported plus `max_tokens` of output, flagged possibly billed; else `worst_usd`.
    - No answer yet: a timeout after sending, or a connection broken after the request went out
      (read error, peer closed): `worst_usd`, possibly billed.
    - Anything else (an error status: the API refused it before the model; nothing sent; a 200 that
      is not a Message): None.
    `price(usage)` prices a usage by the model asked for (None: no price, counted 0)."""
    if progress.answered and not (isinstance(exc, anthropic.APIStatusError) and exc.status_code != 200):
        reason = "timeout" if isinstance(exc, StreamBroken) and exc.timed_out else "dropped"
        if isinstance(exc, anthropic.APIStatusError):  # an `error` event after the 200
            reason = "stream_error"
        if progress.final_usage is not None:
            usage = dict(progress.final_usage)
            return Paid(price(usage) or 0.0, False, usage, reason)
        if progress.start_usage is not None:
            bound = {**progress.start_usage, "output_tokens": max_tokens}
            return Paid(price(bound) or worst_usd, True, bound, reason)
        return Paid(worst_usd, True, None, reason)
    if isinstance(exc, anthropic.APITimeoutError):
        return Paid(worst_usd, True, None, "timeout") if timed_out_after_sending(exc) else None
    if isinstance(exc, anthropic.APIConnectionError) and sent_then_broken(exc.__cause__):
        return Paid(worst_usd, True, None, "broken")
    return None


def sent_then_broken(cause: BaseException | None) -> bool:
    """Whether a connection error (the SDK's cause) may have come after the request went out.
    httpx names it (a read error or timeout, the peer closing mid-answer). aiohttp's transport (the SDK's aiohttp extra, the event
    loop's client) reports a connection the server closed or reset after the request as
    `httpx2.ConnectError`, the class of a refused connect: the aiohttp error behind it tells them
    apart, and anything but a failed connect counts as sent (the harsher reading)."""
    if isinstance(cause, (httpx2.ReadError, httpx2.RemoteProtocolError, httpx2.ReadTimeout)):
        return True
    inner = cause.__cause__ if isinstance(cause, httpx2.ConnectError) else None
    if inner is None or not type(inner).__module__.startswith("aiohttp"):
        return False
    import aiohttp

    return isinstance(inner, aiohttp.ClientConnectionError) and not isinstance(
        inner, aiohttp.ClientConnectorError
    )


def paid_record(
    label: CallLabel, attempt: int, model: str, estimate: int, max_tokens: int, paid: Paid, at: float
) -> PossiblyBilled:
    """The record, for the run's cost ledger, of an attempt that may have been billed without a whole
    answer (a timeout after sending, a connection or stream broken after the request went out), logged
    as a warning; input tokens as the stream reported them, else the caller's estimate."""
    what = "possibly billed (at most" if paid.possibly else "billed (exactly"
    log.warning(
        "%s call for %s brought no whole answer (%s) after it was sent: recorded as %s $%.4f)",
        label.pass_name,
        label.doc_id,
        paid.reason,
        what,
        paid.usd,
        extra={"doc_id": label.doc_id, "model": model},
    )
    input_tokens = prompt_tokens(paid.usage) if paid.usage else estimate
    return PossiblyBilled(
        **vars(label),
        attempt=attempt,
        model=model,
        input_tokens=input_tokens,
        max_tokens=max_tokens,
        usd=paid.usd,
        at=at,
        usage=paid.usage,
        possibly=paid.possibly,
        reason=paid.reason,
    )


def message_text(message: Mapping[str, Any]) -> str:
    """The concatenated text blocks of a Message dict."""
    return "".join(b.get("text") or "" for b in message.get("content") or [] if b.get("type") == "text")


def as_message(http_response: httpx2.Response) -> dict[str, Any]:
    """An unstreamed answer's body as the JSON the API sent, when it is a Message, else an
    `APIResponseValidationError`, never retried: a 200 that is not a Message (a proxy's page, a wrong
    base URL)."""
    try:
        data = json.loads(http_response.content)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        kind = http_response.headers.get("content-type") or "no content type"
        raise anthropic.APIResponseValidationError(
            response=http_response,
            body=None,
            message=f"the endpoint answered {http_response.status_code} with something that is not a "
            f"Message ({kind}, {len(http_response.content)} bytes)",
        )
    return data


def read_timeout(body: dict[str, Any], api: ApiSettings) -> float | None:
    """None when the answer streams (max_tokens reaches `api.stream_min_max_tokens`: a long one, read
    by read); else how long it may take: `api.timeout_seconds`
    covers 2,048 output tokens (the SDK estimates 58 s for them), a larger max_tokens in proportion."""
    max_tokens = int(body["max_tokens"])
    if max_tokens >= api.stream_min_max_tokens:
        return None
    return api.timeout_seconds * max(1.0, max_tokens / TIMEOUT_COVERS)

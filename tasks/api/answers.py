"""One answer off the wire, and what a timeout may have cost (used by `client.ModelClient`).

- `answer(sdk, body, stream=...)`: one HTTP attempt -> (the answer as the JSON the API sent, request
  id, response headers). Streamed (`messages.stream` -> final message) when asked, so a long answer
  keeps the connection busy instead of meeting the read timeout; else the raw `create` response.
- `sent_before_timeout(exc)`: a timeout after the request went out (read/write/pool), which the API
  may have answered and billed (invariant 13); a connect timeout sent nothing.
- `PossiblyBilled`: the record of such a request (worst-case USD), handed to the run's cost ledger.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic


@dataclass(frozen=True)
class PossiblyBilled:
    """A request that timed out after it was sent: the API may have answered and billed it.
    `usd` is the worst case (input as cache writes, max_tokens of output)."""

    pass_name: str
    doc_id: str
    key: str
    attempt: int
    model: str
    input_tokens: int
    max_tokens: int
    usd: float
    at: float


OnPossiblyBilled = Callable[[PossiblyBilled], None]


def sent_before_timeout(exc: anthropic.APITimeoutError) -> bool:
    """A timeout after the request went out (read / write / pool), not a connect timeout."""
    return type(exc.__cause__).__name__ != "ConnectTimeout"


def message_dict(raw: Any) -> dict[str, Any]:
    """The answer as the JSON the API sent: what the response log keeps (and ~0.3 ms cheaper per
    call than building the SDK's Message model and dumping it back). A 200 that is not a Message
    (a proxy's page, a wrong base URL) raises `APIResponseValidationError`, never retried."""
    try:
        data = raw.json()
    except ValueError:
        data = None
    return checked_message(data, raw.http_response)


def checked_message(data: Any, http_response: Any) -> dict[str, Any]:
    """`data` if it is a Message's JSON, else `APIResponseValidationError` (the check of
    `message_dict`, shared with the event loop's reader, tasks.api.sse)."""
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        kind = http_response.headers.get("content-type") or "no content type"
        raise anthropic.APIResponseValidationError(
            response=http_response,
            body=None,
            message=f"the endpoint answered {http_response.status_code} with something that is not a "
            f"Message ({kind}, {len(http_response.content)} bytes)",
        )
    return data


def answer(
    sdk: anthropic.Anthropic, body: dict[str, Any], *, stream: bool, timeout: float | None = None
) -> tuple[dict[str, Any], str | None, Any]:
    """One HTTP attempt: (the answer's JSON, request id, response headers); `timeout` for an
    unstreamed answer (None: the client's)."""
    if stream:
        with sdk.messages.stream(**body) as events:
            final = events.get_final_message()
            data = final.model_dump(mode="json", exclude={"content": {"__all__": {"parsed_output"}}})
            return data, events.request_id, events.response.headers
    raw = sdk.messages.with_raw_response.create(
        **body, timeout=anthropic.NOT_GIVEN if timeout is None else timeout
    )
    return message_dict(raw), raw.request_id, raw.headers

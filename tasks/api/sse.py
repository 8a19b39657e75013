"""One answer off the wire on the event loop (tasks.api.client.AsyncModelClient).

`read_answer` (every `call`) keeps the JSON the API sent: a streamed answer (`answers.read_timeout`
decides) is read off the raw SSE events into the Message JSON a plain answer would have been
(`Accumulator`: about 0.2 ms of CPU per answer, where the SDK's stream helper takes about 1.2 ms).
`stream_message` (long calls: `stream`) reads with the SDK's stream helper into the SDK's Message,
which its callers read. An `error` event mid-stream raises `anthropic.APIStatusError` with status
200, as the SDK does; a stream that breaks off after it started (a reset, a read timeout, no
`message_stop`) raises `answers.StreamBroken` with the `StreamProgress` it showed, from either reader.
"""

from __future__ import annotations

import json
from typing import Any

from docmill.sdk import anthropic, httpx2
from tasks.api.answers import StreamProgress, as_message, broken_class

PATH = "/v1/messages"


class Accumulator:
    """SSE bytes -> the Message JSON (content blocks with their deltas applied, final usage)."""

    def __init__(self, response: Any, progress: StreamProgress) -> None:
        self.response = response
        self.progress = progress
        self.message: dict[str, Any] | None = None
        self.done = False
        self._partial_json: dict[int, str] = {}
        self._rest = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes; complete events are applied as they arrive."""
        lines = (self._rest + chunk).split(b"\n")
        self._rest = lines.pop()
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:  # an empty line ends an event
                if self._data:
                    self._event(b"\n".join(self._data))
                    self._data = []
            elif line.startswith(b"data:"):
                self._data.append(line[6:] if line[5:6] == b" " else line[5:])

    def _event(self, raw: bytes) -> None:
        data = json.loads(raw)
        self.progress.on_event(data)
        kind = data.get("type")
        if kind == "message_start":
            self.message = data["message"]
            self.message.setdefault("content", [])
        elif kind == "error":
            raise anthropic.APIStatusError(f"{data}", response=self.response, body=data)
        elif self.message is None:
            return  # ping before the message: nothing to apply
        elif kind == "content_block_start":
            content = self.message["content"]
            index = int(data["index"])
            while len(content) <= index:
                content.append({})
            content[index] = dict(data["content_block"])
        elif kind == "content_block_delta":
            self._delta(self.message["content"][int(data["index"])], int(data["index"]), data["delta"])
        elif kind == "content_block_stop":
            index = int(data["index"])
            if index in self._partial_json:
                text = self._partial_json.pop(index)
                self.message["content"][index]["input"] = json.loads(text) if text else {}
        elif kind == "message_delta":
            self.message.update(data.get("delta") or {})
            usage = self.message.setdefault("usage", {})
            usage.update({k: v for k, v in (data.get("usage") or {}).items() if v is not None})
        elif kind == "message_stop":
            self.done = True

    def _delta(self, block: dict[str, Any], index: int, delta: dict[str, Any]) -> None:
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + delta["text"]
        elif kind == "input_json_delta":
            self._partial_json[index] = self._partial_json.get(index, "") + delta.get("partial_json", "")
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta["thinking"]
        elif kind == "signature_delta":
            block["signature"] = delta["signature"]
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(delta["citation"])
        else:  # compaction and later kinds: the delta's fields are the block's
            block.update({k: v for k, v in delta.items() if k != "type"})

    def final(self) -> dict[str, Any]:
        if self.message is None or not self.done:
            cut = httpx2.RemoteProtocolError("the answer's stream ended before message_stop")
            raise broken_class()(cut, self.response.request, self.progress)
        return self.message


async def read_answer(
    sdk: anthropic.AsyncAnthropic,
    body: dict[str, Any],
    *,
    stream: bool,
    progress: StreamProgress,
    timeout: float | None = None,
) -> tuple[dict[str, Any], str | None, Any]:
    """One HTTP attempt on the event loop: (the answer's JSON, request id, response headers);
    `timeout` for an unstreamed answer (None: the client's); `progress` notes what a stream showed.

    The body goes out through the SDK's own `post` (its headers, auth, timeouts and errors) as JSON
    bytes made here: `messages.create` deep-copies every request's parameters first (the schema
    and the document: ~0.15 ms a call), which a body built for this one call does not need."""
    content = json.dumps({**body, "stream": True} if stream else body, separators=(",", ":")).encode()
    options: anthropic.RequestOptions = {"timeout": timeout} if timeout else {}
    response = await sdk.post(PATH, cast_to=httpx2.Response, content=content, stream=stream, options=options)
    request_id = response.headers.get("request-id")
    if not stream:
        return as_message(response), request_id, response.headers
    progress.on_response(request_id, response.headers)
    events = Accumulator(response, progress)
    try:
        async for chunk in response.aiter_bytes():
            events.feed(chunk)
        message = events.final()
    except httpx2.TransportError as e:  # after the 200: answered in part, may be billed
        raise broken_class()(e, response.request, progress) from e
    finally:
        await response.aclose()
    return message, request_id, response.headers


async def stream_message(
    sdk: anthropic.AsyncAnthropic,
    body: dict[str, Any],
    progress: StreamProgress,
    *,
    betas: list[str] | None = None,
) -> Any:
    """One streamed Messages call -> the SDK's final Message (beta namespace when `betas`), with
    `_request_id` set like a non-streamed answer's; each event noted in `progress`, a broken connection
    raised as `StreamBroken`."""
    opened = sdk.beta.messages.stream(betas=betas, **body) if betas else sdk.messages.stream(**body)
    async with opened as events:
        progress.on_response(events.request_id, events.response.headers)
        try:
            async for event in events:
                progress.on_event(event)
            final = await events.get_final_message()
        except httpx2.TransportError as e:  # raised raw out of the stream by the SDK: after the 200
            raise broken_class()(e, events.response.request, progress) from e
    final._request_id = progress.request_id
    return final

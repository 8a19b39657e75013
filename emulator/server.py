"""The HTTP side: a Starlette app speaking the Anthropic wire API, and `EmulatorServer`, which runs
it with uvicorn in a background thread on a free loopback port.

    with EmulatorServer() as server:
        client = anthropic.Anthropic(api_key="k", base_url=server.base_url)
        server.state.faults.add(kind="overloaded", count=2)

Every /v1 response carries `request-id`; errors carry `request_id` in the body too. Control
endpoints live under /_emulator/ (no auth): faults, clock, config, accounting, reset.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from emulator import batches, control, messages, tokens
from emulator.accounting import ReceivedRequest
from emulator.batch_store import BatchJournal
from emulator.calls import Call, Handler, list_page
from emulator.faults import FaultKind, FaultRule, error_for, retry_headers
from emulator.state import EmulatorConfig, EmulatorState, exhausted_headers, ratelimit_headers
from emulator.validation import ApiError, ErrorType, invalid

log = logging.getLogger("emulator")


class ConnectionResetFault(Exception):
    """Raised after a partial body so the server drops the connection mid-response."""


def _not_reset_noise(record: logging.LogRecord) -> bool:
    exc = record.exc_info[1] if record.exc_info else None
    while exc is not None:
        if isinstance(exc, ConnectionResetFault):
            return False
        exc = exc.__cause__ or exc.__context__
    return True


logging.getLogger("uvicorn.error").addFilter(_not_reset_noise)


async def _part_then_reset() -> Any:
    """A response body that stops after its first bytes: the connection drops mid-body."""
    yield b'{"id":"msg_'
    raise ConnectionResetFault("injected connection reset")


async def _cut_after(body: Any, lines: int) -> Any:
    """A streamed body that drops the connection after `lines` complete lines."""
    async for chunk in body:
        data = chunk if isinstance(chunk, bytes) else str(chunk).encode()
        while data:
            if lines <= 0:
                raise ConnectionResetFault("injected connection reset mid-stream")
            cut = data.find(b"\n")
            piece, data = (data, b"") if cut < 0 else (data[: cut + 1], data[cut + 1 :])
            lines -= piece.endswith(b"\n")
            yield piece


def _api_key(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer ") and auth[7:].strip():
        return auth[7:].strip()
    key = request.headers.get("x-api-key", "").strip()
    return key or None


def error_response(err: ApiError, request_id: str, extra: dict[str, str] | None = None) -> JSONResponse:
    headers = {**(extra or {}), **err.headers, "request-id": request_id}
    return JSONResponse(err.body(request_id), status_code=err.status, headers=headers)


def api_route(
    state: EmulatorState, handler: Handler, *, json_body: bool = False
) -> Callable[[Request], Awaitable[Any]]:
    async def endpoint(request: Request) -> Any:
        state.in_flight += 1
        try:
            return await _endpoint(request)
        finally:
            state.in_flight -= 1

    async def _endpoint(request: Request) -> Any:
        path = request.url.path
        state.accounting.note_received(path)
        request_id = state.new_id("req")
        call: Call | None = None
        try:
            key = _api_key(request)
            if key is None and state.config.require_auth:
                raise ApiError(
                    ErrorType.AUTHENTICATION, "x-api-key header or Authorization: Bearer is required"
                )
            call = Call(request, state, request_id, key or "anonymous")
            if not call.version:  # the API requires it on every /v1 call (the SDK always sends it)
                raise invalid("anthropic-version: header is required")
            if json_body:
                chunked = "chunked" in request.headers.get("transfer-encoding", "").lower()
                if chunked and state.config.reject_chunked_bodies:
                    raise ApiError(
                        ErrorType.INVALID_REQUEST,
                        "Length Required: chunked request bodies are refused",
                        status=411,
                    )
                raw = await request.body()
                declared = request.headers.get("content-length")
                if declared is not None and int(declared) != len(raw):
                    raise invalid(f"body: Content-Length {declared} does not match the {len(raw)} bytes sent")
                limit = (
                    state.config.max_batch_bytes
                    if path.endswith("/batches")
                    else state.config.max_message_bytes
                )
                if len(raw) > limit:
                    raise ApiError(
                        ErrorType.REQUEST_TOO_LARGE, f"Request exceeds the maximum size of {limit} bytes"
                    )
                try:
                    call.body = json.loads(raw)
                except ValueError:
                    raise invalid("body: Invalid JSON") from None
            if state.config.record_requests:
                state.accounting.requests.append(
                    ReceivedRequest(request.method, path, tuple(sorted(call.betas)), call.body)
                )
            hits = state.faults.for_http(path, call.body)
            delay = state.config.latency_ms + hits.latency_ms
            if delay > 0:
                await asyncio.sleep(delay / 1000.0)
            if hits.error is not None:
                raise error_for(hits.error)
            if hits.reset is not None and hits.reset.after_lines is None:
                headers = {"content-length": "4096", "request-id": request_id}
                return StreamingResponse(_part_then_reset(), media_type="application/json", headers=headers)
            call.shape, call.drop, call.stall = hits.response, hits.drop, hits.stall
            result = await handler(call)
            if hits.reset is not None and isinstance(result, StreamingResponse):
                result.body_iterator = _cut_after(result.body_iterator, hits.reset.after_lines or 0)
        except ApiError as err:
            state.accounting.note_error(err.status)
            if err.status == 429 and "anthropic-ratelimit-requests-limit" not in err.headers:
                retry = float(err.headers.get("retry-after-ms", "1000")) / 1000.0
                err.headers.update(exhausted_headers(state.clock.now(), retry))
            return error_response(err, request_id, {**limits(), **(call.extra_headers if call else {})})
        except Exception as exc:  # a bug in the emulator or its model: still answer like the API
            log.exception("emulator handler failed on %s", path)
            state.accounting.note_error(500)
            bug = ApiError(ErrorType.API_ERROR, f"Internal server error ({type(exc).__name__}: {exc})")
            return error_response(bug, request_id, limits())
        response = result if isinstance(result, Response) else JSONResponse(result)
        for name, value in {**limits(), **call.extra_headers}.items():
            response.headers.setdefault(name, value)
        response.headers["request-id"] = request_id
        return response

    def limits() -> dict[str, str]:
        return ratelimit_headers(state.limiter, state.config.ratelimit_header_defaults)

    return endpoint


async def create_message(call: Call) -> Response | dict[str, Any]:
    state, body = call.state, call.body
    state.validate(body, betas=call.betas, legacy=call.legacy)
    limiter = state.limiter
    if limiter.active:
        counted = tokens.count_tokens(body)
        if not state.config.input_limit_counts_cache_reads:  # the API does not count cache reads
            counted -= messages.cache_read_tokens(state, body, call.api_key)
        wait, which = limiter.check(counted, int(body["max_tokens"]))
        call.extra_headers.update(limiter.headers())
        if which is not None:
            headers = {**call.extra_headers, **retry_headers(wait)}
            raise ApiError(ErrorType.RATE_LIMIT, f"Rate limit exceeded: {which} per minute", headers=headers)
    ans = messages.answer(state, body, request_id=call.request_id, api_key=call.api_key, shape=call.shape)
    if limiter.active:
        limiter.settle_output(int(body["max_tokens"]), ans.output_tokens)
        call.extra_headers.update(limiter.headers())
    rate = state.config.output_tokens_per_second  # latency model: output tokens / rate of virtual time
    generation = state.clock.real_seconds(ans.output_tokens / rate) if rate > 0 else 0.0
    stall = state.clock.real_seconds(call.stall.seconds) if call.stall is not None else 0.0
    if body.get("stream"):
        fail = call.shape is not None and call.shape.kind is FaultKind.STREAM_ERROR
        events = list(messages.sse_events(ans.message, fail=fail))
        stall_at = _at(call.stall, 1, len(events)) if call.stall is not None else None
        drop_at = _at(call.drop, len(events) // 2, len(events)) if call.drop is not None else None
        return StreamingResponse(
            _paced(events, generation, stall_at, stall, drop_at),
            media_type="text/event-stream",
            headers={**call.extra_headers, "cache-control": "no-cache"},
        )
    if generation + stall > 0:
        await asyncio.sleep(generation + stall)  # the whole answer is generated before the first byte
    return ans.message


def _at(rule: FaultRule, default: int, events: int) -> int:
    """After how many SSE events a stream fault strikes (at least 1: the 200 and message_start)."""
    return max(1, min(events - 1, default if rule.after_events is None else rule.after_events))


async def _paced(
    chunks: list[bytes], seconds: float, stall_at: int | None, stall_seconds: float, drop_at: int | None
) -> Any:
    """One SSE answer going out: its generation time `seconds` spread between the frames (the first
    goes at once); a stall before frame `stall_at`, the connection dropped before frame `drop_at`."""
    step = seconds / max(len(chunks) - 1, 1)
    for i, chunk in enumerate(chunks):
        if i == drop_at:
            raise ConnectionResetFault("injected connection drop mid-stream")
        if i == stall_at and stall_seconds > 0:
            await asyncio.sleep(stall_seconds)
        if i and step > 0:
            await asyncio.sleep(step)
        yield chunk


async def count_message_tokens(call: Call) -> dict[str, Any]:
    call.state.validate(call.body, count_only=True, betas=call.betas, legacy=call.legacy)
    return {"input_tokens": tokens.count_tokens(call.body)}


def _model_info(model_id: str) -> dict[str, Any]:
    return {
        "type": "model",
        "id": model_id,
        "display_name": model_id.replace("-", " ").title(),
        "created_at": "2026-01-01T00:00:00Z",
        "lifecycle": "active",
        "deprecated_at": None,
        "retires_at": None,
    }


async def list_models(call: Call) -> dict[str, Any]:
    return list_page([_model_info(m) for m in sorted(call.state.served())], has_more=False)


async def get_model(call: Call) -> dict[str, Any]:
    model_id = call.request.path_params["model_id"]
    if model_id not in call.state.served():
        raise ApiError(ErrorType.NOT_FOUND, f"model: {model_id}")
    return _model_info(model_id)


def create_app(state: EmulatorState) -> Starlette:
    """The ASGI app answering for `state`."""

    def r(path: str, handler: Handler, methods: list[str], json_body: bool = False) -> Route:
        return Route(path, api_route(state, handler, json_body=json_body), methods=methods)

    routes = [
        r("/v1/messages", create_message, ["POST"], json_body=True),
        r("/v1/messages/count_tokens", count_message_tokens, ["POST"], json_body=True),
        r("/v1/messages/batches", batches.create_batch, ["POST"], json_body=True),
        r("/v1/messages/batches", batches.list_batches, ["GET"]),
        r("/v1/messages/batches/{batch_id}", batches.get_batch, ["GET"]),
        r("/v1/messages/batches/{batch_id}", batches.delete_batch, ["DELETE"]),
        r("/v1/messages/batches/{batch_id}/cancel", batches.cancel_batch, ["POST"]),
        r("/v1/messages/batches/{batch_id}/results", batches.batch_results, ["GET"]),
        r("/v1/models", list_models, ["GET"]),
        r("/v1/models/{model_id}", get_model, ["GET"]),
        *control.routes(state),
    ]

    async def not_routed(request: Request, exc: Exception) -> Response:
        state.accounting.note_received(request.url.path)
        status = getattr(exc, "status_code", 404)
        request_id = state.new_id("req")
        if status == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
            err = ApiError(ErrorType.INVALID_REQUEST, message, status=405)
        else:
            err = ApiError(ErrorType.NOT_FOUND, f"Not found: {request.method} {request.url.path}")
        state.accounting.note_error(err.status)
        return error_response(err, request_id)

    return Starlette(routes=routes, exception_handlers={404: not_routed, 405: not_routed})


class EmulatorServer:
    """Runs the emulator with uvicorn in a daemon thread; use as a context manager."""

    def __init__(
        self,
        config: EmulatorConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        journal: BatchJournal | None = None,
    ) -> None:
        """`journal`: batches are saved there and restored from it at start (see emulator.batches)."""
        self.state = EmulatorState(config)
        if journal is not None:
            self.state.batches.journal = journal
        self.app = create_app(self.state)
        self.host = host
        self.port = port  # the port listened on once started (a free one when 0)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def start(self) -> EmulatorServer:
        # IPPROTO_TCP explicitly: asyncio then sets TCP_NODELAY on accepted connections; without it
        # every keep-alive request waited ~44 ms for a delayed ACK (Nagle).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(2048)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            lifespan="off",
            log_config=None,  # never dictConfig: it closes every handler of the process (a flow run's)
            log_level="warning",
            access_log=False,
            loop="asyncio",
            http="h11",
            timeout_keep_alive=30,
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="docmill-emulator", daemon=True
        )
        self._thread.start()
        for _ in range(1000):
            if self._server.started or not self._thread.is_alive():
                break
            threading.Event().wait(0.005)
        if not self._server.started:
            raise RuntimeError("emulator server did not start")
        self.state.batches.restore(self.base_url + "/")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = None
        self._thread = None

    def __enter__(self) -> EmulatorServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""The realtime call awaited on the client's event loop (`AsyncModelClient.call`, as the per-file pass
does) against the real emulator through the real SDK: possibly billed timeouts, broken streams,
mid-stream errors, signals, invariant 3's slot, answers read as the same JSON as the SDK's own
reader, the Gate's order, and the loop's end while a thread still waits on it."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import pytest

from docmill.errors import ApiCallError, DocmillError, Interrupted
from docmill.settings import Settings
from docmill.shutdown import SHUTDOWN
from tasks.api.aio import Changes, Gate
from tasks.api.answers import CallLabel
from tasks.api.client import ModelClient
from tasks.api.pacing import RateLimiter, Ticket
from tests.fixtures.clock import FakeTime

PRIMARY = "claude-sonnet-5-5"


def client_for(emulator: Any, **api: Any) -> ModelClient:
    fake = FakeTime(emulator)
    values = {"backoff_max_seconds": 0.0, "fallback_model": None, "max_attempts": 5, **api}
    return ModelClient(
        Settings(api=values),
        base_url=emulator.base_url,
        api_key="test-key",
        clock=fake.clock,
        sleep=fake.sleep,
    )


def request(max_tokens: int = 200, text: str = "Vendor: ACME Corp\nTotal: 12.50") -> dict[str, Any]:
    content = f'<document id="a.txt">\n{text}\n</document>\nSummarize.'
    return {"model": PRIMARY, "max_tokens": max_tokens, "messages": [{"role": "user", "content": content}]}


def acall(client: ModelClient, req: dict[str, Any], **kw: Any) -> Any:
    aio = client.aio
    return aio.loop.run(aio.call(req, key="k", doc_id="a.txt", pass_name="file", **kw))


def _set(value: Any) -> Any:
    """A Message's JSON without fields at None, the per-answer ids and signatures, and the model asked."""
    if isinstance(value, dict):
        skip = ("id", "_request_id", "_asked_model", "signature")
        return {k: _set(v) for k, v in value.items() if v is not None and k not in skip}
    if isinstance(value, list):
        return [_set(v) for v in value]
    return value


def received(emulator: Any) -> int:
    return int(emulator.state.accounting.received_by_path["/v1/messages"])


@pytest.mark.parametrize("max_tokens", [200, 9000])  # unstreamed, streamed
def test_an_answer_reads_as_the_json_the_api_sent_and_is_persisted_first(
    emulator: Any, max_tokens: int
) -> None:
    client = client_for(emulator)
    helper = client.stream(request(max_tokens), label=CallLabel("file", "a.txt", "k"))  # the SDK's reader
    seen: list[tuple[int, dict[str, Any]]] = []
    result = acall(client, request(max_tokens), on_response=lambda n, m: seen.append((n, m)))
    assert seen and seen[0][1] is result.message and result.attempts == 1
    # read whole or off the raw events, the Message the SDK's stream helper builds (its dump adds
    # fields at None)
    dumped = helper.model_dump(mode="json", exclude={"content": {"__all__": {"parsed_output"}}})
    assert _set(result.message) == _set(dumped)
    assert result.cost_usd == pytest.approx(emulator.state.accounting.billed[-1].usd)
    assert result.request_id and result.request_id.startswith("req_")


def test_a_timeout_after_sending_is_possibly_billed_and_resent_once(emulator: Any) -> None:
    emulator.state.faults.add(kind="latency", latency_ms=1200)  # every attempt outlasts the timeout
    client = client_for(emulator, timeout_seconds=0.3)
    seen: list[Any] = []
    client.on_possibly_billed = seen.append
    with pytest.raises(ApiCallError) as info:
        acall(client, request())
    assert info.value.attempts == 2 and received(emulator) == 2  # sent, then resent once, never more
    assert len(seen) == 2 and seen == client.possibly_billed and all(p.usd > 0 for p in seen)


def test_a_stream_cut_after_the_200_is_possibly_billed_and_resent(emulator: Any) -> None:
    emulator.state.faults.add(kind="connection_reset", after_lines=6, count=1)
    client = client_for(emulator)
    result = acall(client, request(9000))  # streams
    assert result.attempts == 2 and received(emulator) == 2 and result.message["content"]
    assert len(client.possibly_billed) == 1  # the cut answer may have been billed: recorded


def test_an_error_event_mid_stream_is_retried_like_the_sdk_names_it(emulator: Any) -> None:
    emulator.state.faults.add(kind="stream_error", count=1)  # overloaded_error after the 200
    client = client_for(emulator)
    result = acall(client, request(9000))
    assert result.attempts == 2 and "HTTP 200 overloaded_error" in result.errors[0]


def test_nothing_is_sent_after_a_signal(emulator: Any) -> None:
    client = client_for(emulator)
    SHUTDOWN.request("SIGTERM")
    try:
        with pytest.raises(Interrupted):
            acall(client, request())
    finally:
        SHUTDOWN.reset()
    assert emulator.state.accounting.received_by_path.get("/v1/messages", 0) == 0


def test_gate_serves_follow_ups_first_and_a_stop_reaches_every_waiter() -> None:
    fake = FakeTime()
    lim = RateLimiter(4000, 2_000_000, concurrency=1, ramp_seconds=0, clock=fake.clock)
    stopped: list[BaseException] = []

    def stop() -> None:
        if stopped:
            raise stopped[0]

    async def scenario() -> tuple[list[str], list[str]]:
        changes = Changes()
        gate = Gate(lim, changes, asyncio.sleep, stop)
        order: list[str] = []
        first = await gate.acquire(10, 0)  # the window (1) is now full

        async def ask(name: str, follow_up: bool) -> None:
            ticket = await gate.acquire(10, 0, follow_up=follow_up)
            order.append(name)
            lim.release(ticket)
            changes.notify()

        waiting = [
            asyncio.create_task(ask(n, n.startswith("repair"))) for n in ("new-1", "new-2", "repair-1")
        ]
        await asyncio.sleep(0.01)
        lim.release(first)
        changes.notify()
        await asyncio.gather(*waiting)
        held = await gate.acquire(10, 0)
        late = [asyncio.create_task(gate.acquire(10, 0)) for _ in range(3)]
        await asyncio.sleep(0.01)
        stopped.append(Interrupted("SIGINT received", hint="", signal_name="SIGINT", run_id=None))
        outcomes = await asyncio.gather(*late, return_exceptions=True)
        lim.release(held)
        return order, [type(o).__name__ for o in outcomes]

    order, outcomes = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert order == ["repair-1", "new-1", "new-2"]  # the started document's follow-up first
    assert outcomes == ["Interrupted"] * 3  # every waiter gets the stop, none waits for its turn
    assert isinstance(Ticket, type)


def test_a_pacer_wait_ends_early_when_an_answer_raises_the_limits() -> None:
    # Before any answer the pacer paces at the assumed limits (here 30 requests/min: the second
    # request would wait 2 s). The first answer's headers say the organisation allows far more:
    # the waiting request goes then, not after the wait the assumed limits asked for.
    lim = RateLimiter(30, 10**9, ramp_seconds=0)

    async def scenario() -> float:
        changes = Changes()
        gate = Gate(lim, changes, asyncio.sleep, lambda: None)
        first = await gate.acquire(10, 0)
        second = asyncio.create_task(gate.acquire(10, 0))
        await asyncio.sleep(0.05)
        assert not second.done()  # paced: the assumed limit holds until an answer says otherwise
        loop = asyncio.get_running_loop()
        start = loop.time()
        raised = {
            "anthropic-ratelimit-requests-limit": "600000",
            "anthropic-ratelimit-requests-remaining": "599999",
        }
        lim.release(first, usage={"input_tokens": 10, "output_tokens": 1}, headers=raised)
        changes.notify()
        lim.release(await second)
        return loop.time() - start

    waited = asyncio.run(asyncio.wait_for(scenario(), 8))
    assert waited < 1.0  # the pacer's 2 s wait, cut short by the answer


def _closes_after_the_request() -> tuple[str, threading.Thread]:
    """A server that reads one whole request and closes the connection without a word: what a
    proxy or an API host that died mid-request looks like from the client."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(
                next(
                    v
                    for k, v in (h.split(b":", 1) for h in head.split(b"\r\n")[1:])
                    if k.lower() == b"content-length"
                )
            )
            while len(body) < length:
                body += conn.recv(65536)
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{server.getsockname()[1]}", thread


@pytest.mark.parametrize("http_client", ["aiohttp", "httpx"])
def test_a_connection_closed_after_the_request_is_possibly_billed_a_refused_one_is_not(
    http_client: str,
) -> None:
    # Invariant 13 with either client: aiohttp names a server that closed after the request and a
    # refused connect alike (httpx2.ConnectError); only the first may have been billed.
    def client(base_url: str) -> ModelClient:
        api = {"max_attempts": 1, "fallback_model": None, "http_client": http_client, "timeout_seconds": 5.0}
        return ModelClient(Settings(api=api), base_url=base_url, api_key="test-key")

    url, server = _closes_after_the_request()
    closed = client(url)
    with pytest.raises(ApiCallError):
        acall(closed, request())
    server.join(timeout=5)
    assert [p.reason for p in closed.possibly_billed] == ["broken"]

    spare = socket.create_server(("127.0.0.1", 0))
    port = spare.getsockname()[1]
    spare.close()  # nothing listens there: the connect is refused, nothing was sent
    refused = client(f"http://127.0.0.1:{port}")
    with pytest.raises(ApiCallError):
        acall(refused, request())
    assert refused.possibly_billed == []


def test_the_slot_is_held_while_the_answer_is_persisted_and_given_back_before_the_gate(emulator: Any) -> None:
    # Invariant 3: a request holds its place in the window until its answer is persisted; the gate
    # and the ledger (`then`) run after, so the next request does not wait for them.
    client = client_for(emulator, concurrency=1)
    seen: list[tuple[str, int]] = []

    def persist(attempt: int, message: dict[str, Any]) -> None:
        seen.append(("persist", client.limiter._in_flight))

    def then(message: dict[str, Any]) -> None:
        seen.append(("then", client.limiter._in_flight))

    acall(client, request(), on_response=persist, then=then)
    assert seen == [("persist", 1), ("then", 0)]


def test_a_close_while_another_thread_waits_on_the_loop_ends_the_loop_after_its_answer(emulator: Any) -> None:
    """The run stops and closes its client while a flow's chunk task still waits on the loop for an
    answer (a Prefect task thread finishes after the flow's body): the wait ends with the answer, then
    the loop and its threads end; nothing waits forever on a stopped loop."""
    client = client_for(emulator)
    emulator.state.config.latency_ms = 300.0
    got: list[Any] = []
    caller = threading.Thread(target=lambda: got.append(acall(client, request())), daemon=True)
    caller.start()
    while received(emulator) < 1:
        caller.join(0.005)
    loop = client.aio.loop
    client.close()  # from the run's thread, the request still in flight
    caller.join(10)
    assert not caller.is_alive() and got and got[0].message["content"]
    loop.thread.join(10)
    assert not loop.thread.is_alive()
    with pytest.raises(DocmillError, match="closed"):  # a late caller is told, not left waiting
        loop.run(asyncio.sleep(0))
    assert acall(client, request()).message["content"]  # the client itself makes a new loop
    client.close()

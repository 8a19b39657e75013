"""ModelClient's face for threads against the real emulator through the real SDK (each call runs on
the client's event loop); only time is faked."""

from __future__ import annotations

import threading
import time
from typing import Any

import anthropic
import pytest

from docmill.errors import ApiCallError
from docmill.settings import Settings
from tasks.api.client import ModelClient
from tasks.api.retrying import backoff_seconds, is_retryable
from tests.fixtures.clock import FakeTime

PRIMARY = "claude-sonnet-4-6"
FALLBACK = "claude-haiku-4-5"


def make_settings(**api: Any) -> Settings:
    values: dict[str, Any] = {"backoff_max_seconds": 0.0, "fallback_model": FALLBACK, "max_attempts": 5}
    values.update(api)
    return Settings(api=values)


def make_client(emulator: Any, fake: FakeTime, **api: Any) -> ModelClient:
    return ModelClient(
        make_settings(**api),
        base_url=emulator.base_url,
        api_key="test-key",
        clock=fake.clock,
        sleep=fake.sleep,
    )


def request(text: str = "Vendor: ACME Corp\nTotal: 12.50", model: str = PRIMARY) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": 200,
        "messages": [{"role": "user", "content": f'<document id="a.txt">\n{text}\n</document>\nSummarize.'}],
    }


def received(emulator: Any) -> int:
    return int(emulator.state.accounting.received_by_path["/v1/messages"])


def call(client: ModelClient, req: dict[str, Any] | None = None, **kw: Any) -> Any:
    return client.call(req or request(), key="k", doc_id="a.txt", pass_name="file", **kw)


def test_success_reports_usage_cost_and_persists_before_returning(emulator: Any) -> None:
    fake = FakeTime(emulator)
    client = make_client(emulator, fake)
    seen: list[tuple[int, dict[str, Any]]] = []
    result = call(client, on_response=lambda n, m: seen.append((n, m)))
    assert result.attempts == 1 and received(emulator) == 1
    assert seen and seen[0][0] == 1 and seen[0][1]["id"] == result.message["id"]
    assert result.usage["input_tokens"] > 0 and result.cost_usd > 0
    assert result.request_id and result.request_id.startswith("req_")
    assert result.model == PRIMARY and not result.fell_back
    assert emulator.state.accounting.billed[0].usd == pytest.approx(result.cost_usd)


def test_400_is_never_retried(emulator: Any) -> None:
    fake = FakeTime(emulator)
    emulator.state.faults.add(kind="invalid_request")
    client = make_client(emulator, fake)
    with pytest.raises(ApiCallError) as info:
        call(client)
    err = info.value
    assert received(emulator) == 1
    assert err.attempts == 1 and err.status == 400 and err.failure_type == "api_error:400"
    assert err.request_id and fake.sleeps == []
    assert not isinstance(err.__cause__, ApiCallError)  # wrapped from the SDK error, not a RetryError


def test_429_waits_exactly_retry_after(emulator: Any) -> None:
    fake = FakeTime(emulator)
    emulator.state.faults.add(kind="rate_limit", retry_after=7, count=1)
    client = make_client(emulator, fake)
    result = call(client)
    assert result.attempts == 2 and received(emulator) == 2
    assert client.sleeps == [7.0]  # the transport wait of this request
    assert fake.sleeps == [7.0]  # and nothing else: 7 s refilled the bucket the 429 said was empty


def test_retry_after_delays_only_the_request_that_got_the_429(emulator: Any) -> None:
    fake = FakeTime(emulator)
    emulator.state.faults.add(kind="rate_limit", retry_after=30, count=1)
    client = make_client(emulator, fake, max_attempts=1)
    with pytest.raises(ApiCallError):
        call(client)
    call(client)  # a different request: paced by the bucket the 429 described, not held 30 s
    assert sum(fake.sleeps) < 3.0
    assert client.limiter.stats.throttled == 1


@pytest.mark.parametrize("failures", [0, 1, 2, 3])
@pytest.mark.parametrize("kind", ["server_error", "connection_reset", "overloaded_no_fallback"])
def test_retry_attempt_counts(emulator: Any, failures: int, kind: str) -> None:
    fake = FakeTime(emulator)
    fault = "overloaded" if kind == "overloaded_no_fallback" else kind
    if failures:
        emulator.state.faults.add(kind=fault, count=failures)
    client = make_client(emulator, fake, fallback_model=None)
    result = call(client)
    assert result.attempts == failures + 1
    assert received(emulator) == failures + 1
    assert len(emulator.state.accounting.billed) == 1
    assert fake.sleeps == [0.0] * failures  # zero backoff, one wait per retry


def test_x_should_retry_false_wins_over_status(emulator: Any) -> None:
    fake = FakeTime(emulator)
    emulator.state.faults.add(kind="server_error", should_retry=False)
    client = make_client(emulator, fake)
    with pytest.raises(ApiCallError) as info:
        call(client)
    assert info.value.attempts == 1 and received(emulator) == 1


def test_x_should_retry_true_retries_a_4xx(emulator: Any) -> None:
    fake = FakeTime(emulator)
    emulator.state.faults.add(kind="invalid_request", should_retry=True, count=1)
    client = make_client(emulator, fake)
    assert call(client).attempts == 2


def test_transport_exhausted_is_an_api_call_error(emulator: Any) -> None:
    fake = FakeTime(emulator)
    emulator.state.faults.add(kind="server_error")
    client = make_client(emulator, fake, max_attempts=4)
    with pytest.raises(ApiCallError) as info:
        call(client)
    err = info.value
    assert err.failure_type == "transport_exhausted" and err.attempts == 4 and received(emulator) == 4
    assert "500" in err.last_error and "test-key" not in str(err) and "test-key" not in repr(client)


def test_529_ladder_falls_back_and_says_so(emulator: Any) -> None:
    fake = FakeTime(emulator)
    emulator.state.faults.add(kind="overloaded", marker=PRIMARY)  # the primary is always overloaded
    client = make_client(emulator, fake, overloads_before_fallback=3)
    result = call(client)
    assert result.fell_back and result.model == FALLBACK
    # the fallback is an alias before 4.6: the answer names its dated id, the price is the alias's
    assert result.message["model"] == "claude-haiku-4-5-20251001"
    assert result.message["_asked_model"] == FALLBACK
    assert result.attempts == 4 and received(emulator) == 4
    assert [b.model for b in emulator.state.accounting.billed] == [FALLBACK]
    assert result.cost_usd == pytest.approx(emulator.state.accounting.total_usd()) and result.cost_usd > 0


def test_529_past_the_fallback_is_an_honest_failure(emulator: Any) -> None:
    fake = FakeTime(emulator)
    emulator.state.faults.add(kind="overloaded")
    client = make_client(emulator, fake, overloads_before_fallback=2, max_attempts=3)
    with pytest.raises(ApiCallError) as info:
        call(client)
    err = info.value
    assert err.failure_type == "transport_exhausted" and err.fell_back and err.model == FALLBACK
    assert err.attempts == 2 + 3 and received(emulator) == 5


def test_non_overload_failures_reset_the_ladder(emulator: Any) -> None:
    fake = FakeTime(emulator)
    for kind in ("overloaded", "server_error", "overloaded", "overloaded"):
        emulator.state.faults.add(kind=kind, count=1)
    client = make_client(emulator, fake, overloads_before_fallback=2, max_attempts=6)
    result = call(client)
    # 529, 500 (resets), 529, 529 -> fallback answers the 5th attempt
    assert result.model == FALLBACK and result.attempts == 5


def test_concurrency_is_bounded_by_the_setting(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`api.concurrency` bounds the requests in flight: six threads' calls go two at a time."""
    import tasks.api.client as module

    emulator.state.configure({"latency_ms": 100.0})
    client = ModelClient(make_settings(concurrency=2), base_url=emulator.base_url, api_key="test-key")
    active, peak = [0], [0]
    read = module.read_answer

    async def counting(*args: Any, **kw: Any) -> Any:  # on the client's one loop: no lock needed
        active[0] += 1
        peak[0] = max(peak[0], active[0])
        try:
            return await read(*args, **kw)
        finally:
            active[0] -= 1

    monkeypatch.setattr(module, "read_answer", counting)
    started = time.monotonic()
    threads = [threading.Thread(target=call, args=(client,)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 2
    assert time.monotonic() - started >= 0.3  # 6 calls x 100 ms / 2 in flight
    assert received(emulator) == 6
    client.close()


def test_retry_policy_is_one_function() -> None:
    assert backoff_seconds(1, cap=30, rng=lambda: 0.0) == 0.5
    assert backoff_seconds(10, cap=30, rng=lambda: 0.0) == 30
    assert backoff_seconds(3, cap=0, rng=lambda: 0.5) == 0
    assert not is_retryable(ValueError("not an API error"))


def test_timeout_is_retried_by_the_one_layer(emulator: Any) -> None:
    fake = FakeTime(emulator)
    emulator.state.faults.add(kind="latency", latency_ms=1500, count=1)
    client = make_client(emulator, fake, timeout_seconds=0.3)
    result = call(client)
    assert result.attempts == 2 and client.sleeps == [0.0]
    assert "timed out" in result.errors[0]


def test_retry_after_header_forms() -> None:
    from email.utils import formatdate

    from tasks.api.retrying import retry_after_seconds

    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_seconds({"retry-after": "7"}) == 7.0
    date = formatdate(1_000_030.0, usegmt=True)
    assert retry_after_seconds({"retry-after": date}, now=lambda: 1_000_000.0) == 30.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


def test_a_200_that_is_not_a_message_is_a_clear_failure_not_retried(tmp_path: Any) -> None:
    """A wrong base URL or a proxy's page answers 200 with HTML: one attempt, an ApiCallError that
    says what came back and what to check (a real HTTP server, the real SDK)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    hits: list[str] = []

    class Portal(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            hits.append(self.path)
            body = b"<html><body>Please sign in to the network</body></html>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Portal)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        fake = FakeTime()
        client = ModelClient(
            make_settings(),
            base_url=f"http://127.0.0.1:{server.server_port}",
            api_key="test-key",
            clock=fake.clock,
            sleep=fake.sleep,
        )
        with pytest.raises(ApiCallError) as e:
            call(client)
    finally:
        server.shutdown()
    assert hits == ["/v1/messages"] and fake.sleeps == []  # sent once, never retried
    err = e.value
    assert err.failure_type == "api_error:not_a_message"
    assert "not a Message (text/html" in err.one_line() and "DOCMILL_API__BASE_URL" in err.one_line()


def test_timeout_after_sending_is_possibly_billed_and_resent_once(emulator: Any) -> None:
    fake = FakeTime(emulator)
    emulator.state.faults.add(kind="latency", latency_ms=1200)  # every attempt outlasts the timeout
    client = make_client(emulator, fake, timeout_seconds=0.3)
    seen: list[Any] = []
    client.on_possibly_billed = seen.append
    with pytest.raises(ApiCallError) as info:
        call(client)
    assert info.value.attempts == 2 and received(emulator) == 2  # sent, then resent once, never more
    assert len(seen) == 2 and seen == client.possibly_billed
    assert all(p.usd > 0 and p.key == "k" and p.doc_id == "a.txt" and p.max_tokens == 200 for p in seen)
    assert emulator.state.drain()
    assert len(emulator.state.accounting.billed) == 2  # the API did bill both
    assert sum(p.usd for p in seen) >= emulator.state.accounting.total_usd()  # worst case covers it


def test_long_answer_streams_through_a_short_read_timeout(emulator: Any) -> None:
    """A call at or above stream_min_max_tokens streams: with answer time growing with output tokens,
    it completes where the same call unstreamed times out."""
    fake = FakeTime(emulator)
    long_call = {**request(), "max_tokens": 2048}
    plain = make_client(emulator, fake, stream_min_max_tokens=10_000)
    quick = call(plain, long_call).usage["output_tokens"]
    emulator.state.configure({"output_tokens_per_second": quick / 1.0})  # ~1 s per answer
    emulator.state.accounting.reset()
    unstreamed = make_client(
        emulator, fake, timeout_seconds=0.4, stream_min_max_tokens=10_000, max_attempts=1
    )
    with pytest.raises(ApiCallError, match="timed out"):
        call(unstreamed, long_call)
    streamed = make_client(emulator, fake, timeout_seconds=0.4, stream_min_max_tokens=2048)
    result = call(streamed, long_call)  # each read well inside 0.4 s
    assert result.attempts == 1 and result.message["content"] and result.usage["output_tokens"] == quick
    assert result.request_id and result.cost_usd == pytest.approx(emulator.state.accounting.billed[-1].usd)
    assert not streamed.possibly_billed and len(unstreamed.possibly_billed) == 1


def test_an_unstreamed_answer_is_waited_for_in_proportion_to_its_max_tokens(emulator: Any) -> None:
    """Below stream_min_max_tokens (8,192 by default: a per-file answer of ~300 tokens streamed cost
    ~1 ms more CPU) an answer comes whole; timeout_seconds covers 2,048 max_tokens and a larger
    max_tokens gets it in proportion, so a 4,096 call waits twice as long."""
    fake = FakeTime(emulator)
    big = {**request(), "max_tokens": 4096}
    quick = call(make_client(emulator, fake), big).usage["output_tokens"]
    emulator.state.configure({"output_tokens_per_second": quick / 0.7})  # ~0.7 s per answer
    small_timeout = make_client(emulator, fake, timeout_seconds=0.5, max_attempts=1)
    assert call(small_timeout, big).attempts == 1  # waited up to 1.0 s, not 0.5
    with pytest.raises(ApiCallError, match="timed out"):
        call(small_timeout, {**big, "max_tokens": 2048})  # 2,048: the 0.5 s as configured


def test_409_is_retried_in_realtime_as_in_batch_results(emulator: Any) -> None:
    from tasks.api.retrying import RETRYABLE_ERROR_TYPES

    fake = FakeTime(emulator)
    emulator.state.faults.add(kind="conflict", count=1)
    result = call(make_client(emulator, fake))
    assert result.attempts == 2 and "409 conflict_error" in result.errors[0]
    assert "conflict_error" in RETRYABLE_ERROR_TYPES  # the batch router retries the same failures


def _streamed(max_tokens: int = 8192) -> dict[str, Any]:
    return {**request(), "max_tokens": max_tokens}  # from 8,192 (api.stream_min_max_tokens) a call streams


def test_a_dropped_stream_is_retried_and_recorded_at_its_bound(emulator: Any) -> None:
    """A connection dropped mid-stream (httpx2 RemoteProtocolError out of get_final_message) is a
    retried transport failure; the dropped attempt, which the API billed, is recorded as possibly billed
    at the input message_start reported plus max_tokens of output (an upper bound of the bill)."""
    fake = FakeTime(emulator)
    emulator.state.faults.add(kind="stream_drop", count=1)  # mid-content: no final usage yet
    client = make_client(emulator, fake)
    result = call(client, _streamed())
    assert result.attempts == 2 and "dropped mid-stream" in result.errors[0]
    [dropped] = client.possibly_billed
    assert dropped.possibly and dropped.reason == "dropped" and dropped.attempt == 1
    assert emulator.state.drain()
    first, second = emulator.state.accounting.billed  # the API billed the dropped attempt too
    assert dropped.input_tokens == first.input_tokens  # from message_start, exact
    assert dropped.usd >= first.usd and result.cost_usd == pytest.approx(second.usd)
    assert client.budget.spent_usd == pytest.approx(dropped.usd + result.cost_usd)  # the cap counts it


def test_a_stream_dropped_after_its_final_usage_is_recorded_exactly(emulator: Any) -> None:
    fake = FakeTime(emulator)
    emulator.state.faults.add(kind="stream_drop", count=1, after_events=10_000)  # before message_stop
    client = make_client(emulator, fake)
    result = call(client, _streamed())
    [dropped] = client.possibly_billed
    assert not dropped.possibly and dropped.usage is not None
    assert emulator.state.drain()
    bill = emulator.state.accounting.total_usd()
    assert abs(dropped.usd + result.cost_usd - bill) < 1e-9


def test_a_stream_stalled_past_the_read_timeout_is_possibly_billed_and_resent_once(emulator: Any) -> None:
    """A stall longer than the read timeout while the answer streams is a timeout after sending: the
    attempt is possibly billed and the request resent at most `api.timeout_resends` times."""
    fake = FakeTime(emulator)
    emulator.state.faults.add(kind="stall", seconds=1.5)  # every attempt stalls past the 0.4 s timeout
    client = make_client(emulator, fake, timeout_seconds=0.4)
    with pytest.raises(ApiCallError, match="timed out while the answer streamed"):
        call(client, _streamed())
    assert received(emulator) == 2 and len(client.possibly_billed) == 2
    assert all(p.reason == "timeout" and p.possibly for p in client.possibly_billed)
    assert emulator.state.drain()
    assert sum(p.usd for p in client.possibly_billed) >= emulator.state.accounting.total_usd() > 0


def test_a_mid_stream_error_event_is_recorded_as_possibly_billed(emulator: Any) -> None:
    fake = FakeTime(emulator)
    emulator.state.faults.add(kind="stream_error", count=1)  # overloaded_error after the 200
    client = make_client(emulator, fake, fallback_model=None)
    result = call(client, _streamed())
    assert result.attempts == 2 and [p.reason for p in client.possibly_billed] == ["stream_error"]
    assert emulator.state.drain()
    assert client.possibly_billed[0].usd + result.cost_usd >= emulator.state.accounting.total_usd()


def test_stream_is_for_long_calls_and_records_what_it_may_have_cost(emulator: Any) -> None:
    """`ModelClient.stream` (long tasks, compaction): a long answer streams through a read timeout a
    non-streamed call would hit; a stall past it is possibly billed, resent at most once."""
    from tasks.api.answers import CallLabel

    fake = FakeTime(emulator)
    client = make_client(emulator, fake, timeout_seconds=0.4)
    label = CallLabel("context", "doc.txt", "task-x000001")
    quick = client.stream(_streamed(), label=label).usage.output_tokens
    emulator.state.configure({"output_tokens_per_second": quick / 1.0})  # ~1 s per answer, streamed
    message = client.stream(_streamed(), label=label)
    assert message._request_id and message.usage.output_tokens == quick
    emulator.state.configure({"output_tokens_per_second": 0.0})
    emulator.state.faults.add(kind="stall", seconds=1.5)
    with pytest.raises(anthropic.APIConnectionError):
        client.stream(_streamed(), label=label)
    assert [(p.doc_id, p.key, p.reason) for p in client.possibly_billed] == [
        ("doc.txt", "task-x000001", "timeout")
    ] * 2

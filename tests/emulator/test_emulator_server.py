"""Server-wide behaviour (emulator/server.py): rate-limit headers on every answer, results_url on the
emulator's own address, the output-tokens latency model, cancel of an ended batch."""

from __future__ import annotations

import time

import anthropic
import httpx2
import pytest

from emulator.server import EmulatorServer
from tests.fixtures.emulator import pass_batch_time, sdk_client

MODEL = "claude-sonnet-4-6"
ASK: list = [{"role": "user", "content": "Vendor: ACME\nTotal: 3 EUR"}]
KINDS = ("requests", "input-tokens", "output-tokens")


def _has_limits(headers: httpx2.Headers) -> bool:
    return all(
        f"anthropic-ratelimit-{k}-{part}" in headers
        for k in KINDS
        for part in ("limit", "remaining", "reset")
    )


def test_ratelimit_headers_on_every_answer(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    raw = client.messages.with_raw_response.create(model=MODEL, max_tokens=20, messages=ASK)
    assert _has_limits(raw.headers) and int(raw.headers["anthropic-ratelimit-requests-limit"]) >= 1000
    counted = client.messages.with_raw_response.count_tokens(model=MODEL, messages=ASK)
    assert _has_limits(counted.headers)
    with client.messages.with_streaming_response.create(
        model=MODEL, max_tokens=20, messages=ASK, stream=True
    ) as streamed:
        assert _has_limits(streamed.headers)
    with pytest.raises(anthropic.NotFoundError) as info:
        client.messages.create(model="claude-nope", max_tokens=20, messages=ASK)
    assert _has_limits(info.value.response.headers)
    emulator.state.configure({"requests_per_minute": 7})
    limited = client.messages.with_raw_response.create(model=MODEL, max_tokens=20, messages=ASK)
    assert limited.headers["anthropic-ratelimit-requests-limit"] == "7"
    assert limited.headers["anthropic-ratelimit-input-tokens-limit"] == "2000000"  # the generous default


def test_results_url_is_the_emulators_own_address_whatever_the_host(emulator: EmulatorServer) -> None:
    params = {"model": MODEL, "max_tokens": 20, "messages": ASK}
    response = httpx2.post(
        emulator.url("/v1/messages/batches"),
        json={"requests": [{"custom_id": "a", "params": params}]},
        headers={"x-api-key": "k", "anthropic-version": "2023-06-01", "host": "proxy.example:9999"},
    )
    pass_batch_time(emulator)
    url = sdk_client(emulator).messages.batches.retrieve(response.json()["id"]).results_url
    assert url == f"{emulator.base_url}/v1/messages/batches/{response.json()['id']}/results"
    emulator.state.configure({"public_base_url": "http://emulator.test:1/"})
    again = sdk_client(emulator).messages.batches.create(requests=[{"custom_id": "b", "params": params}])  # type: ignore[misc]
    pass_batch_time(emulator)
    again = sdk_client(emulator).messages.batches.retrieve(again.id)
    assert again.results_url == f"http://emulator.test:1/v1/messages/batches/{again.id}/results"


def test_answer_time_grows_with_output_tokens_and_streaming_outlasts_a_read_timeout(
    emulator: EmulatorServer,
) -> None:
    client = sdk_client(emulator)
    fast = client.messages.create(model=MODEL, max_tokens=400, messages=ASK)
    emulator.state.configure({"output_tokens_per_second": fast.usage.output_tokens / 1.2})  # ~1.2 s
    started = time.monotonic()
    client.messages.create(model=MODEL, max_tokens=400, messages=ASK)
    assert time.monotonic() - started >= 1.1
    started = time.monotonic()
    client.messages.create(model=MODEL, max_tokens=2, messages=ASK)  # 2 tokens: quick
    assert time.monotonic() - started < 0.5
    impatient = sdk_client(emulator, timeout=0.6)
    with pytest.raises(anthropic.APITimeoutError):
        impatient.messages.create(model=MODEL, max_tokens=400, messages=ASK)
    with impatient.messages.stream(model=MODEL, max_tokens=400, messages=ASK) as stream:
        final = stream.get_final_message()
    assert final.usage.output_tokens == fast.usage.output_tokens


@pytest.mark.parametrize("status", [400, 409, 200])
def test_cancel_of_an_ended_batch_answers_as_configured(emulator: EmulatorServer, status: int) -> None:
    emulator.state.configure({"cancel_ended_status": status})
    client = sdk_client(emulator)
    params = {"model": MODEL, "max_tokens": 20, "messages": ASK}
    batch = client.messages.batches.create(requests=[{"custom_id": "a", "params": params}])  # type: ignore[misc]
    pass_batch_time(emulator)
    assert client.messages.batches.retrieve(batch.id).processing_status == "ended"
    if status == 200:
        assert client.messages.batches.cancel(batch.id).processing_status == "ended"
    else:
        with pytest.raises(anthropic.APIStatusError) as info:
            client.messages.batches.cancel(batch.id)
        assert info.value.status_code == status


def test_starting_leaves_the_process_logging_alone() -> None:
    """The built-in emulator starts inside a flow run (a run without an API key): it must not
    reconfigure the process's logging. uvicorn's default config (logging.config.dictConfig) flushed
    and closed every handler of the process, Prefect's API log handler among them, while holding
    logging's lock: a flow run's heartbeat thread starting Prefect's event loop at that moment
    deadlocked the run (seen in test_flows_kill)."""
    import logging

    class Kept(logging.Handler):
        closed = False

        def emit(self, record: logging.LogRecord) -> None:
            pass

        def close(self) -> None:
            self.closed = True
            super().close()

    kept = Kept()
    logging.getLogger("docmill.test.kept").addHandler(kept)
    try:
        with EmulatorServer():
            pass
        assert not kept.closed
    finally:
        logging.getLogger("docmill.test.kept").removeHandler(kept)

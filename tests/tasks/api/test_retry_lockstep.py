"""The thread face and the event loop in lockstep: the same transport faults sent through
`ModelClient.call` (a thread waiting on the loop) and `AsyncModelClient.call` (awaited on the loop, as
the per-file pass does) end alike: attempts, requests received, the waits between them, the model
that answered and the error a call ends with. The face runs the loop's call, so a face that changed
what a call returns or raises shows here."""

from __future__ import annotations

from typing import Any

import pytest

from docmill.errors import ApiCallError
from docmill.settings import Settings
from tasks.api.client import ModelClient
from tests.fixtures.clock import FakeTime
from tests.fixtures.today import emulator_config

PRIMARY = "claude-sonnet-4-6"
FALLBACK = "claude-haiku-4-5"
REQUEST = {
    "model": PRIMARY,
    "max_tokens": 200,
    "messages": [{"role": "user", "content": '<document id="a.txt">\nTotal: 12.50\n</document>\nSummarize.'}],
}
SCENARIOS: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {
    "a 429 with retry-after": ([{"kind": "rate_limit", "retry_after": 7, "count": 1}], {}),
    "two 500s": ([{"kind": "server_error", "count": 2}], {}),
    "resets": ([{"kind": "connection_reset", "count": 2}], {}),
    "a 400": ([{"kind": "invalid_request", "count": 1}], {}),
    "x-should-retry false": ([{"kind": "server_error", "should_retry": False}], {}),
    "exhausted": ([{"kind": "server_error"}], {"max_attempts": 3}),
    "529 ladder": ([{"kind": "overloaded", "marker": PRIMARY}], {"overloads_before_fallback": 2}),
    "529 past the fallback": ([{"kind": "overloaded"}], {"overloads_before_fallback": 2, "max_attempts": 2}),
}


def outcome(emulator: Any, face: str, faults: list[dict[str, Any]], api: dict[str, Any]) -> dict[str, Any]:
    emulator.state.drain()
    emulator.state.reset(emulator_config())
    for fault in faults:
        emulator.state.faults.add(**fault)
    fake = FakeTime(emulator)
    values = {"backoff_max_seconds": 4.0, "fallback_model": FALLBACK, "max_attempts": 5, **api}
    client = ModelClient(
        Settings(api=values),
        base_url=emulator.base_url,
        api_key="k",
        clock=fake.clock,
        sleep=fake.sleep,
        rng=lambda: 0.5,
    )
    kw: dict[str, Any] = {"key": "k", "doc_id": "a.txt", "pass_name": "file"}
    try:
        if face == "thread":
            result = client.call(REQUEST, **kw)
        else:
            aio = client.aio
            result = aio.loop.run(aio.call(REQUEST, **kw))
        ended: dict[str, Any] = {"attempts": result.attempts, "model": result.model, "error": None}
    except ApiCallError as e:
        ended = {"attempts": e.attempts, "model": e.model, "error": e.failure_type}
    finally:
        client.close()
    received = int(emulator.state.accounting.received_by_path["/v1/messages"])
    return {**ended, "received": received, "waits": client.sleeps}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_threads_and_the_event_loop_retry_alike(emulator: Any, scenario: str) -> None:
    faults, api = SCENARIOS[scenario]
    thread = outcome(emulator, "thread", faults, api)
    loop = outcome(emulator, "loop", faults, api)
    assert loop == thread
    assert thread["received"] == thread["attempts"] and len(thread["waits"]) == thread["attempts"] - 1

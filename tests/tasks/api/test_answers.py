"""The shared policy of tasks/api/answers.py on the event loop's reader (tasks.api.sse.read_answer,
the path the per-file pass takes): a dropped stream becomes the same `StreamBroken`, and
`paid_attempt` prices it the same way as on the sync path (real AsyncAnthropic against the real
emulator)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from docmill.prices import priced_usd
from tasks.api.answers import StreamBroken, StreamProgress, paid_attempt
from tasks.api.retrying import is_retryable
from tasks.api.sse import read_answer
from tests.fixtures.emulator import async_sdk_client

BODY = {
    "model": "claude-sonnet-4-6",
    "max_tokens": 4096,
    "messages": [{"role": "user", "content": "<document id='a'>\nVendor: ACME\nTotal: 12.50\n</document>"}],
}


def _price(usage: Any) -> float | None:
    return priced_usd("claude-sonnet-4-6", usage)


@pytest.mark.parametrize(("after", "exact"), [(None, False), (10_000, True)])
def test_a_dropped_async_stream_is_the_same_failure_priced_the_same_way(
    emulator: Any, after: int | None, exact: bool
) -> None:
    emulator.state.faults.add(kind="stream_drop", after_events=after, count=1)

    async def attempt() -> tuple[BaseException, StreamProgress]:
        sdk = async_sdk_client(emulator)
        progress = StreamProgress()
        try:
            await read_answer(sdk, BODY, stream=True, progress=progress)
        except StreamBroken as e:
            return e, progress
        finally:
            await sdk.close()
        raise AssertionError("the stream was not dropped")

    exc, progress = asyncio.run(attempt())
    assert is_retryable(exc) and not exc.timed_out
    paid = paid_attempt(exc, progress, worst_usd=1.0, max_tokens=4096, price=_price)
    assert emulator.state.drain()
    [billed] = emulator.state.accounting.billed
    assert paid is not None and paid.possibly is not exact and paid.reason == "dropped"
    if exact:
        assert paid.usd == pytest.approx(billed.usd)
    else:
        assert paid.usage is not None and paid.usage["input_tokens"] == billed.usage["input_tokens"]
        assert (
            billed.usd < paid.usd < 1.0
        )  # the reported input plus max_tokens: above the bill, below the worst case


def test_an_async_answer_is_the_json_the_api_sent(emulator: Any) -> None:
    async def both() -> tuple[dict[str, Any], dict[str, Any]]:
        sdk = async_sdk_client(emulator)
        try:
            plain = await read_answer(
                sdk, {**BODY, "max_tokens": 200}, stream=False, progress=StreamProgress()
            )
            streamed = await read_answer(
                sdk, {**BODY, "max_tokens": 200}, stream=True, progress=StreamProgress()
            )
        finally:
            await sdk.close()
        return plain[0], streamed[0]

    plain, streamed = asyncio.run(both())
    for data in (plain, streamed):
        assert data["type"] == "message" and data["content"][0]["type"] == "text"
        assert data["usage"]["output_tokens"] > 0 and "parsed_output" not in data["content"][0]


def test_progress_reads_typed_events_and_raw_event_json_alike() -> None:
    """A reader of the raw SSE bytes (dicts) and the SDK's stream (typed events) note the same usage."""
    from anthropic.types import RawMessageDeltaEvent, RawMessageStartEvent

    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-6",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 40, "output_tokens": 1, "cache_read_input_tokens": 900},
        },
    }
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 77}}
    typed, raw = StreamProgress(), StreamProgress()
    for event in (RawMessageStartEvent.model_validate(start), RawMessageDeltaEvent.model_validate(delta)):
        typed.on_event(event)
    for data in (start, delta):
        raw.on_event(data)
    for progress in (typed, raw):
        assert progress.start_usage is not None and progress.start_usage["cache_read_input_tokens"] == 900
        assert progress.final_usage is not None
        assert (progress.final_usage["input_tokens"], progress.final_usage["output_tokens"]) == (40, 77)

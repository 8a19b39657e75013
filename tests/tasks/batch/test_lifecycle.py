"""BatchApi (tasks/batch/lifecycle.py) against the emulator: cancel of an ended batch, whatever the
API answers for it."""

from __future__ import annotations

from typing import Any

import pytest

from docmill.errors import BatchError
from docmill.settings import Settings
from tasks.batch.lifecycle import BatchApi
from tests.fixtures.emulator import sdk_client

PARAMS = {"model": "claude-sonnet-4-6", "max_tokens": 20, "messages": [{"role": "user", "content": "x"}]}


@pytest.mark.parametrize("status", [400, 409, 200])
def test_cancel_of_an_ended_batch_is_nothing_to_cancel(emulator: Any, status: int) -> None:
    emulator.state.configure({"cancel_ended_status": status})
    sdk = sdk_client(emulator)
    api = BatchApi(sdk, Settings(), sleep=lambda _s: None)
    ended = sdk.messages.batches.create(requests=[{"custom_id": "a", "params": PARAMS}])  # type: ignore[misc]
    assert ended.processing_status == "ended"
    assert api.cancel(ended.id) is None


def test_cancel_of_a_running_batch_cancels_and_a_refusal_of_one_still_raises(emulator: Any) -> None:
    emulator.state.configure({"batch_seconds_per_request": 100.0, "frozen_clock": True})
    sdk = sdk_client(emulator)
    api = BatchApi(sdk, Settings(), sleep=lambda _s: None)
    running = sdk.messages.batches.create(requests=[{"custom_id": "a", "params": PARAMS}])  # type: ignore[misc]
    emulator.state.faults.add(kind="invalid_request", path="/v1/messages/batches/*/cancel", count=1)
    with pytest.raises(BatchError):
        api.cancel(running.id)  # refused, and the batch has not ended: not swallowed
    canceled = api.cancel(running.id)
    assert canceled is not None and canceled.processing_status == "canceling"

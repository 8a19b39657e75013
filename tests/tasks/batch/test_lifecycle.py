"""BatchApi (tasks/batch/lifecycle.py) against the emulator: cancel of an ended batch, whatever the
API answers for it."""

from __future__ import annotations

from typing import Any

import pytest

from docmill.errors import BatchError
from docmill.settings import Settings
from tasks.batch.lifecycle import BatchApi
from tests.fixtures.emulator import fast_batches, pass_batch_time, sdk_client

PARAMS = {"model": "claude-sonnet-4-6", "max_tokens": 20, "messages": [{"role": "user", "content": "x"}]}


@pytest.mark.parametrize("status", [400, 409, 200])
def test_cancel_of_an_ended_batch_is_nothing_to_cancel(emulator: Any, status: int) -> None:
    emulator.state.configure({"cancel_ended_status": status})
    sdk = sdk_client(emulator)
    api = BatchApi(lambda: sdk, Settings(), sleep=lambda _s: None)
    ended = sdk.messages.batches.create(requests=[{"custom_id": "a", "params": PARAMS}])  # type: ignore[misc]
    pass_batch_time(emulator)
    assert sdk.messages.batches.retrieve(ended.id).processing_status == "ended"
    assert api.cancel(ended.id) is None


def test_cancel_of_a_running_batch_cancels_and_a_refusal_of_one_still_raises(emulator: Any) -> None:
    emulator.state.configure({"batch_seconds_per_request": 100.0, "frozen_clock": True})
    sdk = sdk_client(emulator)
    api = BatchApi(lambda: sdk, Settings(), sleep=lambda _s: None)
    running = sdk.messages.batches.create(requests=[{"custom_id": "a", "params": PARAMS}])  # type: ignore[misc]
    emulator.state.faults.add(kind="invalid_request", path="/v1/messages/batches/*/cancel", count=1)
    with pytest.raises(BatchError):
        api.cancel(running.id)  # refused, and the batch has not ended: not swallowed
    canceled = api.cancel(running.id)
    assert canceled is not None and canceled.processing_status == "canceling"


def test_batch_create_sends_content_length_through_a_proxy_that_refuses_chunked(
    emulator: Any, tmp_path: Any
) -> None:
    from docmill.settings import ApiSettings, BatchSettings
    from flows.entry import RunWiring, run_extract
    from flows.run.context import RunParams
    from tests.flows.helpers import make_corpus

    emulator.state.configure({"reject_chunked_bodies": True, "record_requests": True})
    fast_batches(emulator)
    corpus, _ = make_corpus(tmp_path, count=4, seed=4)
    settings = Settings(
        store=str(tmp_path / "store"),
        api=ApiSettings(base_url=emulator.base_url),
        batch=BatchSettings(poll_seconds=0.02, poll_max_seconds=0.05),
    )
    summary = run_extract(
        RunParams(str(corpus), "invoices", mode="batch"), settings=settings, wiring=RunWiring(progress=False)
    )
    assert summary["phase"] == "done" and summary["states"]["failed"] == 0
    creates = [r for r in emulator.state.accounting.requests if r.path == "/v1/messages/batches"]
    assert creates and emulator.state.accounting.errors_by_status == {}  # no 411, no length mismatch
    assert Settings().batch.max_bytes == 248 * 1024 * 1024  # a margin below the API's 256 MB

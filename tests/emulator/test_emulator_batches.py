"""Message Batches through the real SDK: lifecycle on the virtual clock, results, pagination."""

from __future__ import annotations

import asyncio

import anthropic
import httpx2
import pytest

from emulator import batches
from emulator.server import EmulatorServer
from tests.fixtures.emulator import async_sdk_client, sdk_client

MODEL = "claude-sonnet-4-6"


def _req(custom_id: str, text: str = "Vendor: ACME\nTotal: 3 EUR", **params: object) -> dict:
    body = {"model": MODEL, "max_tokens": 200, "messages": [{"role": "user", "content": text}], **params}
    return {"custom_id": custom_id, "params": body}


def ended(
    emulator: EmulatorServer, client: anthropic.Anthropic, batch_id: str
) -> anthropic.types.messages.MessageBatch:
    """The batch after its processing time has passed on the virtual clock (a batch is never ended
    when it is created: it takes `batch_base_seconds`, a minute by default)."""
    emulator.state.clock.advance(emulator.state.config.batch_base_seconds + 1)
    return client.messages.batches.retrieve(batch_id)


def test_a_new_batch_is_in_progress_for_a_minute_of_virtual_time(emulator: EmulatorServer) -> None:
    emulator.state.configure({"frozen_clock": True})
    client = sdk_client(emulator)
    batch = client.messages.batches.create(requests=[_req("n1")])  # type: ignore[list-item]
    assert batch.processing_status == "in_progress" and batch.request_counts.processing == 1
    emulator.state.clock.advance(59)
    assert client.messages.batches.retrieve(batch.id).processing_status == "in_progress"
    assert emulator.state.accounting.billed == []
    emulator.state.clock.advance(2)
    assert client.messages.batches.retrieve(batch.id).processing_status == "ended"


def test_batch_succeeds_with_half_price_and_batch_tier(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    batch = client.messages.batches.create(requests=[_req(f"doc-{i}") for i in range(5)])  # type: ignore[misc]
    assert batch.processing_status == "in_progress"
    batch = ended(emulator, client, batch.id)
    assert batch.processing_status == "ended"
    assert batch.request_counts.succeeded == 5 and batch.request_counts.processing == 0
    assert batch.results_url and batch.results_url.startswith(emulator.base_url)
    results = list(client.messages.batches.results(batch.id))
    assert sorted(r.custom_id for r in results) == [f"doc-{i}" for i in range(5)]
    for r in results:
        assert r.result.type == "succeeded"
        assert r.result.message.usage.service_tier == "batch"
    realtime = client.messages.create(**_req("x")["params"])  # type: ignore[arg-type]
    billed = emulator.state.accounting.billed
    batch_rec = [b for b in billed if b.batch]
    assert len(batch_rec) == 5 and all(b.batch_id == batch.id for b in batch_rec)
    assert batch_rec[0].usd == pytest.approx(billed[-1].usd / 2)
    assert billed[-1].request_id == realtime._request_id


def test_batch_in_progress_until_clock_advances_then_results(emulator: EmulatorServer) -> None:
    emulator.state.configure({"batch_seconds_per_request": 10.0, "frozen_clock": True})
    client = sdk_client(emulator)
    batch = client.messages.batches.create(requests=[_req(f"d{i}") for i in range(3)])  # type: ignore[misc]
    assert batch.processing_status == "in_progress" and batch.request_counts.processing == 3
    assert batch.results_url is None
    with pytest.raises(anthropic.AnthropicError, match="No `results_url`"):
        list(client.messages.batches.results(batch.id))
    emulator.state.clock.advance(emulator.state.config.batch_base_seconds + 15)
    assert client.messages.batches.retrieve(batch.id).request_counts.processing == 3
    assert len(emulator.state.accounting.billed) == 1  # one item done and billed so far
    emulator.state.clock.advance(20)
    done = client.messages.batches.retrieve(batch.id)
    assert done.processing_status == "ended" and done.request_counts.succeeded == 3
    assert done.ended_at is not None


def test_cancel_goes_canceling_then_ended_with_canceled_items(emulator: EmulatorServer) -> None:
    emulator.state.configure(
        {"batch_seconds_per_request": 10.0, "batch_cancel_seconds": 5.0, "frozen_clock": True}
    )
    client = sdk_client(emulator)
    batch = client.messages.batches.create(requests=[_req(f"c{i}") for i in range(4)])  # type: ignore[misc]
    emulator.state.clock.advance(emulator.state.config.batch_base_seconds + 25)  # two items done
    canceled = client.messages.batches.cancel(batch.id)
    assert canceled.processing_status == "canceling" and canceled.cancel_initiated_at is not None
    with pytest.raises(anthropic.BadRequestError):
        client.messages.batches.delete(batch.id)
    emulator.state.clock.advance(6)
    ended = client.messages.batches.retrieve(batch.id)
    assert ended.processing_status == "ended"
    assert (ended.request_counts.succeeded, ended.request_counts.canceled) == (2, 2)
    kinds = {r.custom_id: r.result.type for r in client.messages.batches.results(batch.id)}
    assert kinds == {"c0": "succeeded", "c1": "succeeded", "c2": "canceled", "c3": "canceled"}
    with pytest.raises(anthropic.BadRequestError):
        client.messages.batches.cancel(batch.id)
    deleted = client.messages.batches.delete(batch.id)
    assert deleted.type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(batch.id)


def test_expired_after_24h_and_archived_after_29_days(emulator: EmulatorServer) -> None:
    emulator.state.configure({"batch_base_seconds": 48 * 3600.0, "frozen_clock": True})
    client = sdk_client(emulator)
    batch = client.messages.batches.create(requests=[_req("e1"), _req("e2")])  # type: ignore[misc]
    emulator.state.clock.advance(24 * 3600 + 1)
    ended = client.messages.batches.retrieve(batch.id)
    assert ended.processing_status == "ended" and ended.request_counts.expired == 2
    assert ended.ended_at == ended.expires_at
    assert {r.result.type for r in client.messages.batches.results(batch.id)} == {"expired"}
    assert emulator.state.accounting.billed == []
    emulator.state.clock.advance(29 * 86400)
    archived = client.messages.batches.retrieve(batch.id)
    assert archived.archived_at is not None
    with pytest.raises(anthropic.NotFoundError):
        list(client.messages.batches.results(batch.id))


def test_errored_items_by_custom_id_and_marker_and_bad_params(emulator: EmulatorServer) -> None:
    emulator.state.faults.add(kind="overloaded", custom_id="b-over")
    emulator.state.faults.add(kind="invalid_request", custom_id="b-bad", message="nope")
    emulator.state.faults.add(kind="server_error", marker="POISON-77")
    client = sdk_client(emulator)
    reqs = [
        _req("b-ok"),
        _req("b-over"),
        _req("b-bad"),
        _req("b-marked", "see POISON-77"),
        _req("b-zero", max_tokens=0),
    ]
    batch = client.messages.batches.create(requests=reqs)  # type: ignore[arg-type]
    batch = ended(emulator, client, batch.id)
    assert batch.request_counts.errored == 4 and batch.request_counts.succeeded == 1
    by_id = {r.custom_id: r.result for r in client.messages.batches.results(batch.id)}
    assert by_id["b-ok"].type == "succeeded"
    errors = {k: v.error.error.type for k, v in by_id.items() if v.type == "errored"}  # type: ignore[union-attr]
    assert errors == {
        "b-over": "overloaded_error",
        "b-bad": "invalid_request_error",
        "b-marked": "api_error",
        "b-zero": "invalid_request_error",
    }
    assert [b.custom_id for b in emulator.state.accounting.billed] == ["b-ok"]


@pytest.mark.parametrize(
    "requests, match",
    [
        ([{"custom_id": "bad id!", "params": {}}], "custom_id"),
        ([_req("same"), _req("same")], "not unique"),
        ([{"custom_id": "x" * 65, "params": {}}], "custom_id"),
        ([], "at least 1"),
    ],
)
def test_create_rejects_bad_custom_ids(emulator: EmulatorServer, requests: list, match: str) -> None:
    with pytest.raises(anthropic.BadRequestError, match=match):
        sdk_client(emulator).messages.batches.create(requests=requests)


def test_create_limits_request_count(emulator: EmulatorServer) -> None:
    emulator.state.configure({"max_batch_requests": 3})
    with pytest.raises(anthropic.BadRequestError, match="at most 3"):
        sdk_client(emulator).messages.batches.create(requests=[_req(f"n{i}") for i in range(4)])  # type: ignore[misc]


def test_list_pagination_newest_first(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    ids = [client.messages.batches.create(requests=[_req("p")]).id for _ in range(5)]  # type: ignore[list-item]
    first = client.messages.batches.list(limit=2)
    assert [b.id for b in first.data] == [ids[4], ids[3]] and first.has_more
    assert [b.id for b in client.messages.batches.list(limit=2)] == list(reversed(ids))  # auto-pagination
    older = client.messages.batches.list(limit=2, after_id=ids[3])
    assert [b.id for b in older.data] == [ids[2], ids[1]]
    newer = client.messages.batches.list(limit=2, before_id=ids[1])
    assert [b.id for b in newer.data] == [ids[3], ids[2]] and newer.has_more
    assert [b.id for b in client.messages.batches.list(limit=2, before_id=ids[1])] == [ids[3], ids[2], ids[4]]


def test_results_are_shuffled_jsonl_streamed(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    batch = client.messages.batches.create(requests=[_req(f"s{i:03d}") for i in range(300)])  # type: ignore[misc]
    batch = ended(emulator, client, batch.id)
    order = [r.custom_id for r in client.messages.batches.results(batch.id)]
    assert sorted(order) == [f"s{i:03d}" for i in range(300)] and order != sorted(order)
    assert order == [r.custom_id for r in client.messages.batches.results(batch.id)]  # stable
    raw = httpx2.get(batch.results_url or "", headers={"x-api-key": "k", "anthropic-version": "2026-10-21"})
    assert raw.status_code == 200 and raw.text.endswith("\n") and len(raw.text.splitlines()) == 300


def test_async_client_batches(emulator: EmulatorServer) -> None:
    async def run() -> list[str]:
        client = async_sdk_client(emulator)
        batch = await client.messages.batches.create(requests=[_req("a1"), _req("a2")])  # type: ignore[list-item]
        assert batch.processing_status == "in_progress"
        emulator.state.clock.advance(emulator.state.config.batch_base_seconds + 1)
        got = await client.messages.batches.retrieve(batch.id)
        assert got.processing_status == "ended"
        kinds = [r.result.type async for r in await client.messages.batches.results(batch.id)]
        listed = [b.id async for b in client.messages.batches.list(limit=1)]
        assert listed == [batch.id]
        await client.close()
        return kinds

    assert asyncio.run(run()) == ["succeeded", "succeeded"]


def test_slow_batch_fault_and_batch_size_limit(emulator: EmulatorServer) -> None:
    emulator.state.configure({"frozen_clock": True})
    emulator.state.faults.add(kind="slow_batch", marker="SLOWDOC", seconds=3600)
    client = sdk_client(emulator)
    fast = client.messages.batches.create(requests=[_req("f1")])  # type: ignore[list-item]
    slow = client.messages.batches.create(requests=[_req("s1", "a SLOWDOC here"), _req("s2")])  # type: ignore[list-item]
    assert ended(emulator, client, fast.id).processing_status == "ended"
    assert client.messages.batches.retrieve(slow.id).processing_status == "in_progress"
    emulator.state.clock.advance(3601)
    assert client.messages.batches.retrieve(slow.id).request_counts.succeeded == 2
    emulator.state.configure({"max_batch_bytes": 2000})
    with pytest.raises(anthropic.APIStatusError) as info:
        client.messages.batches.create(requests=[_req(f"big{i}") for i in range(20)])  # type: ignore[misc]
    assert info.value.status_code == 413


def test_results_stream_in_bounded_chunks(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    batch = client.messages.batches.create(requests=[_req(f"k{i}") for i in range(1000)])  # type: ignore[misc]
    ended(emulator, client, batch.id)
    store = emulator.state.batches

    async def sizes() -> list[int]:
        return [len(chunk) async for chunk in batches.result_lines(emulator.state, store.get(batch.id))]

    chunks = asyncio.run(sizes())
    assert len(chunks) == 4  # 250 lines a chunk: the JSONL is never built whole
    assert max(chunks) < sum(chunks) / 3


def test_control_endpoints_drive_clock_config_and_reset(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    assert (
        httpx2.post(emulator.url("/_emulator/config"), json={"batch_seconds_per_request": 60.0}).status_code
        == 200
    )
    assert httpx2.post(emulator.url("/_emulator/config"), json={"no_such_knob": 1}).status_code == 400
    batch = client.messages.batches.create(requests=[_req("t1")])  # type: ignore[list-item]
    assert batch.processing_status == "in_progress"
    before = httpx2.get(emulator.url("/_emulator/clock")).json()["now"]
    wait = emulator.state.config.batch_base_seconds + 61
    after = httpx2.post(emulator.url("/_emulator/clock/advance"), json={"seconds": wait}).json()["now"]
    assert after - before >= wait
    assert client.messages.batches.retrieve(batch.id).processing_status == "ended"
    assert httpx2.post(emulator.url("/_emulator/reset")).json() == {"ok": True}
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(batch.id)
    acct = httpx2.get(emulator.url("/_emulator/accounting")).json()
    assert (acct["received"], acct["billed_count"], acct["errors_by_status"]) == (1, 0, {"404": 1})

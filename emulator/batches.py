"""Message Batches (reference §5) on the virtual clock; their records and `BatchJournal` are in
`emulator.batch_store`, and each function here is given the `EmulatorState`.

Item i of a batch finishes at created_at + base + slow + (i+1) * seconds_per_request (all at once
when seconds_per_request is 0; base defaults to a minute, so a new batch is `in_progress` and its
client polls it). Items are processed lazily (never when created), in chunks that yield to the event
loop, whenever the batch is looked at; each runs through `messages.answer` (batch=True: 50 % price,
service_tier "batch") unless a fault rule makes it `errored`. Cancel -> `canceling` -> `ended` with
unstarted items `canceled`; past expires_at (24 h) unprocessed items `expired`; 29 days after
creation the batch is archived and its results 404. Results stream as JSONL in a seeded shuffled
order, a chunk of lines at a time.

With a journal (an offline docmill run keeps one in its store) every batch is saved when created,
canceled or deleted, and a new server restores them: a run killed during a batch resumes against the
next emulator as against the real API. Results are not saved: answers are deterministic, so the
server that serves them computes (and accounts) them again.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.responses import StreamingResponse

from emulator import messages
from emulator.batch_store import Batch
from emulator.calls import list_page
from emulator.clock import rfc3339
from emulator.faults import error_for
from emulator.validation import CUSTOM_ID_RE, ApiError, ErrorType, invalid

if TYPE_CHECKING:
    from emulator.calls import Call
    from emulator.state import EmulatorState

CHUNK = 250
RESULT_TYPES = ("succeeded", "errored", "canceled", "expired")


def _run_item(state: EmulatorState, batch: Batch, cid: str, params: dict[str, Any]) -> dict[str, Any]:
    hits = state.faults.for_item(cid, params)
    try:
        if hits.error is not None:
            raise error_for(hits.error)
        state.validate(params, batch=True, legacy=batch.legacy)
        ans = messages.answer(
            state,
            params,
            request_id=None,
            api_key=batch.api_key,
            batch=True,
            shape=hits.response,
            path="/v1/messages/batches",
            custom_id=cid,
            batch_id=batch.id,
        )
    except ApiError as err:
        error = {"type": "error", "error": err.error_object(), "request_id": None}
        return {"custom_id": cid, "result": {"type": "errored", "error": error}}
    return {"custom_id": cid, "result": {"type": "succeeded", "message": ans.message}}


async def refresh(state: EmulatorState, batch: Batch) -> None:
    """Process what the virtual clock says is done; end the batch when it is over."""
    if batch.ended_at is not None:
        return
    async with batch.lock:
        if batch.ended_at is not None:
            return
        now = state.clock.now()
        horizon = min(now, batch.expires_at)
        if batch.cancel_initiated_at is not None:
            horizon = min(horizon, batch.cancel_initiated_at)
        target = batch.finished_by(horizon)
        while batch.processed < target:
            stop = min(target, batch.processed + CHUNK)
            for cid, params in batch.requests[batch.processed : stop]:
                batch.results.append(_run_item(state, batch, cid, params))
            batch.processed = stop
            if stop < target:
                await asyncio.sleep(0)
        n = len(batch.requests)
        if batch.processed == n:
            batch.ended_at = min(max(batch.finish_time(n), batch.created_at), now)
            if batch.cancel_initiated_at is not None:
                batch.ended_at = max(batch.ended_at, batch.cancel_initiated_at)
        elif batch.cancel_initiated_at is not None:
            if now >= batch.cancel_initiated_at + state.config.batch_cancel_seconds:
                _finish_rest(batch, "canceled", batch.cancel_initiated_at)
        elif now >= batch.expires_at:
            _finish_rest(batch, "expired", batch.expires_at)


def _finish_rest(batch: Batch, kind: str, at: float) -> None:
    for cid, _ in batch.requests[batch.processed :]:
        batch.results.append({"custom_id": cid, "result": {"type": kind}})
    batch.processed = len(batch.requests)
    batch.ended_at = at


def archived(state: EmulatorState, batch: Batch) -> bool:
    return state.clock.now() >= batch.created_at + state.config.batch_archive_seconds


def to_dict(state: EmulatorState, batch: Batch) -> dict[str, Any]:
    ended = batch.ended_at is not None
    counts: Counter[str] = Counter()
    if ended:
        counts.update(r["result"]["type"] for r in batch.results)
    archived_at = batch.created_at + state.config.batch_archive_seconds if archived(state, batch) else None
    status = "ended" if ended else ("canceling" if batch.cancel_initiated_at is not None else "in_progress")
    return {
        "id": batch.id,
        "type": "message_batch",
        "processing_status": status,
        "request_counts": {
            "processing": 0 if ended else len(batch.requests),
            **{kind: counts.get(kind, 0) for kind in RESULT_TYPES},
        },
        "created_at": rfc3339(batch.created_at),
        "expires_at": rfc3339(batch.expires_at),
        "ended_at": rfc3339(batch.ended_at) if batch.ended_at is not None else None,
        "cancel_initiated_at": rfc3339(batch.cancel_initiated_at) if batch.cancel_initiated_at else None,
        "archived_at": rfc3339(archived_at) if archived_at is not None else None,
        "results_url": f"{batch.results_base}v1/messages/batches/{batch.id}/results" if ended else None,
    }


async def result_lines(state: EmulatorState, batch: Batch) -> AsyncIterator[bytes]:
    order = list(range(len(batch.results)))
    random.Random(f"{state.config.seed}:{batch.id}").shuffle(order)
    for start in range(0, len(order), CHUNK):
        lines = [json.dumps(batch.results[i], separators=(",", ":")) for i in order[start : start + CHUNK]]
        yield ("\n".join(lines) + "\n").encode()
        await asyncio.sleep(0)


# HTTP handlers ---------------------------------------------------------------------------


async def create_batch(call: Call) -> dict[str, Any]:
    """A new batch is always `in_progress` (as on the API): processing starts on the virtual clock."""
    state, body, cfg = call.state, call.body, call.state.config
    if not isinstance(body, dict) or not isinstance(body.get("requests"), list):
        raise invalid("requests: Field required")
    reqs = body["requests"]
    if not reqs:
        raise invalid("requests: List should have at least 1 item")
    if len(reqs) > cfg.max_batch_requests:
        raise invalid(f"requests: a batch holds at most {cfg.max_batch_requests} requests, got {len(reqs)}")
    seen: set[str] = set()
    items: list[tuple[str, dict[str, Any]]] = []
    for i, req in enumerate(reqs):
        cid = req.get("custom_id") if isinstance(req, dict) else None
        if not isinstance(cid, str) or not CUSTOM_ID_RE.match(cid):
            raise invalid(f"requests.{i}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")
        if cid in seen:
            raise invalid(f"requests.{i}.custom_id: custom_id {cid!r} is not unique within the batch")
        seen.add(cid)
        params = req.get("params")
        if not isinstance(params, dict):
            raise invalid(f"requests.{i}.params: Field required")
        if params.get("stream"):
            raise invalid(f"requests.{i}.params.stream: streaming is not supported in batches")
        items.append((cid, params))
    slow = sum(state.faults.for_item(cid, p, slow_only=True).slow_seconds for cid, p in items)
    now = state.clock.now()
    batch = Batch(
        id=state.new_id("msgbatch"),
        api_key=call.api_key,
        requests=items,
        created_at=now,
        expires_at=now + cfg.batch_expiry_seconds,
        start_after=cfg.batch_base_seconds + slow,
        per_request=cfg.batch_seconds_per_request,
        results_base=call.base_url,
        legacy=call.legacy,
    )
    state.batches.batches[batch.id] = batch
    state.batches.save(batch)
    return to_dict(state, batch)


async def _looked_at(call: Call) -> Batch:
    """The batch the path names, brought up to the virtual clock's now."""
    batch = call.state.batches.get(call.request.path_params["batch_id"])
    await refresh(call.state, batch)
    return batch


async def get_batch(call: Call) -> dict[str, Any]:
    return to_dict(call.state, await _looked_at(call))


async def list_batches(call: Call) -> dict[str, Any]:
    store = call.state.batches
    q = call.request.query_params
    try:
        limit = int(q.get("limit", "20"))
    except ValueError:
        raise invalid("limit: Input should be a valid integer") from None
    if not 1 <= limit <= 1000:
        raise invalid("limit: Input should be between 1 and 1000")
    page = store.page(limit, q.get("after_id"), q.get("before_id"))
    data = []
    for batch_id in page["ids"]:
        batch = store.batches[batch_id]
        await refresh(call.state, batch)
        data.append(to_dict(call.state, batch))
    return list_page(data, has_more=page["has_more"])


async def cancel_batch(call: Call) -> dict[str, Any]:
    store, batch = call.state.batches, await _looked_at(call)
    if batch.ended_at is not None:
        status = call.state.config.cancel_ended_status
        if status == 200:
            return to_dict(call.state, batch)
        kind = ErrorType.CONFLICT if status == 409 else ErrorType.INVALID_REQUEST
        raise ApiError(kind, f"message batch {batch.id} has already ended and cannot be canceled")
    if batch.cancel_initiated_at is None:
        batch.cancel_initiated_at = call.state.clock.now()
        store.save(batch)
    return to_dict(call.state, batch)


async def delete_batch(call: Call) -> dict[str, Any]:
    store, batch = call.state.batches, await _looked_at(call)
    if batch.ended_at is None:
        raise invalid(
            f"message batch {batch.id} is still processing; cancel it first and wait until it has ended"
        )
    del store.batches[batch.id]
    store.save(batch, deleted=True)
    return {"id": batch.id, "type": "message_batch_deleted"}


async def batch_results(call: Call) -> StreamingResponse:
    batch = await _looked_at(call)
    if archived(call.state, batch):
        raise ApiError(
            ErrorType.NOT_FOUND, f"results of message batch {batch.id} are no longer available (archived)"
        )
    if batch.ended_at is None:
        raise invalid(f"message batch {batch.id} has not ended yet; results are not available")
    return StreamingResponse(result_lines(call.state, batch), media_type="application/x-jsonl")

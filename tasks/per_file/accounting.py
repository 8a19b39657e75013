"""Per-attempt cost accounting of the per-file pass: the one place that builds its cost entries
(`file_cost_entry`), realtime chunks' buffered groups (`flush_costs`).
"""

from __future__ import annotations

import uuid
from typing import Any

from checkpoints.costs import CostEntry
from docmill.prices import priced_usd
from tasks.api.usage import add_usage
from tasks.per_file.settle import Pass
from tasks.request import FILE_PASS


def account_attempt(
    p: Pass,
    doc_id: str,
    key: str,
    attempt: int,
    model: str,
    message: dict[str, Any],
    usage_total: dict[str, int],
    request_ids: list[str],
) -> float:
    """Account one answered realtime attempt: its usage added to `usage_total`, its request id to
    `request_ids`, its cost entry written; returns its cost in USD."""
    usage = message.get("usage") or {}
    add_usage(usage_total, usage)
    request_id = message.get("_request_id")
    if request_id:
        request_ids.append(str(request_id))
    meta = message.get("_docmill") or {}  # when it was sent and answered, if the log kept it
    when = {"at": meta.get("at"), "sent_at": meta.get("sent_at"), "answered": message.get("model")}
    record_cost(
        p, file_cost_entry(p.run_id, doc_id, key, attempt, model, request_id, usage, batch=False, **when)
    )
    return priced_usd(model, usage) or 0.0


def answered_model(message: dict[str, Any], default: str) -> str:
    """The model a persisted answer was asked of (what it is priced by): docmill's meta, else the
    client's note, else the API's `model` field (whose date suffix pricing drops), else `default`."""
    meta = message.get("_docmill") or {}
    return str(meta.get("model") or message.get("_asked_model") or message.get("model") or default)


def record_cost(p: Pass, entry: CostEntry) -> None:
    """One answered attempt's cost entry: kept for the chunk's group when the pass buffers costs,
    else written at once as group `<key>-<attempt>` (written once)."""
    if p.buffer_costs:
        with p._costs_lock:
            p.pending_costs.append(entry)
        if p.clock() - p.flushed_at >= p.cost_flush_seconds:
            flush_costs(p)
        return
    p.costs.record(f"{entry.key}-{entry.attempt}", [entry])


def flush_costs(p: Pass) -> None:
    """Write the buffered cost entries as one new group. An attempt that a resumed chunk records
    again is counted once by the cost ledger (same identity), so a fresh group id is safe."""
    with p._costs_lock:
        entries, p.pending_costs = p.pending_costs, []
        p.flushed_at = p.clock()
    if entries:
        p.costs.record(f"file-{uuid.uuid4().hex[:20]}", entries)


def file_cost_entry(
    run_id: str,
    doc_id: str,
    key: str,
    attempt: int,
    model: str,
    request_id: Any,
    usage: dict[str, Any],
    *,
    batch: bool,
    at: float | None = None,
    answered: Any = None,
    sent_at: float | None = None,
) -> CostEntry:
    """The cost entry of one answered per-file attempt, realtime or (`batch=True`) batch-priced;
    `model` is the model asked for, `answered` the answer's own `model` field."""
    return CostEntry.from_usage(
        run_id=run_id,
        pass_name=FILE_PASS,
        doc_id=doc_id,
        key=key,
        attempt=attempt,
        model=model,
        request_id=request_id,
        usage=usage,
        batch=batch,
        at=at,
        sent_at=sent_at,
        answered_model=str(answered) if answered else None,
    )

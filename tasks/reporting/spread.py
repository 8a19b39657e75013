"""What `status` and the reports say about a run spread over workers (its shards, who did them,
which were taken over) and about a deadline (what went batch, what went realtime, when the switch
came, what each cost). Read from the store only: `runs/<id>/shards/`, `runs/<id>/workers/`,
`runs/<id>/deadline.json` and the cost ledger's entries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

from checkpoints.shards import ShardState, ShardTable, WorkerLog
from tasks.deadline.plan import epoch, iso

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore


class SpreadSummary(TypedDict):
    generation: int
    shards: list[ShardState]
    counts: dict[str, int]  # done, claimed, open
    takeovers: int
    workers: list[dict[str, Any]]  # name, host, shards, docs, heartbeat_at
    stopped: dict[str, Any] | None


class DeadlineSummary(TypedDict):
    finish_by: str
    switched_at: float | None
    switch_why: str | None
    canceled_batches: int
    cancel_seconds: float | None
    batch_docs: int
    realtime_docs: int
    batch_usd: float
    realtime_usd: float
    realtime_as_batch_usd: float  # what the realtime part would have cost as batch (half)
    finished_at: float | None
    met: bool | None


def spread_summary(store: ObjectStore, run_id: str) -> SpreadSummary | None:
    gens = ShardTable.generations(store, run_id)
    if not gens:
        return None
    table = ShardTable(store, run_id, gens[-1])
    shards = table.states()
    counts = {s: sum(1 for x in shards if x["state"] == s) for s in ("done", "claimed", "open")}
    workers = sorted(
        (
            {k: w.get(k) for k in ("name", "host", "heartbeat_at", "docs", "generation")}
            | {"shards": len(w.get("shards_done") or [])}
            for w in WorkerLog(store, run_id).all()
        ),
        key=lambda w: str(w["name"]),
    )
    return {
        "generation": table.gen,
        "shards": shards,
        "counts": counts,
        "takeovers": sum(s["takeovers"] for s in shards),
        "workers": workers,
        "stopped": table.stopped(),
    }


def deadline_summary(
    store: ObjectStore, run_id: str, entries: list[dict[str, Any]]
) -> DeadlineSummary | None:
    """`entries`: the run's cost entries as dicts (checkpoints.costs.CostEntry)."""
    found = store.get_json_or_none(f"runs/{run_id}/deadline.json")
    if not isinstance(found, dict):
        return None
    file = [e for e in entries if e.get("pass_name") == "file"]
    batch_docs = {e["doc_id"] for e in file if e.get("batch")}
    realtime_docs = {e["doc_id"] for e in file if not e.get("batch")}
    realtime_usd = sum(float(e.get("usd") or 0.0) for e in file if not e.get("batch"))
    finished = found.get("realtime_done_at") or found.get("batches_done_at")
    deadline = epoch(str(found["finish_by"]))
    return {
        "finish_by": str(found["finish_by"]),
        "switched_at": found.get("switched_at"),
        "switch_why": found.get("switch_why"),
        "canceled_batches": len(found.get("canceled") or []),
        "cancel_seconds": found.get("cancel_seconds"),
        "batch_docs": len(batch_docs - realtime_docs),
        "realtime_docs": len(realtime_docs),
        "batch_usd": round(sum(float(e.get("usd") or 0.0) for e in file if e.get("batch")), 6),
        "realtime_usd": round(realtime_usd, 6),
        "realtime_as_batch_usd": round(realtime_usd / 2, 6),
        "finished_at": finished,
        "met": None if finished is None else float(finished) <= deadline,
    }


def _when(ts: Any) -> str:
    return iso(float(ts)) if ts is not None else "-"


def spread_lines(s: SpreadSummary | None) -> list[str]:
    """Plain lines (status and the markdown report)."""
    if s is None:
        return []
    c = s["counts"]
    lines = [
        f"shards {c['done']}/{len(s['shards'])} done, {c['claimed']} claimed, {c['open']} open "
        f"(generation {s['generation']}); {s['takeovers']} taken over from a worker that stopped"
    ]
    for w in s["workers"]:
        lines.append(
            f"worker {w['name']} ({w.get('host')}): {w['shards']} shard(s), {w.get('docs') or 0} documents, last heartbeat {_when(w.get('heartbeat_at'))}"
        )
    if s["stopped"]:
        lines.append(f"stopped: {s['stopped'].get('kind')}: {s['stopped'].get('message')}")
    return lines


def deadline_lines(d: DeadlineSummary | None) -> list[str]:
    if d is None:
        return []
    lines = [
        f"finish by {d['finish_by']}: {d['batch_docs']} document(s) by batch (${d['batch_usd']:.4f}), "
        f"{d['realtime_docs']} realtime (${d['realtime_usd']:.4f}; ${d['realtime_as_batch_usd']:.4f} as batch)"
    ]
    if d["switched_at"] is not None:
        lines.append(
            f"switched to realtime at {_when(d['switched_at'])} ({d['switch_why']}); {d['canceled_batches']} batch(es) "
            f"cancelled"
            + (f", settled in {d['cancel_seconds']:.0f}s" if d["cancel_seconds"] is not None else "")
        )
    if d["met"] is not None:
        lines.append(f"finished {_when(d['finished_at'])}: {'before' if d['met'] else 'AFTER'} the deadline")
    return lines


def markdown_section(spread: SpreadSummary | None, deadline: DeadlineSummary | None) -> list[str]:
    out: list[str] = []
    for title, lines in (
        ("Shards and workers", spread_lines(spread)),  # no lines: not a run over workers
        ("Deadline: batch and realtime", deadline_lines(deadline)),  # no lines: no deadline
    ):
        out += ["", f"## {title}", "", *[f"- {line}" for line in lines]] if lines else []
    return out

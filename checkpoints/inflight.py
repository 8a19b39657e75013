"""Requests that may be in flight: `runs/<run_id>/inflight/<group>.json` = {requests, usd, at}.

Paid means recorded (invariant 13): before a group of realtime requests is sent (a chunk of the
per-file pass) one record states how many requests it may have in flight at once and what they
can cost at most; once their answers are in the cost ledger the record is deleted. A record that
a crash (SIGKILL, a dead worker) left behind is therefore an upper bound of what was paid and
recorded nowhere: `status`, the report and the budget cap count it. Three store operations per
group (put, delete, one listing of the group's earlier lives), not per request (bench/store_ops.py).
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, TypedDict

from checkpoints.keys import safe_segment

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore


class InFlightBound(TypedDict):
    requests: int  # requests of the group
    usd: float  # what all of them can cost at most
    at_once: int  # at most this many in flight at once (the concurrency)
    at_once_usd: float  # what those can cost at most


class InFlightTotals(TypedDict):
    groups: int  # records left behind by a crash (or open right now)
    requests: int  # requests they may have paid for without a record
    usd: float  # what those requests can have cost at most


class InFlight:
    """A record counts in full until a later life of the same chunk has recorded every answer the
    crash left in the response log (it `close`s with `settle`): then only what was in flight at
    once (no response persisted) can still be unrecorded, and the record shrinks to that."""

    def __init__(self, store: ObjectStore, run_id: str) -> None:
        self.store = store
        self.prefix = f"runs/{safe_segment(run_id)}/inflight/"

    def open(self, group: str, bound: InFlightBound) -> str:
        """Record a group about to be sent; returns its key for `close`."""
        key = f"{self.prefix}{safe_segment(group)}-{uuid.uuid4().hex[:8]}.json"
        self.store.put_json(key, {**bound, "at": time.time(), "settled": False})
        return key

    def close(self, key: str, *, settle: str | None = None) -> None:
        """The group's answers are recorded: it is no longer in flight. `settle` (the group, when
        every document of it was handled) settles its earlier lives left by a crash to what they
        had in flight at once."""
        self.store.delete(key)
        if settle is None:
            return
        for other in self.store.list(f"{self.prefix}{safe_segment(settle)}-"):
            record = self.store.get_json_or_none(other)
            if isinstance(record, dict) and not record.get("settled"):
                self.store.put_json(other, {**record, "settled": True})

    def totals(self) -> InFlightTotals:
        out = InFlightTotals(groups=0, requests=0, usd=0.0)
        for key in self.store.list(self.prefix):
            record = self.store.get_json_or_none(key) if key.endswith(".json") else None
            if isinstance(record, dict):
                settled = bool(record.get("settled"))
                out["groups"] += 1
                out["requests"] += int(record.get("at_once" if settled else "requests") or 0)
                out["usd"] += float(record.get("at_once_usd" if settled else "usd") or 0.0)
        return out

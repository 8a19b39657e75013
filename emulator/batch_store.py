"""The batches a server holds (`EmulatorState.batches`): their records, and the journal where they
outlive the server (see `emulator.batches`, which creates, processes and serves them on the
virtual clock). Records only: nothing here reads the emulator's state, so the state can hold a
store without depending on what processes batches.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol

from emulator.validation import ApiError, ErrorType


@dataclass
class Batch:
    id: str
    api_key: str
    requests: list[tuple[str, dict[str, Any]]]
    created_at: float
    expires_at: float
    start_after: float
    per_request: float
    results_base: str
    processed: int = 0
    results: list[dict[str, Any]] = field(default_factory=list)
    cancel_initiated_at: float | None = None
    ended_at: float | None = None
    legacy: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def finished_by(self, t: float) -> int:
        """How many items are done at virtual time t."""
        elapsed = t - self.created_at - self.start_after
        if elapsed < 0:
            return 0
        if self.per_request <= 0:
            return len(self.requests)
        return min(len(self.requests), int(elapsed / self.per_request + 1e-9))

    def finish_time(self, count: int) -> float:
        return self.created_at + self.start_after + count * max(self.per_request, 0.0)


class BatchJournal(Protocol):
    """Where batches outlive the server: `save` a batch's record (None: it was deleted), `load` all."""

    def save(self, batch_id: str, record: dict[str, Any] | None) -> None: ...

    def load(self) -> list[dict[str, Any]]: ...


SAVED = ("id", "created_at", "expires_at", "start_after", "per_request", "cancel_initiated_at", "legacy")


class BatchStore:
    """The batches one server holds, by id in creation order, and the journal they are saved to."""

    def __init__(self) -> None:
        self.batches: dict[str, Batch] = {}
        self.journal: BatchJournal | None = None

    def save(self, batch: Batch, deleted: bool = False) -> None:
        if self.journal is None:
            return
        record = {name: getattr(batch, name) for name in SAVED}
        record["requests"] = [[cid, params] for cid, params in batch.requests]
        self.journal.save(batch.id, None if deleted else record)

    def restore(self, results_base: str) -> int:
        """Batches of an earlier server, from the journal, oldest first; how many."""
        if self.journal is None:
            return 0
        records = sorted(self.journal.load(), key=lambda r: (float(r["created_at"]), str(r["id"])))
        for r in records:
            if r["id"] in self.batches:
                continue
            fields = {name: r[name] for name in SAVED}
            requests = [(str(cid), dict(params)) for cid, params in r["requests"]]
            self.batches[r["id"]] = Batch(api_key="", requests=requests, results_base=results_base, **fields)
        return len(records)

    def get(self, batch_id: str) -> Batch:
        batch = self.batches.get(batch_id)
        if batch is None:
            raise ApiError(ErrorType.NOT_FOUND, f"message batch {batch_id} not found")
        return batch

    def page(self, limit: int, after_id: str | None, before_id: str | None) -> dict[str, Any]:
        ids = list(reversed(self.batches))  # newest first
        if before_id is not None and after_id is None:
            end = ids.index(before_id) if before_id in ids else 0
            return {"ids": ids[max(0, end - limit) : end], "has_more": end - limit > 0}
        start = 0 if after_id is None else (ids.index(after_id) + 1 if after_id in ids else len(ids))
        return {"ids": ids[start : start + limit], "has_more": start + limit < len(ids)}

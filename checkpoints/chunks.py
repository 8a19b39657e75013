"""A run's inventory in the store, in chunks: `runs/<run_id>/inventory/<chunk_id>.json` (the document
records of one chunk: the unit of Prefect tasks, outcome files and shards) and
`runs/<run_id>/inventory-done.json` ({"chunks", "documents"}: written last, so a run whose
inventory is done reads it back instead of walking the source again).

Chunk ids are `000000`, `000001`, ...; chunks of duplicate-content documents (resolved from their
originals after the first wave) are `dup-<n>`. Chunk files are deterministic: a crash mid-inventory
writes them again, overwriting."""

from __future__ import annotations

from typing import Any

from checkpoints.store import ObjectStore

DUP_PREFIX = "dup-"  # duplicate-content documents: resolved from their original after the first wave


def chunk_id(n: int) -> str:
    return f"{n:06d}"


class InventoryChunks:
    """One run's inventory chunks."""

    def __init__(self, store: ObjectStore, run_id: str) -> None:
        self.store, self.run_id = store, run_id
        self.prefix = f"runs/{run_id}/inventory/"
        self.done_key = f"runs/{run_id}/inventory-done.json"

    def put(self, cid: str, docs: list[dict[str, Any]]) -> str:
        self.store.put_json(f"{self.prefix}{cid}.json", docs)
        return cid

    def load(self, cid: str) -> list[dict[str, Any]]:
        return list(self.store.get_json(f"{self.prefix}{cid}.json"))

    def finish(self, chunk_ids: list[str], documents: int) -> None:
        """The inventory is complete: its chunks and how many documents they hold."""
        self.store.put_json(self.done_key, {"chunks": chunk_ids, "documents": documents})

    def done(self) -> dict[str, Any] | None:
        """{"chunks", "documents"} once the inventory is complete, else None."""
        record = self.store.get_json_or_none(self.done_key)
        return dict(record) if record is not None else None

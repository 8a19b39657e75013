"""A run's inventory in the store, in chunks: `runs/<run_id>/inventory/<chunk_id>.json` (the document
records of one chunk: the unit of Prefect tasks, outcome files and shards) and
`runs/<run_id>/inventory-done.json` ({"chunks", "documents"}: written last, so a run whose
inventory is done reads it back instead of walking the source again).

Chunk ids are `000000`, `000001`, ...; chunks of duplicate-content documents (resolved from their
originals after the first wave) are `dup-<n>`. Chunk files are deterministic: a crash mid-inventory
writes them again, overwriting.

Given the source (`source`), the inventory shares the chunk files of the last inventory of that
source: `unchanged/inventory-<source hash>.json` maps the sha256 of each chunk's bytes to the file
that holds them and its ETag, written once when the inventory is complete. A chunk whose bytes one
of those files still holds (same ETag) is linked or copied where it is (ObjectStore.copy), not
written again; the map is a hint, and anything else is written as usual."""

from __future__ import annotations

import hashlib
from typing import Any

from checkpoints.keys import source_digest
from checkpoints.store import ObjectStore, dumps_json

DUP_PREFIX = "dup-"  # duplicate-content documents: resolved from their original after the first wave
SHARED_PREFIX = "unchanged/inventory-"


def chunk_id(n: int) -> str:
    return f"{n:06d}"


class InventoryChunks:
    """One run's inventory chunks."""

    def __init__(self, store: ObjectStore, run_id: str, source: str | None = None) -> None:
        self.store, self.run_id = store, run_id
        self.prefix = f"runs/{run_id}/inventory/"
        self.done_key = f"runs/{run_id}/inventory-done.json"
        self.shared_key = f"{SHARED_PREFIX}{source_digest(source)}.json" if source else None
        self._last: dict[str, list[str]] | None = None  # the last inventory's chunks of this source
        self._written: dict[str, list[str]] = {}  # this inventory's: sha256 -> [key, ETag]

    def put(self, cid: str, docs: list[dict[str, Any]]) -> str:
        key, data = f"{self.prefix}{cid}.json", dumps_json(docs)
        if self.shared_key is None:
            self.store.put(key, data)
            return cid
        sha = hashlib.sha256(data).hexdigest()
        if self._last is None:
            self._last = self.store.get_dict(self.shared_key) or {}
        last = self._last.get(sha)
        if isinstance(last, list) and len(last) == 2 and last[0] != key:
            shared, etag = str(last[0]), str(last[1])
            if self.store.copy(shared, key, etag=etag):
                self._written[sha] = [key, etag]
                return cid
        self._written[sha] = [key, self.store.put(key, data)]
        return cid

    def load(self, cid: str) -> list[dict[str, Any]]:
        return list(self.store.get_json(f"{self.prefix}{cid}.json"))

    def finish(self, chunk_ids: list[str], documents: int) -> None:
        """The inventory is complete: its chunks and how many documents they hold (and, given the
        source, where their bytes are for the next inventory of it)."""
        if self.shared_key and self._written:
            self.store.put_json(self.shared_key, self._written)
        self.store.put_json(self.done_key, {"chunks": chunk_ids, "documents": documents})

    def done(self) -> dict[str, Any] | None:
        """{"chunks", "documents"} once the inventory is complete, else None."""
        record = self.store.get_json_or_none(self.done_key)
        return dict(record) if record is not None else None

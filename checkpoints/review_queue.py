"""The human review queue of a run: one JSON item per document at `review/<run_id>/<doc id>.json`.

An item says why the document needs a human (reason), what the model answered (raw output, any
parsed output and flags) and what was tried (attempts, models). Adding the same document again
replaces its item, so a resumed run can re-add without duplicates.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from checkpoints.keys import fitted_key, safe_segment
from checkpoints.store import ObjectStore

SUFFIX = ".json"


class ReviewQueue:
    def __init__(self, store: ObjectStore, run_id: str) -> None:
        self.store = store
        self.run_id = safe_segment(run_id)
        self.prefix = f"review/{self.run_id}/"

    def _key(self, doc_id: str) -> str:
        return self.prefix + fitted_key(doc_id, SUFFIX)  # a 255-byte file name still gets its item

    def add(self, item: Mapping[str, Any]) -> str:
        """Write (or replace) the item of `item["doc_id"]`; returns its object key."""
        doc_id = item.get("doc_id")
        if not isinstance(doc_id, str) or not doc_id:
            raise ValueError("a review item needs a doc_id")
        key = self._key(doc_id)
        self.store.put_json(key, item)
        return key

    def get(self, doc_id: str) -> dict[str, Any] | None:
        """The item of one document, or None."""
        return self.store.get_dict(self._key(doc_id))

    def list(self) -> Iterator[dict[str, Any]]:
        """Every item of the run, in key order."""
        for _key, item in self.store.json_objects(self.prefix, SUFFIX):
            yield item

    def __len__(self) -> int:
        return sum(1 for k in self.store.list(self.prefix) if k.endswith(SUFFIX))

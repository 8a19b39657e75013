"""Runs in progress: `active/<run_id>.json` = {recipe, model, source, started_at}.

A run marks itself while it is driven and unmarks itself when it stops, so a new run can see which
runs are in flight without reading every manifest. A marker outlives a crashed run; readers judge
a marker by its run's lease (`checkpoints.lease.live_lease`), never by the marker alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from checkpoints.keys import safe_segment
from checkpoints.store import ObjectStore

PREFIX = "active/"


class ActiveRuns:
    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    @staticmethod
    def key(run_id: str) -> str:
        return f"{PREFIX}{safe_segment(run_id)}.json"

    def mark(self, run_id: str, info: dict[str, Any]) -> None:
        self.store.put_json(self.key(run_id), {"run_id": run_id, **info})

    def unmark(self, run_id: str) -> None:
        self.store.delete(self.key(run_id))

    def items(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(run_id, marker) of every marked run; a marker deleted while listing is skipped."""
        for _key, info in self.store.json_objects(PREFIX):
            if info.get("run_id"):
                yield str(info["run_id"]), info


def sources_overlap(a: str, b: str) -> bool:
    """Whether two sources (folder paths or s3:// prefixes, normalized by the caller) can hold the
    same documents: one is the other or contains it."""
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)

"""Written-once results and the raw response log.

- `ResultsLedger`: `results/<pass>/<key>.json`, put-if-absent. A key with a result is never sent
  to the API again; a second writer of the same key gets the first writer's record back.
- `ResponseLog`: `responses/<pass>/<key>/<attempt>.json`, each raw API response persisted the
  moment it arrives, before anything else happens (invariant 3).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from checkpoints.keys import safe_segment
from checkpoints.store import ObjectStore, dumps_json
from docmill.errors import NotFound, StoreError

ATTEMPT_DIGITS = 6
MAX_ATTEMPT_PROBES = 1000


class ResultsLedger:
    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    @staticmethod
    def path(pass_name: str, key: str) -> str:
        return f"results/{safe_segment(pass_name)}/{safe_segment(key)}.json"

    def get(self, pass_name: str, key: str) -> dict[str, Any] | None:
        return self.store.get_dict(self.path(pass_name, key))

    def has(self, pass_name: str, key: str) -> bool:
        return self.store.exists(self.path(pass_name, key))

    def put(self, pass_name: str, key: str, record: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Write once. Returns (record in the store, written): the loser of a race gets the winner's."""
        winner = self.put_many(pass_name, [(key, dumps_json(record))])[0]
        return (record, True) if winner is None else (winner, False)

    def put_many(self, pass_name: str, records: Sequence[tuple[str, bytes]]) -> list[dict[str, Any] | None]:
        """`put` of each (key, record as JSON bytes), durable together (`ObjectStore.put_many_if_absent`:
        one flush of a local store for the group, each result still written once and atomically).
        Per record: None when it was written, else the record another writer put first. The caller
        serialises (a pydantic model's own JSON: no dict is built to be dumped again)."""
        paths = [self.path(pass_name, key) for key, _ in records]
        written = self.store.put_many_if_absent(
            [(path, data) for path, (_, data) in zip(paths, records, strict=True)]
        )
        return [None if ok else self._winner(path) for path, ok in zip(paths, written, strict=True)]

    def _winner(self, path: str) -> dict[str, Any]:
        """The record another writer put first (the loser of a race reads it)."""
        try:
            stored: dict[str, Any] = self.store.get_json(path)
        except NotFound as e:  # only if someone deleted it in between: results are immutable
            raise StoreError(f"result {path} vanished right after a conflicting write", key=path) from e
        return stored


class ResponseLog:
    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    @staticmethod
    def prefix(pass_name: str, key: str) -> str:
        return f"responses/{safe_segment(pass_name)}/{safe_segment(key)}/"

    def path(self, pass_name: str, key: str, attempt: int) -> str:
        if attempt < 0:
            raise ValueError("attempt must be >= 0")
        return f"{self.prefix(pass_name, key)}{attempt:0{ATTEMPT_DIGITS}d}.json"

    def put(
        self,
        pass_name: str,
        key: str,
        attempt: int,
        response: dict[str, Any],
        *,
        on_slot: Callable[[int], None] | None = None,
    ) -> int:
        """Persist a response under `attempt`; never overwrites one already there (it was billed):
        if that attempt number is taken (a resumed run re-counting), the next free number is used.
        `on_slot(n)` runs before each try, so the bytes written can name their own slot.
        Returns the attempt number written."""
        for n in range(attempt, attempt + MAX_ATTEMPT_PROBES):
            if on_slot is not None:
                on_slot(n)
            if self.store.put_json(self.path(pass_name, key, n), response, if_absent=True):
                return n
        raise StoreError(f"no free attempt slot for {pass_name}/{key} near {attempt}", key=key)

    def get(self, pass_name: str, key: str, attempt: int) -> dict[str, Any] | None:
        return self.store.get_dict(self.path(pass_name, key, attempt))

    def attempts(self, pass_name: str, key: str) -> list[int]:
        return self.store.numbers(self.prefix(pass_name, key), ".json")

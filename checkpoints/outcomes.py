"""Per-chunk outcome files of a run: `runs/<run_id>/outcomes/<chunk_id>.json`.

The per-file pass writes one file per chunk when the chunk is done; a resume skips the chunks in
`chunks_done()`. A chunk holding a `retryable` outcome (a transient failure, invariant 12) also has a
`<chunk_id>.retry` marker (written before the chunk, removed after a write without one), so it is
not done: a resume or a continued run redoes it, its finished documents as free ledger hits. (Per-document results live in the results ledger; these files are the run's view.)

`ChunkIndex` (`unchanged/<digest>.json`, shared by runs): where a finished outcome chunk lives, by the
digest of what decided it (its documents' inventory records and per-file keys), so a later run whose
chunk has the same digest takes that chunk's outcomes instead of looking every document up again
(tasks.per_file.unchanged). A hint, never the truth: the chunk it names is checked document by
document before it is used, and a missing one is simply not used.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypedDict

from checkpoints.keys import safe_segment
from checkpoints.store import ObjectStore, dumps_json
from docmill.errors import NotFound

SUFFIX = ".json"
RETRY = ".retry"
INDEX_PREFIX = "unchanged/"


class OutcomeLog:
    def __init__(self, store: ObjectStore, run_id: str) -> None:
        self.store = store
        self.run_id = safe_segment(run_id)
        self.prefix = f"runs/{self.run_id}/outcomes/"

    def _key(self, chunk_id: str, suffix: str = SUFFIX) -> str:
        return f"{self.prefix}{safe_segment(chunk_id)}{suffix}"

    def _clear_retry(self, chunk_id: str) -> None:
        if self.store.exists(marker := self._key(chunk_id, RETRY)):
            self.store.delete(marker)

    def write_chunk(self, chunk_id: str, outcomes: list[dict[str, Any]]) -> str:
        """Record a finished chunk (replaces an earlier write of the same chunk); its file's ETag."""
        retry = any(o.get("retryable") for o in outcomes)
        return self.write_encoded(chunk_id, [dumps_json(o) for o in outcomes], retry=retry)

    def write_encoded(self, chunk_id: str, outcomes: list[bytes], *, retry: bool) -> str:
        """`write_chunk` of outcomes already encoded as JSON objects (`retry`: one of them is
        retryable): the file is joined around them, never parsed and dumped again."""
        data = b'{"chunk_id":%s,"outcomes":[%s]}' % (dumps_json(chunk_id), b",".join(outcomes))
        if not retry:
            return self.put_raw_chunk(chunk_id, data)
        self.store.put_json(self._key(chunk_id, RETRY), {"chunk_id": chunk_id})
        return self.store.put(self._key(chunk_id), data)

    def raw_chunk(self, chunk_id: str) -> bytes | None:
        """The stored bytes of a finished chunk's file (None when there is none)."""
        try:
            return self.store.get(self._key(chunk_id))
        except NotFound:
            return None

    def copy_chunk(self, other: OutcomeLog, chunk_id: str, etag: str) -> bool:
        """Record a finished chunk as `other`'s file of the same chunk id, shared or copied where it
        is (ObjectStore.copy) while that file still has `etag`; False, nothing recorded, otherwise."""
        if not self.store.copy(other._key(chunk_id), self._key(chunk_id), etag=etag):
            return False
        self._clear_retry(chunk_id)
        return True

    def put_raw_chunk(self, chunk_id: str, data: bytes) -> str:
        """Record a finished chunk, no outcome retryable, as its file's bytes (those of another run's
        file of the same chunk id: `write_chunk` without encoding it again); its ETag."""
        etag = self.store.put(self._key(chunk_id), data)
        self._clear_retry(chunk_id)
        return etag

    def read_chunk(self, chunk_id: str) -> list[dict[str, Any]] | None:
        data = self.store.get_json_or_none(self._key(chunk_id))
        return None if data is None else list(data.get("outcomes") or [])

    def chunks_done(self) -> set[str]:
        """Chunks written without a retryable outcome (a resume skips them)."""
        done, retry = set(), set()
        for key in self.store.list(self.prefix):
            name = key[len(self.prefix) :]
            if "/" in name:
                continue
            if name.endswith(SUFFIX):
                done.add(name[: -len(SUFFIX)])
            elif name.endswith(RETRY):
                retry.add(name[: -len(RETRY)])
        return done - retry

    def all(self) -> Iterator[dict[str, Any]]:
        """Every outcome of every finished chunk, chunk by chunk."""
        for key in self.store.list(self.prefix):
            if key.endswith(SUFFIX):
                data = self.store.get_json_or_none(key)
                if isinstance(data, dict):
                    yield from data.get("outcomes") or []


class ChunkRef(TypedDict, total=False):
    """An index entry: the chunk, and once a run has checked its outcomes document by document
    (every one a ledger hit or decided by its inventory record, none retryable), that file's ETag
    and the positions of its outcomes that need review. A later run with the same digest shares a
    file that still has that ETag and holds nothing for review without reading its outcomes."""

    run_id: str
    chunk_id: str
    etag: str
    review: list[int]


class ChunkIndex:
    """`unchanged/<digest>.json` -> ChunkRef: a finished outcome chunk decided by `digest` (put
    replaces: any writer's pointer names a chunk that was true for the digest)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def _key(self, digest: str) -> str:
        return f"{INDEX_PREFIX}{safe_segment(digest)}{SUFFIX}"

    def ref(self, digest: str) -> ChunkRef | None:
        """The entry recorded under `digest`, or None."""
        data = self.store.get_json_or_none(self._key(digest))
        if not isinstance(data, dict) or not data.get("run_id") or not data.get("chunk_id"):
            return None
        ref: ChunkRef = {"run_id": str(data["run_id"]), "chunk_id": str(data["chunk_id"])}
        review = data.get("review")
        if isinstance(data.get("etag"), str) and isinstance(review, list):
            ref["etag"], ref["review"] = data["etag"], [int(i) for i in review]
        return ref

    def put(
        self,
        digest: str,
        run_id: str,
        chunk_id: str,
        *,
        etag: str | None = None,
        review: list[int] | None = None,
    ) -> None:
        """Name the chunk decided by `digest`; with `etag` and `review` when its outcomes were checked."""
        ref: dict[str, Any] = {"run_id": run_id, "chunk_id": chunk_id}
        if etag is not None and review is not None:
            ref.update(etag=etag, review=review)
        self.store.put_json(self._key(digest), ref)

"""Chunks whose documents did not change take a finished chunk's outcomes whole.

A chunk's outcomes are decided by its documents' inventory records and their per-file idempotency
keys (a key names a result in the ledger, written once: invariant 1). So a chunk whose `chunk_digest`
equals that of a finished chunk of an earlier run has the outcomes that chunk recorded, as ledger
hits: `reuse_unchanged` writes them as this run's outcome file before the per-file pass, instead of a
ledger read and an outcome built per document; `remember_chunks` records the chunks a run finished
for the next run (checkpoints.outcomes.ChunkIndex).

The earlier chunk is a hint checked before it is used (`reusable`): same documents and keys, nothing
retryable, and each outcome answered in that run marked a ledger hit once the ledger is seen to hold
its key (the outcome a run settles is the ledger's record, `settle.write_outcome`; a result held by
the cost guard or a failure with no ledger record is decided again). Its documents that need review are
queued again. Once checked, the index entry carries the chunk file's ETag: a later run shares that
file (a hard link locally, a server-side copy on S3) unread while it still has that ETag.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from checkpoints.chunks import InventoryChunks
from checkpoints.keys import content_hash
from checkpoints.outcomes import ChunkIndex, OutcomeLog
from checkpoints.store import loads_json
from docmill.logs import get_logger
from tasks.per_file.outcome import DocOutcome, DocState
from tasks.per_file.settle import Pass, enqueue_review
from tasks.request import FILE_PASS
from tasks.source.document import Document

if TYPE_CHECKING:
    from collections.abc import Iterable

log = get_logger("unchanged")


def chunk_digest(p: Pass, docs: list[dict[str, Any]]) -> tuple[str, list[str | None]]:
    """The digest of what decides a chunk's outcomes (its inventory records and each document's
    per-file key; None for a document the inventory skipped for its own sake) and the keys."""
    keys = [p.key(Document.model_validate(d)) for d in docs]
    return content_hash({"pass": FILE_PASS, "docs": docs, "keys": keys}), keys


def reusable(
    p: Pass, docs: list[dict[str, Any]], keys: list[str | None], old: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], bool] | None:
    """An earlier chunk's outcomes as this run's (and whether any had to change: answered then, a
    ledger hit now), or None when that chunk does not hold what this run would decide."""
    if len(old) != len(docs):
        return None
    out: list[dict[str, Any]] = []
    changed = False
    for d, key, o in zip(docs, keys, old, strict=True):
        if o.get("doc_id") != d.get("doc_id") or o.get("key") != key or o.get("retryable"):
            return None
        if key is not None and not o.get("from_ledger"):
            # settled with the ledger, it is the ledger's record (settle.write_outcome returns what
            # the ledger holds): a ledger hit now, once the ledger is seen to hold its key
            if not p.ledger.has(FILE_PASS, key):  # held by the cost guard, or a failure not in it
                return None
            o = {**o, "from_ledger": True}
            changed = True
        out.append(o)
    return out, changed


def reuse_chunk(
    p: Pass, index: ChunkIndex, cid: str, docs: list[dict[str, Any]], digest: str, keys: list[str | None]
) -> bool:
    """Write this run's outcome file of chunk `cid` from an earlier run's chunk with the same digest;
    False (nothing written) when there is none or it does not hold. A chunk an earlier run checked
    (its index entry has the file's ETag) and that holds nothing for review is shared as it is,
    its outcomes not read (ObjectStore.copy); otherwise it is read and checked document by
    document (`reusable`), and the entry records the ETag for the next run."""
    ref = index.ref(digest)
    if ref is None:
        return False
    earlier, log_ = OutcomeLog(p.store, ref["run_id"]), OutcomeLog(p.store, p.run_id)
    checked = "etag" in ref and not ref.get("review") and ref["chunk_id"] == cid
    if checked and log_.copy_chunk(earlier, cid, ref["etag"]):
        return True
    raw = earlier.raw_chunk(ref["chunk_id"])
    if raw is None:  # that run's files are gone
        return False
    data = loads_json(raw)
    old = data.get("outcomes") if isinstance(data, dict) else None
    got = reusable(p, docs, keys, old) if isinstance(old, list) else None
    if got is None:
        return False
    records, changed = got
    review = [n for n, o in enumerate(records) if o.get("state") == DocState.NEEDS_REVIEW.value]
    for n in review:  # queued for review again, as a ledger hit is
        enqueue_review(p, Document.model_validate(docs[n]), DocOutcome.model_validate(records[n]))
    if changed or data.get("chunk_id") != cid:
        # its answers are ledger hits now: the next run takes this chunk, reading no result
        index.put(digest, p.run_id, cid, etag=log_.write_chunk(cid, records), review=review)
        return True
    # the same bytes this run would write: not encoded again; checked now, the next run shares them
    index.put(digest, p.run_id, cid, etag=log_.put_raw_chunk(cid, raw), review=review)
    return True


def reuse_unchanged(p: Pass, chunk_ids: Iterable[str]) -> tuple[set[str], dict[str, str]]:
    """Chunks of run `p.run_id` without an outcome file that take an earlier run's outcomes
    (`reuse_chunk`), and every chunk's digest (for `remember_chunks`)."""
    chunks, index = InventoryChunks(p.store, p.run_id), ChunkIndex(p.store)
    done = OutcomeLog(p.store, p.run_id).chunks_done()
    reused: set[str] = set()
    digests: dict[str, str] = {}
    for cid in chunk_ids:
        docs = chunks.load(cid)
        digest, keys = chunk_digest(p, docs)
        if cid not in done and reuse_chunk(p, index, cid, docs, digest, keys):
            reused.add(cid)
        else:
            digests[cid] = digest
    if reused:
        log.info("%d chunk(s) unchanged since an earlier run: outcomes taken whole", len(reused))
    return reused, digests


def remember_chunks(p: Pass, digests: dict[str, str]) -> int:
    """Record this run's finished chunks (those of `digests`: computed, not taken) for later runs;
    returns how many."""
    done = OutcomeLog(p.store, p.run_id).chunks_done()
    index = ChunkIndex(p.store)
    n = 0
    for cid, digest in digests.items():
        if cid in done:
            index.put(digest, p.run_id, cid)
            n += 1
    return n

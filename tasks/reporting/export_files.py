"""A run's export files (`runs/<id>/exports/`), encoded once per set of results.

What the exports hold is decided by the outcomes after review decisions: an outcome with a key, read
from the results ledger or in an answered state, by its document id, its key and the fields a run
sets on it (state, reason, failure type); any other outcome, or one with a review decision, whole.
The key stands for the rest: such an outcome is the ledger's record for its key, read from it or
settled with it (`settle.write_outcome` returns what the ledger holds; a result is written once,
invariant 1), or a hold for cost review, made from the key, its model and the reason alone. So the
run that stored the answers and the unchanged nights after it, which read them from the ledger,
have one digest. `exports_digest` hashes that; the first run with a digest records its files and
their sha256 under `unchanged/exports-<digest>.json`, and a later run with the same digest (an
unchanged nightly) shares them (ObjectStore.copy on the ETag each had when written: a hard link
locally, a server-side copy on S3) instead of encoding ~48 MB again (seconds of CPU at 10,000
invoices).
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

from checkpoints.keys import content_hash, safe_segment
from docmill.errors import NotFound
from tasks.reporting.exports import export_rows, to_csv, to_jsonl, to_parquet

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore

EXPORTS_FORMAT = 1  # raise when an export's layout changes: files of another layout are not copied
INDEX_PREFIX = "unchanged/exports-"
FILES = {"jsonl": "results.jsonl", "csv": "results.csv", "parquet": "results.parquet"}
ANSWERED = ("succeeded", "needs_review")  # the states of an outcome the ledger holds (or a hold)


def exports_digest(outcomes: list[dict[str, Any]], *, parquet: bool) -> str:
    """What decides a run's export files, hashed (see the module docstring)."""
    parts: list[Any] = [EXPORTS_FORMAT, parquet]
    for o in outcomes:
        if o.get("key") and (o.get("from_ledger") or o.get("state") in ANSWERED) and not o.get("review"):
            parts.append([o["doc_id"], o["key"], o.get("state"), o.get("reason"), o.get("failure_type")])
        else:
            parts.append(o)
    return content_hash(parts)


def parquet_available() -> bool:
    """Whether pyarrow (an optional dependency: Parquet only when it is there) is installed, found
    without importing it: a run whose exports are copied never pays pyarrow's ~0.1-0.2 s import
    (`to_parquet` imports it when it encodes, and writes no Parquet should that import fail)."""
    return importlib.util.find_spec("pyarrow") is not None


def copied(store: ObjectStore, index: dict[str, Any], base: str, index_key: str) -> dict[str, str] | None:
    """The files an index entry names, copied under `base` when each is still what was written:
    shared where they are (ObjectStore.copy, on condition of the ETag recorded) or, for an entry
    without ETags, read, checked against their sha256 and written (the entry then names these
    files with their ETags, for the next run to share)."""
    files, etags = index.get("files") or {}, index.get("etags") or {}
    keys = {name: f"{base}/exports/{FILES[name]}" for name in files}
    if files and set(etags) == set(files):
        for name, (key, _sha) in files.items():
            if not store.copy(key, keys[name], etag=etags[name]):
                return None
        return keys
    got: dict[str, bytes] = {}
    for name, (key, sha) in files.items():
        try:
            data = store.get(key)
        except NotFound:
            return None
        if hashlib.sha256(data).hexdigest() != sha:
            return None
        got[name] = data
    etags = {name: store.put(keys[name], data) for name, data in got.items()}
    store.put_json(index_key, {"files": {n: [keys[n], files[n][1]] for n in files}, "etags": etags})
    return keys


def write_exports(store: ObjectStore, base: str, outcomes: list[dict[str, Any]]) -> dict[str, str]:
    """Write JSONL, CSV and (with pyarrow) Parquet under `base`/exports/; returns name -> key. An
    earlier run's files with the same digest are copied instead of encoded again."""
    digest = exports_digest(outcomes, parquet=parquet_available())
    index_key = f"{INDEX_PREFIX}{safe_segment(digest)}.json"
    index = store.get_json_or_none(index_key)
    if isinstance(index, dict) and (keys := copied(store, index, base, index_key)) is not None:
        return keys
    keys, files, etags = {}, {}, {}
    flat = cache(lambda: export_rows(outcomes))  # CSV and Parquet share the flattened rows
    encoders: dict[str, Callable[[], bytes | None]] = {
        "jsonl": lambda: to_jsonl(outcomes),
        "csv": lambda: to_csv(flat()),
        "parquet": lambda: to_parquet(flat()),
    }
    for name, encode in encoders.items():
        data = encode()
        if data is None:  # no pyarrow: no Parquet
            continue
        keys[name] = f"{base}/exports/{FILES[name]}"
        etags[name] = store.put(keys[name], data)
        files[name] = [keys[name], hashlib.sha256(data).hexdigest()]
    store.put_json(index_key, {"files": files, "etags": etags})
    return keys

"""Compare-and-swap of shared records: the only module that reads an object with its ETag and
writes it back conditionally (a layout test keeps it so). A leaf.

`swap` is the loop (the run manifest, the lease, batch records and, through
`update_json`, the shared rate-limit pool, shard claims and allowances). `read` / `write` are one
conditional read and write, for a writer that keeps its own ETag between writes and treats a lost
race as an error, not a reason to retry (a long task's checkpoint: two drivers must stop, not merge).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, Generic, NamedTuple, TypeVar

from checkpoints.store import ObjectStore, dumps_json, loads_json
from docmill.errors import NotFound, PreconditionFailed

MAX_ATTEMPTS = 32
T = TypeVar("T")
Update = Callable[[dict[str, Any] | None], dict[str, Any] | None]


class Write(NamedTuple, Generic[T]):
    """What `decide` wants written (`data`) and what `swap` returns once it is (`result`)."""

    data: bytes
    result: T


Decide = Callable[[bytes | None], "Write[T] | None"]


def read(store: ObjectStore, key: str) -> tuple[bytes | None, str | None]:
    """(the object's bytes, its ETag), or (None, None) when absent."""
    try:
        return store.get_with_etag(key)
    except NotFound:
        return None, None


def write(store: ObjectStore, key: str, data: bytes, etag: str | None) -> str | None:
    """Write `data` only if the object is still the one read with `etag` (absent when `etag` is None);
    the new ETag, or None when another writer got there first."""
    if etag is None:
        return read(store, key)[1] if store.put_if_absent(key, data) else None
    try:
        return store.put_if_match(key, data, etag)
    except PreconditionFailed:
        return None


def _lost(attempt: int) -> None:
    time.sleep(random.uniform(0, min(0.005 * (attempt + 1), 0.1)))


def swap(
    store: ObjectStore,
    key: str,
    decide: Decide[T],
    *,
    attempts: int = MAX_ATTEMPTS,
    exhausted: Callable[[], Exception] | None = None,
) -> T | None:
    """Compare-and-swap `key`: `decide(current bytes or None)` returns a `Write` (written with
    If-Match, or If-None-Match when absent, and its `result` returned), None (give up: nothing
    written, None returned) or raises (propagates). A lost race reads and decides again after a short
    jittered sleep, so `decide` must depend only on what it is given. After `attempts` lost races,
    `exhausted()` is raised (default: `PreconditionFailed`)."""
    for attempt in range(attempts):
        current, etag = read(store, key)
        wanted = decide(current)
        if wanted is None:
            return None
        try:
            if etag is None:
                if store.put_if_absent(key, wanted.data):
                    return wanted.result
            else:
                store.put_if_match(key, wanted.data, etag)
                return wanted.result
        except PreconditionFailed:
            pass
        if attempt + 1 < attempts:
            _lost(attempt)
    if exhausted is not None:
        raise exhausted()
    raise PreconditionFailed(
        f"{key} kept changing: {attempts} compare-and-swap attempts lost",
        hint="too many processes update it at once; retry",
        attempts=attempts,
    )


def read_json(store: ObjectStore, key: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the record, its ETag), or (None, None) when absent."""
    data, etag = read(store, key)
    if data is None:
        return None, None
    found = loads_json(data)
    return (found if isinstance(found, dict) else None), etag


def update_json(
    store: ObjectStore,
    key: str,
    fn: Update,
    *,
    attempts: int = MAX_ATTEMPTS,
    exhausted: Callable[[], Exception] | None = None,
) -> dict[str, Any] | None:
    """Apply `fn(current or None)` by compare-and-swap and return what was written. `fn` returning
    None writes nothing (and None is returned). `fn` may run more than once: it must depend only on
    the record it is given. `exhausted`: as for `swap`."""

    def decide(data: bytes | None) -> Write[dict[str, Any]] | None:
        found = None if data is None else loads_json(data)
        new = fn(found if isinstance(found, dict) else None)
        return None if new is None else Write(dumps_json(new), new)

    return swap(store, key, decide, attempts=attempts, exhausted=exhausted)

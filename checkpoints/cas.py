"""One compare-and-swap loop for small shared JSON records (a leaf): read with ETag, apply a
function, write with If-Match (or If-None-Match when absent), and on a lost race read again.

Used by the records several processes change at once: the shared rate-limit pool
(checkpoints.limits) and a run's shard claims (checkpoints.shards). The run manifest keeps its own
loop (checkpoints.manifest), which predates this one.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from checkpoints.store import ObjectStore, dumps_json, loads_json
from docmill.errors import NotFound, PreconditionFailed

MAX_ATTEMPTS = 32
Update = Callable[[dict[str, Any] | None], dict[str, Any] | None]


def read_json(store: ObjectStore, key: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the record, its ETag), or (None, None) when absent."""
    try:
        data, etag = store.get_with_etag(key)
    except NotFound:
        return None, None
    found = loads_json(data)
    return (found if isinstance(found, dict) else None), etag


def update_json(
    store: ObjectStore,
    key: str,
    fn: Update,
    *,
    attempts: int = MAX_ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any] | None:
    """Apply `fn(current or None)` by compare-and-swap and return what was written. `fn` returning
    None writes nothing (and None is returned). `fn` may run more than once: it must depend only on
    the record it is given."""
    for attempt in range(attempts):
        current, etag = read_json(store, key)
        new = fn(current)
        if new is None:
            return None
        data = dumps_json(new)
        try:
            if etag is None:
                if store.put_if_absent(key, data):
                    return new
            else:
                store.put_if_match(key, data, etag)
                return new
        except PreconditionFailed:
            pass
        sleep(random.uniform(0, min(0.005 * (attempt + 1), 0.1)))
    raise PreconditionFailed(
        f"{key} kept changing: {attempts} compare-and-swap attempts lost",
        hint="too many processes update it at once; retry",
        attempts=attempts,
    )

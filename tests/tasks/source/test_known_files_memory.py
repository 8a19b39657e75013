"""What an inventory keeps per file for the next inventory cache (tasks.source.known_files): the
encoded `[stamp, record]` until the cache is saved, not Python objects (~0.5 KB a file: a real run's
memory grew with the corpus by that much during its inventory). The cache object written from them
is the one `InventoryCache.save` writes from records."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

from checkpoints.inventory_cache import InventoryCache
from checkpoints.store import dumps_json, open_store
from tasks.source.document import Document
from tasks.source.known_files import BASE_FIELDS, KnownFiles

FILES = 2000


def doc(i: int) -> Document:
    return Document(
        doc_id=f"2026/05/inv-{i:06d}.txt",
        source_uri=f"file:///srv/invoices/2026/05/inv-{i:06d}.txt",
        sha256=f"{i * 7919:064x}",
        size=1200 + i,
        doc_type="invoice",
        text_chars=1100 + i,
    )


def stamp(i: int, d: Document) -> list[int | str]:
    return [d.size, 1_796_315_880_900_274_465 + i, 1_796_315_880_900_274_465 + i, 9_969_669 + i]


def test_the_next_cache_is_kept_encoded_until_it_is_saved(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store")
    known = KnownFiles(InventoryCache(store, "src", "fp"))
    docs = [(d.doc_id, d) for d in map(doc, range(FILES))]
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for i, (name, d) in enumerate(docs):  # a stamp as os.stat gives it: new ints
            known.learn(name, stamp(i, d), d, has_parts=False)
        held = (tracemalloc.get_traced_memory()[0] - start) / FILES
    finally:
        tracemalloc.stop()
    assert held < 300, f"{held:.0f} bytes a file kept for the next cache"  # as objects: 460

    known.save()
    files, taken_ns = known.cache.load()
    assert taken_ns == known.taken_ns and len(files) == FILES
    for i, (name, d) in enumerate(docs):
        record = d.model_dump(mode="json", exclude=set(BASE_FIELDS), exclude_defaults=True)
        assert files[name] == (stamp(i, d), {**record, "sha256": d.sha256, "size": d.size})
    data = gzip.decompress(store.get(known.cache.key))
    assert data == dumps_json(json.loads(data))  # the bytes `dumps_json` gives the same object

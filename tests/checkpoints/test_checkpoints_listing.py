"""Listing 10,000 objects streams: keys come out while the rest are still unread."""

from __future__ import annotations

import tracemalloc
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from checkpoints.store import open_store
from checkpoints.store.s3 import S3Store

N = 10_000


def _fill_local(root: Path) -> list[str]:
    """10,000 objects in 100 folders, written straight to disk (the layout the store writes)."""
    keys = []
    for d in range(100):
        folder = root / "results" / f"p{d:03d}"
        folder.mkdir(parents=True)
        for i in range(100):
            (folder / f"k{i:04d}.json").write_bytes(b"{}")
            keys.append(f"results/p{d:03d}/k{i:04d}.json")
    return keys


def _peak_while(fn: Any) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_local_listing_streams_10k_with_bounded_memory(tmp_path: Path) -> None:
    keys = _fill_local(tmp_path)
    store = open_store(tmp_path)
    listing = store.list("results/")
    assert isinstance(listing, types.GeneratorType)
    first = next(listing)
    assert first == keys[0]
    # Add an object after the walk started: a folder not yet visited is read only when reached.
    (tmp_path / "results" / "p099" / "k9999.json").write_bytes(b"{}")
    rest = list(listing)
    assert [first, *rest] == [*keys, "results/p099/k9999.json"]

    count = [0]

    def stream() -> None:
        for _ in store.list("results/"):
            count[0] += 1

    streaming_peak = _peak_while(stream)
    materialized_peak = _peak_while(lambda: list(store.list("results/")))
    assert count[0] == N + 1
    assert streaming_peak < 200_000, streaming_peak  # one folder of names, not 10,000 keys
    assert streaming_peak * 4 < materialized_peak, (streaming_peak, materialized_peak)


def test_s3_listing_streams_page_by_page(s3_store_uri: str) -> None:
    """Same shape on S3 at a tenth of the size (uploading 10,000 objects takes ~35 s here):
    1,000 objects in pages of 100."""
    store = open_store(s3_store_uri)
    assert isinstance(store, S3Store)
    store.page_size = 100
    n = N // 10
    keys = [f"many/{i:05d}.json" for i in range(n)]
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda k: store.put(k, b"{}"), keys))
    pages = [0]
    store.client.meta.events.register(
        "before-send.s3.ListObjectsV2", lambda **_: pages.__setitem__(0, pages[0] + 1)
    )
    listing = store.list("many/")
    assert isinstance(listing, types.GeneratorType)
    assert pages[0] == 0  # nothing fetched before the first key is asked for
    assert next(listing) == keys[0]
    assert pages[0] == 1  # the first key arrives after one page, not after 10 pages
    for _ in range(store.page_size):
        next(listing)
    assert pages[0] == 2
    rest = list(listing)
    assert len(rest) == n - 1 - store.page_size
    assert pages[0] == n // store.page_size

"""A run's inventory chunks (checkpoints.chunks): the next inventory of the same source shares the
files whose bytes it would write again, and writes anything else."""

from __future__ import annotations

from pathlib import Path

from checkpoints.chunks import InventoryChunks
from checkpoints.store import open_store


def docs(n: int, tag: str = "") -> list[dict[str, object]]:
    return [{"doc_id": f"d{n}-{i}{tag}", "sha256": f"{n}{i}{tag}"} for i in range(3)]


def inventory(
    store: object, run_id: str, chunks: list[list[dict[str, object]]], source: str = "/src"
) -> None:
    inv = InventoryChunks(store, run_id, source)  # type: ignore[arg-type]
    ids = [inv.put(f"{n:06d}", c) for n, c in enumerate(chunks)]
    inv.finish(ids, sum(len(c) for c in chunks))


def test_an_unchanged_chunk_is_shared_and_a_changed_one_written(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    inventory(store, "one", [docs(0), docs(1)])
    inventory(store, "two", [docs(0), docs(1, "x")])  # the second chunk changed
    path = tmp_path / "runs"
    assert (path / "two/inventory/000000.json").stat().st_ino == (
        path / "one/inventory/000000.json"
    ).stat().st_ino
    assert (path / "two/inventory/000001.json").stat().st_ino != (
        path / "one/inventory/000001.json"
    ).stat().st_ino
    assert InventoryChunks(store, "two").load("000001") == docs(1, "x")
    assert InventoryChunks(store, "two").load("000000") == docs(0)
    # a file of the map written since (another ETag): this chunk is written, not shared
    store.put("runs/two/inventory/000000.json", b"[]")
    inventory(store, "three", [docs(0), docs(1, "x")])
    assert InventoryChunks(store, "three").load("000000") == docs(0)
    assert (path / "three/inventory/000000.json").stat().st_ino != (
        path / "two/inventory/000000.json"
    ).stat().st_ino
    assert (path / "three/inventory/000001.json").stat().st_ino == (
        path / "two/inventory/000001.json"
    ).stat().st_ino
    # another source shares nothing
    inventory(store, "other", [docs(0)], source="/elsewhere")
    assert (path / "other/inventory/000000.json").stat().st_nlink == 1

"""The inventory's fast path (tasks.source.known_files): a file the source says is unchanged is not read,
and every change is still seen. Each case compares with a full inventory that reads every file."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from checkpoints.inventory_cache import InventoryCache
from checkpoints.store import open_store
from docmill.settings import InventorySettings, Settings
from tasks.source.document import Document, SkipReason
from tasks.source.inventory import inventory
from tasks.source.known_files import KnownFiles, fingerprint, known_files
from tasks.source.readers import ALL_TYPES

LATER_NS = 60 * 10**9  # the clock of a nightly: the files were written well before its inventory


def settings_for(tmp_path: Path, **inv: object) -> Settings:
    return Settings(store=str(tmp_path / "store"), inventory=InventorySettings(**inv))  # type: ignore[arg-type]


def nightly(src: Path, settings: Settings, *, later_ns: int = LATER_NS) -> tuple[list[Document], KnownFiles]:
    """One inventory with the cache, its clock `later_ns` ahead of the files' times."""
    cache = InventoryCache(open_store(settings.store), str(src), fingerprint(settings, ALL_TYPES))
    known = KnownFiles(cache, now_ns=lambda: time.time_ns() + later_ns)
    return list(inventory(str(src), settings, known=known)), known


def full(src: Path, settings: Settings) -> list[Document]:
    return list(inventory(str(src), settings))


@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("Invoice A-1 total 10.00 EUR\n")
    (root / "b.md").write_text("# Invoice B-2\ntotal 20.00 EUR\n")
    (root / "sub" / "c.json").write_text('{"invoice": "C-3", "total": 30}\n')
    (root / "sub" / "copy.txt").write_text("Invoice A-1 total 10.00 EUR\n")  # a duplicate of a.txt
    (root / "empty.txt").write_text("")
    return root


def test_unchanged_files_are_not_read_and_give_the_same_documents(src: Path, tmp_path: Path) -> None:
    s = settings_for(tmp_path)
    first, k1 = nightly(src, s)
    assert k1.counts == {"trusted": 0, "confirmed": 0, "read": 5}
    again, k2 = nightly(src, s)
    assert k2.counts == {"trusted": 5, "confirmed": 0, "read": 0}
    assert again == first == full(src, s)
    assert [d.skip_reason for d in again if d.doc_id == "sub/copy.txt"] == [SkipReason.DUPLICATE]


def test_changed_in_place_same_size_is_seen(src: Path, tmp_path: Path) -> None:
    s = settings_for(tmp_path)
    nightly(src, s)
    path = src / "a.txt"
    path.write_text("Invoice A-1 total 99.00 EUR\n")  # same size, new bytes; mtime moves
    docs, k = nightly(src, s)
    assert k.counts == {"trusted": 3, "confirmed": 0, "read": 2}  # and its former duplicate, as itself
    assert docs == full(src, s)
    assert {d.doc_id: d.status for d in docs}["sub/copy.txt"] == "ok"  # no longer a duplicate


def test_content_changed_with_mtime_forced_back_is_seen(src: Path, tmp_path: Path) -> None:
    s = settings_for(tmp_path)
    nightly(src, s)
    path = src / "b.md"
    before = path.stat()
    time.sleep(0.01)  # a ctime tick apart on any filesystem that keeps nanoseconds
    path.write_text("# Invoice B-2\ntotal 29.00 EUR\n")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # size and mtime as recorded
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    docs, k = nightly(src, s)
    assert k.counts["read"] == 1
    assert docs == full(src, s)


def test_touched_file_is_confirmed_by_its_hash(src: Path, tmp_path: Path) -> None:
    s = settings_for(tmp_path)
    nightly(src, s)
    os.utime(src / "sub" / "c.json", ns=(1, 1))  # the stamp moves, the bytes do not
    docs, k = nightly(src, s)
    assert k.counts == {"trusted": 4, "confirmed": 1, "read": 0}
    assert docs == full(src, s)


def test_new_and_deleted_files(src: Path, tmp_path: Path) -> None:
    s = settings_for(tmp_path)
    nightly(src, s)
    (src / "sub" / "d.txt").write_text("Invoice D-4 total 40.00 EUR\n")
    (src / "b.md").unlink()
    docs, k = nightly(src, s)
    assert k.counts == {"trusted": 4, "confirmed": 0, "read": 1}
    assert docs == full(src, s)
    assert "b.md" not in {d.doc_id for d in docs} and "sub/d.txt" in {d.doc_id for d in docs}
    files, _ = InventoryCache(open_store(s.store), str(src), fingerprint(s, ALL_TYPES)).load()
    assert "b.md" not in files and "sub/d.txt" in files


def test_a_duplicate_whose_original_is_gone_is_read_as_itself(src: Path, tmp_path: Path) -> None:
    s = settings_for(tmp_path)
    nightly(src, s)
    (src / "a.txt").unlink()
    docs, k = nightly(src, s)
    copy = next(d for d in docs if d.doc_id == "sub/copy.txt")
    assert copy.status == "ok" and copy.text_chars  # what its reader found, not a duplicate's record
    assert k.counts["read"] == 1
    assert docs == full(src, s)


def test_stamps_inside_the_racy_window_are_not_trusted(src: Path, tmp_path: Path) -> None:
    s = settings_for(tmp_path)
    nightly(src, s, later_ns=0)  # the files were written just now: a second write may keep the mtime
    docs, k = nightly(src, s, later_ns=0)
    assert k.counts == {"trusted": 0, "confirmed": 5, "read": 0}  # hashed, not parsed
    assert docs == full(src, s)


def test_other_settings_read_every_file_again(src: Path, tmp_path: Path) -> None:
    nightly(src, settings_for(tmp_path))
    small = settings_for(tmp_path, max_document_bytes=20)
    docs, k = nightly(src, small)
    assert k.counts["trusted"] == 0 and k.counts["read"] == 5
    assert docs == full(src, small)
    assert (
        known_files(open_store(small.store), str(src), settings_for(tmp_path, trust_stamps=False), []) is None
    )


def test_s3_objects_unchanged_by_etag_are_not_read(s3_store_uri: str, tmp_path: Path) -> None:
    """On S3 the listing's size and ETag are the stamp: an object written again with the same size and
    new bytes is seen, the others are not read (SeaweedFS, through boto3)."""
    bucket = open_store(s3_store_uri)
    bucket.put("nightly/a.txt", b"Invoice A-1 total 10.00 EUR\n")
    bucket.put("nightly/b.md", b"# Invoice B-2\ntotal 20.00 EUR\n")
    bucket.put("nightly/c.txt", b"Invoice A-1 total 10.00 EUR\n")  # a duplicate of a.txt
    source = f"{s3_store_uri}/nightly"
    s = settings_for(tmp_path)

    def run() -> tuple[list[Document], KnownFiles]:
        cache = InventoryCache(open_store(s.store), source, fingerprint(s, ALL_TYPES))
        known = KnownFiles(cache)  # the real clock: an ETag has no racy window
        return list(inventory(source, s, known=known)), known

    first, k1 = run()
    assert k1.counts == {"trusted": 0, "confirmed": 0, "read": 3}
    again, k2 = run()
    assert k2.counts == {"trusted": 3, "confirmed": 0, "read": 0} and again == first
    bucket.put("nightly/b.md", b"# Invoice B-2\ntotal 29.00 EUR\n")  # same size, new bytes
    docs, k3 = run()
    assert k3.counts == {"trusted": 2, "confirmed": 0, "read": 1}
    assert docs == list(inventory(source, s)) and docs != first

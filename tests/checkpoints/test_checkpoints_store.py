"""The object store contract, run on both backends (a temp folder and a real SeaweedFS)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from checkpoints.store import ObjectStore, gzip_json, local, open_store
from docmill.errors import NotFound, PreconditionFailed, UnsafeKey


def test_put_get_roundtrip_and_etag(store: ObjectStore) -> None:
    etag = store.put("a/b/c.json", b"hello")
    data, etag2 = store.get_with_etag("a/b/c.json")
    assert data == b"hello"
    assert etag == etag2
    assert store.get("a/b/c.json") == b"hello"
    assert store.exists("a/b/c.json")
    etag3 = store.put("a/b/c.json", b"world")
    assert etag3 != etag
    assert store.get("a/b/c.json") == b"world"


def test_get_missing_raises_not_found(store: ObjectStore) -> None:
    with pytest.raises(NotFound):
        store.get("nope/x.json")
    assert not store.exists("nope/x.json")


def test_put_if_absent(store: ObjectStore) -> None:
    assert store.put_if_absent("k/one.json", b"first") is True
    assert store.put_if_absent("k/one.json", b"second") is False
    assert store.get("k/one.json") == b"first"


def test_put_many_if_absent(store: ObjectStore) -> None:
    """Each object written once, as put_if_absent: a key already there keeps its bytes, the second
    of two equal keys in one group loses to the first."""
    assert store.put_if_absent("m/taken.json", b"old") is True
    items = [("m/a.json", b"a"), ("m/taken.json", b"new"), ("m/b/c.json", b"c"), ("m/a.json", b"a2")]
    assert store.put_many_if_absent(items) == [True, False, True, False]
    assert [store.get(k) for k in ("m/a.json", "m/taken.json", "m/b/c.json")] == [b"a", b"old", b"c"]


def test_local_put_many_links_nothing_before_its_one_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One flush of the file system for the group, no fsync per object, and no key linked before the
    flush returned: a crash during it (here an exception) leaves every key absent, never a name
    pointing at bytes that may not have reached the disk."""
    store = open_store(str(tmp_path / "s"))
    assert store.put_if_absent("m/seed.json", b"x")  # the folder exists: only the group is counted
    fsyncs: list[int] = []
    seen: list[list[str]] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        fsyncs.append(fd)
        real_fsync(fd)

    def crash(root: Path) -> None:
        seen.append(sorted(store.list("m/")))
        raise OSError("power lost")

    monkeypatch.setattr(os, "fsync", counting_fsync)
    monkeypatch.setattr(local, "_sync_file_system", crash)
    with pytest.raises(OSError, match="power lost"):
        store.put_many_if_absent([(f"m/{i}.json", b"%d" % i) for i in range(5)])
    assert seen == [["m/seed.json"]] and sorted(store.list("m/")) == ["m/seed.json"]
    monkeypatch.setattr(local, "_sync_file_system", lambda root: seen.append([]))
    assert store.put_many_if_absent([(f"m/{i}.json", b"%d" % i) for i in range(5)]) == [True] * 5
    assert len(seen) == 2 and fsyncs == []
    assert [store.get(f"m/{i}.json") for i in range(5)] == [b"%d" % i for i in range(5)]


def test_put_if_match(store: ObjectStore) -> None:
    etag = store.put("m.json", b"v1")
    new = store.put_if_match("m.json", b"v2", etag)
    assert store.get("m.json") == b"v2"
    with pytest.raises(PreconditionFailed):
        store.put_if_match("m.json", b"v3", etag)  # stale etag
    assert store.get("m.json") == b"v2"
    store.put_if_match("m.json", b"v3", new)
    assert store.get("m.json") == b"v3"
    with pytest.raises(PreconditionFailed):
        store.put_if_match("missing.json", b"x", new)


def test_copy_while_the_source_is_as_read(store: ObjectStore) -> None:
    etag = store.put("c/src.json", b"kept")
    store.put("c/dst.json", b"old")
    assert store.copy("c/src.json", "c/dst.json", etag=etag) is True
    assert store.get("c/dst.json") == b"kept"
    assert store.get_with_etag("c/dst.json")[1] == etag
    store.put("c/src.json", b"moved")  # written since: the stale ETag copies nothing
    assert store.copy("c/src.json", "c/other.json", etag=etag) is False
    assert not store.exists("c/other.json")
    assert store.copy("c/gone.json", "c/other.json", etag=etag) is False
    assert store.get("c/dst.json") == b"kept"  # the copy does not follow its source


def test_copy_onto_itself_says_whether_the_object_is_as_read(store: ObjectStore) -> None:
    """A run resumed after its exports were written names its own files as the ones to share: S3
    refuses a copy of an object onto itself, so that copy checks the ETag and writes nothing."""
    etag = store.put("c/self.json", b"kept")
    assert store.copy("c/self.json", "c/self.json", etag=etag) is True
    assert store.get_with_etag("c/self.json") == (b"kept", etag)
    assert store.copy("c/self.json", "c/self.json", etag='"stale"') is False
    assert store.copy("c/none.json", "c/none.json", etag=etag) is False


def test_local_copy_is_a_hard_link_and_writes_no_bytes(tmp_path) -> None:
    store = open_store(str(tmp_path))
    etag = store.put("runs/a/x.json", b"x" * 1000)
    assert store.copy("runs/a/x.json", "runs/b/x.json", etag=etag)
    a, b = (tmp_path / "runs/a/x.json").stat(), (tmp_path / "runs/b/x.json").stat()
    assert a.st_ino == b.st_ino and a.st_nlink == 2
    assert sorted(store.list("runs/")) == ["runs/a/x.json", "runs/b/x.json"]  # no temp file left


def test_local_copy_trusts_the_recorded_etag_and_reads_no_bytes(tmp_path, monkeypatch) -> None:
    """A file the store wrote carries its ETag: sharing it (an unchanged run's outcome chunks and
    exports, ~76 MB at 10,000 invoices) hashes nothing."""
    store = open_store(str(tmp_path))
    etag = store.put("runs/a/x.json", b"x" * 1000)
    hashed: list[int] = []
    real = local.etag_of
    monkeypatch.setattr(local, "etag_of", lambda data: hashed.append(len(data)) or real(data))
    assert store.copy("runs/a/x.json", "runs/b/x.json", etag=etag)
    assert hashed == []
    assert store.copy("runs/a/x.json", "runs/c/x.json", etag='"0"') is False  # another ETag: refused
    assert hashed == []


def test_local_copy_reads_a_file_changed_in_place(tmp_path) -> None:
    """A file rewritten in place behind the store's back (same size, its mtime moved) is read and
    hashed again: its recorded ETag is not trusted, and the copy is refused."""
    store = open_store(str(tmp_path))
    etag = store.put("runs/a/x.json", b"aaaa")
    path = tmp_path / "runs/a/x.json"
    before = path.stat()
    with open(path, "r+b") as f:
        f.write(b"bbbb")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
    assert store.copy("runs/a/x.json", "runs/b/x.json", etag=etag) is False
    assert not (tmp_path / "runs/b/x.json").exists()
    os.removexattr(path, local.ETAG_XATTR)  # no attribute (another file system): read and hashed
    assert store.copy("runs/a/x.json", "runs/b/x.json", etag=local.etag_of(b"bbbb")) is True
    with open(path, "rb") as f:  # checked once, recorded: the next copy reads nothing
        assert local.recorded_etag(f.fileno()) == local.etag_of(b"bbbb")


def test_delete_is_idempotent(store: ObjectStore) -> None:
    store.put("d/x", b"1")
    store.delete("d/x")
    assert not store.exists("d/x")
    store.delete("d/x")


def test_list_sorted_by_prefix_without_internal_files(store: ObjectStore) -> None:
    # S3 servers differ on keys that diverge at a character below "/" (AWS: byte order; SeaweedFS:
    # folder by folder), so this cross-backend check avoids them; see the local-only test below.
    keys = ["a_c", "a/b", "a/c/d", "b", "ab", "a/b2", "zz/é.json"]
    for k in keys:
        store.put(k, b"x")
    store.put_if_match("b", b"y", store.get_with_etag("b")[1])  # leaves a lock file on local
    assert list(store.list()) == sorted(keys, key=lambda k: k.encode())
    assert list(store.list("a/")) == ["a/b", "a/b2", "a/c/d"]
    assert list(store.list("a/b")) == ["a/b", "a/b2"]
    assert list(store.list("a")) == sorted(["a_c", "a/b", "a/c/d", "ab", "a/b2"], key=str.encode)
    assert list(store.list("nothing/")) == []
    assert list(store.list_children("a/")) == ["b", "b2", "c/"]


def test_json_and_gzip_helpers(store: ObjectStore) -> None:
    assert store.put_json("j/x.json", {"b": 1, "a": [1, "é"]}) is True
    assert store.get_json("j/x.json") == {"b": 1, "a": [1, "é"]}
    assert store.put_json("j/x.json", {"other": 1}, if_absent=True) is False
    assert store.get_json("j/x.json") == {"b": 1, "a": [1, "é"]}
    assert store.put("j/h.json.gz", gzip_json([{"role": "user"}]))
    assert store.get_json_gz("j/h.json.gz") == [{"role": "user"}]
    assert store.get_json_or_none("j/none.json") is None


@pytest.mark.parametrize("key", ["../x", "/abs", "a/../../b", "a\x00b", "", "a/./b", ".~tmp.x"])
def test_unsafe_keys_refused(store: ObjectStore, key: str) -> None:
    with pytest.raises(UnsafeKey):
        store.put(key, b"x")
    with pytest.raises(UnsafeKey):
        store.get(key)


def test_local_list_is_byte_ordered_like_aws(tmp_path) -> None:
    store = open_store(tmp_path)
    keys = ["a-c", "a/b", "a.d/x", "a0"]
    for k in keys:
        store.put(k, b"x")
    assert list(store.list()) == sorted(keys, key=str.encode) == ["a-c", "a.d/x", "a/b", "a0"]


def test_longest_unicode_segment_works(store: ObjectStore) -> None:
    key = "long/" + "é" * 127  # 254 bytes: the longest segment safe_key allows
    store.put(key, b"1")
    etag = store.get_with_etag(key)[1]
    store.put_if_match(key, b"2", etag)
    assert store.put_if_absent(key, b"3") is False
    assert list(store.list("long/")) == [key]


def test_local_folders_hold_only_objects_no_lock_files(tmp_path) -> None:
    """put / put_if_match / delete lock across processes, but no `.~lock.*` file is left beside
    the objects (an exports folder a person opens holds only the exports)."""
    from checkpoints.store.local import LocalStore

    s = LocalStore(tmp_path)
    etag = s.put("runs/r1/exports/results.jsonl", b"{}\n")
    s.put_if_match("runs/r1/exports/results.jsonl", b"{}\n{}\n", etag)
    s.put("runs/r1/exports/results.csv", b"a\n")
    s.delete("runs/r1/exports/results.csv")
    s.put_if_absent("runs/r1/exports/summary.json", b"{}")
    assert sorted(p.name for p in (tmp_path / "runs/r1/exports").iterdir()) == [
        "results.jsonl",
        "summary.json",
    ]
    assert list(s.list("")) == ["runs/r1/exports/results.jsonl", "runs/r1/exports/summary.json"]

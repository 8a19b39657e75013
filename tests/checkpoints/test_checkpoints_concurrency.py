"""Write-once and compare-and-swap under contention: threads on both backends, processes locally."""

from __future__ import annotations

import json
import multiprocessing as mp
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from checkpoints.ledger import ResultsLedger
from checkpoints.manifest import ManifestStore, RunManifest
from checkpoints.store import ObjectStore, open_store

WRITERS = 20


def _race(n: int, fn: Any) -> list[Any]:
    barrier = threading.Barrier(n)

    def run(i: int) -> Any:
        barrier.wait()
        return fn(i)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(run, range(n)))


def test_put_if_absent_twenty_threads_one_winner(store: ObjectStore) -> None:
    results = _race(WRITERS, lambda i: store.put_if_absent("race/one.json", f"writer-{i}".encode()))
    assert results.count(True) == 1
    winner = results.index(True)
    assert store.get("race/one.json") == f"writer-{winner}".encode()


def test_ledger_losers_read_the_winner(store: ObjectStore) -> None:
    ledger = ResultsLedger(store)
    out = _race(WRITERS, lambda i: ledger.put("file", "k_abc", {"writer": i}))
    written = [rec for rec, w in out if w]
    assert len(written) == 1
    assert all(rec == written[0] for rec, _ in out)  # every loser got the winner's record
    assert ledger.get("file", "k_abc") == written[0]
    assert ledger.has("file", "k_abc")


def test_manifest_cas_twenty_threads_count_exactly(store: ObjectStore) -> None:
    manifests = ManifestStore(store)
    manifests.create(RunManifest(run_id="r1"))
    calls = []

    def bump(m: RunManifest) -> None:
        calls.append(1)
        m.counts["n"] = m.counts.get("n", 0) + 1

    _race(WRITERS, lambda i: manifests.update("r1", bump))
    assert manifests.load("r1").counts["n"] == WRITERS
    assert len(calls) >= WRITERS


def test_manifest_conflict_is_detected_and_reapplied(store: ObjectStore) -> None:
    """A writer that sneaks in between read and write makes the CAS fail; the update re-reads."""
    manifests = ManifestStore(store)
    manifests.create(RunManifest(run_id="r2"))
    seen: list[int] = []

    def bump(m: RunManifest) -> None:
        seen.append(m.counts.get("n", 0))
        if len(seen) == 1:  # a competing update lands after our read
            manifests.update("r2", lambda other: other.counts.update(n=100))
        m.counts["n"] = m.counts.get("n", 0) + 1

    result = manifests.update("r2", bump)
    assert seen == [0, 100]
    assert result.counts["n"] == 101 == manifests.load("r2").counts["n"]


# ---- across processes (local backend: link() and flock are the guarantees) -------------------


def _proc_put_if_absent(root: str, i: int, barrier: Any, out: Any) -> None:
    store = open_store(root)
    barrier.wait()
    out.put((i, store.put_if_absent("race/proc.json", json.dumps({"writer": i}).encode())))


def _proc_increment(root: str, barrier: Any, times: int) -> None:
    manifests = ManifestStore(open_store(root))
    barrier.wait()
    for _ in range(times):
        manifests.update("rp", lambda m: m.counts.update(n=m.counts.get("n", 0) + 1))


def _run_procs(target: Any, args_for: Any, n: int) -> None:
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=target, args=args_for(i)) for i in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0


def test_local_put_if_absent_twenty_processes(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(WRITERS), ctx.Queue()
    _run_procs(_proc_put_if_absent, lambda i: (str(tmp_path), i, barrier, out), WRITERS)
    results = dict(out.get(timeout=10) for _ in range(WRITERS))
    winners = [i for i, won in results.items() if won]
    assert len(winners) == 1
    assert json.loads(open_store(tmp_path).get("race/proc.json")) == {"writer": winners[0]}
    assert [p.name for p in (tmp_path / "race").iterdir()] == ["proc.json"]  # no temp files left


def test_local_manifest_cas_across_processes(tmp_path: Path) -> None:
    ManifestStore(open_store(tmp_path)).create(RunManifest(run_id="rp"))
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(8)
    _run_procs(_proc_increment, lambda i: (str(tmp_path), barrier, 5), 8)
    assert ManifestStore(open_store(tmp_path)).load("rp").counts["n"] == 40


@pytest.mark.parametrize("anonymous", [True, False], ids=["unnamed-temp", "named-temp"])
def test_local_put_if_absent_both_temp_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, anonymous: bool
) -> None:
    """Linux uses unnamed temp files (O_TMPFILE); elsewhere, or where a file system refuses them,
    named temp files. Both keep write-once under contention and leave no temp file behind."""
    import checkpoints.store.local as local

    if anonymous and not local._ANONYMOUS:
        pytest.skip("this platform has no O_TMPFILE")  # CI is Linux: the branch below checks it ran
    monkeypatch.setattr(local, "_ANONYMOUS", anonymous)
    store = open_store(str(tmp_path))
    opened: list[int] = []
    real_open = local.os.open

    def spy(path: Any, flags: int, *a: Any) -> int:
        opened.append(flags)
        return real_open(path, flags, *a)

    monkeypatch.setattr(local.os, "open", spy)
    results = _race(WRITERS, lambda i: store.put_if_absent("race/one.json", f"writer-{i}".encode()))
    assert results.count(True) == 1
    assert store.get("race/one.json") == f"writer-{results.index(True)}".encode()
    assert sorted(p.name for p in (tmp_path / "race").iterdir()) == ["one.json"]
    tmpfile = getattr(local.os, "O_TMPFILE", 0)
    used_unnamed = [f for f in opened if tmpfile and f & tmpfile == tmpfile]
    assert len(used_unnamed) == (WRITERS if anonymous else 0)


def test_local_put_if_absent_falls_back_when_proc_links_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sandbox may refuse to link an unnamed file through /proc: that write, and every later
    one, goes through a named temp file instead; nothing is lost or written twice."""
    import errno

    import checkpoints.store.local as local

    if not local._ANONYMOUS:
        pytest.skip("this platform has no O_TMPFILE")
    monkeypatch.setattr(local, "_ANONYMOUS", True)
    real_link = local.os.link
    refused: list[str] = []

    def link(src: Any, dst: Any, **kw: Any) -> None:
        if str(src).startswith("/proc/"):
            refused.append(str(dst))
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real_link(src, dst, **kw)

    monkeypatch.setattr(local.os, "link", link)
    store = open_store(str(tmp_path))
    assert store.put_if_absent("a/one.json", b"1") is True
    assert store.put_if_absent("a/one.json", b"2") is False
    assert store.put_if_absent("a/two.json", b"3") is True
    assert store.get("a/one.json") == b"1" and store.get("a/two.json") == b"3"
    assert len(refused) == 1 and local._ANONYMOUS is False  # tried once, then named temp files
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["one.json", "two.json"]

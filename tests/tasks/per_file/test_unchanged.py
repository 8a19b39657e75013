"""Chunks whose documents did not change take a finished chunk's outcomes whole (tasks.per_file.unchanged):
the same outcomes a pass over the ledger gives, and never for a chunk whose documents, keys or
outcomes say otherwise (a file changed in place, a retryable failure, a result held for review)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from checkpoints.chunks import InventoryChunks
from checkpoints.outcomes import ChunkIndex, OutcomeLog
from checkpoints.review_queue import ReviewQueue
from checkpoints.store import LocalStore, ObjectStore, open_store
from docmill.settings import Settings
from flows.entry import RunWiring, run_extract
from flows.run.context import RunParams
from tasks.per_file.outcome import DocOutcome
from tasks.per_file.settle import Pass
from tasks.per_file.unchanged import chunk_digest, remember_chunks, reuse_unchanged
from tasks.recipes import load_recipe
from tasks.request import FILE_PASS
from tests.fixtures.emulator import fresh
from tests.flows.helpers import make_corpus, settings_for


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory, _emulator_session: Any) -> tuple[Path, str]:
    """One finished realtime run over 12 invoices in chunks of 4 (taken once): its store and id."""
    tmp = tmp_path_factory.mktemp("unchanged")
    corpus, _ = make_corpus(tmp, count=12, seed=4)
    settings = settings_for(fresh(_emulator_session), str(tmp / "store")).model_copy(update={"chunk_size": 4})
    return tmp / "store", run_extract(
        RunParams(str(corpus), "invoices"), settings=settings, wiring=RunWiring(progress=False)
    )["run_id"]


def answered(tmp_path: Path, finished: tuple[Path, str]) -> tuple[Settings, ObjectStore, str, list[str]]:
    """A copy of the finished run's store: settings, store, the run's id and chunks."""
    shutil.copytree(finished[0], tmp_path / "store")
    settings = Settings(store=str(tmp_path / "store"), chunk_size=4)
    store = open_store(settings.store)
    chunks = list((InventoryChunks(store, finished[1]).done() or {})["chunks"])
    return settings, store, finished[1], chunks


def new_run(store: ObjectStore, settings: Settings, earlier: str, run_id: str) -> Pass:
    """A later run over the same inventory (its chunks copied from `earlier`)."""
    old, new = InventoryChunks(store, earlier), InventoryChunks(store, run_id)
    ids = list((old.done() or {})["chunks"])
    for cid in ids:
        new.put(cid, old.load(cid))
    new.finish(ids, sum(len(old.load(c)) for c in ids))
    return Pass(load_recipe("invoices"), run_id, store, None, settings)  # type: ignore[arg-type]


def test_an_unchanged_run_takes_every_chunk_with_the_outcomes_of_ledger_hits(
    tmp_path: Path, finished: tuple[Path, str]
) -> None:
    settings, store, first, chunks = answered(tmp_path, finished)
    p = new_run(store, settings, first, "second")
    reused, digests = reuse_unchanged(p, chunks)
    assert reused == set(chunks) and digests == {}  # the finished run recorded every chunk
    before = {o["doc_id"]: o for o in OutcomeLog(store, first).all()}
    after = list(OutcomeLog(store, "second").all())
    assert sorted(o["doc_id"] for o in after) == sorted(before)
    for o in after:  # what a pass over the ledger gives: the stored result, as a ledger hit
        if o["key"] is None:
            assert o == before[o["doc_id"]]  # skipped by the inventory: from its record alone
            continue
        stored = p.ledger.get(FILE_PASS, o["key"])
        assert stored is not None
        hit = DocOutcome.from_record(stored, doc_id=o["doc_id"]).model_dump(mode="json")
        assert o == {
            **hit,
            "reason": before[o["doc_id"]]["reason"],
        }  # a duplicate's reason names its original
    review = {r["doc_id"] for r in ReviewQueue(store, "second").list()}
    assert review == {o["doc_id"] for o in after if o["state"] == "needs_review"}
    # the second run's chunks that hold ledger hits are where a third run looks: no result read again
    index, second = ChunkIndex(store), InventoryChunks(store, "second")
    answered_then = OutcomeLog(store, first)  # answered in the first run: ledger hits in the second
    hits = [
        c
        for c in chunks
        if any(o["key"] and not o.get("from_ledger") for o in answered_then.read_chunk(c) or [])
    ]
    assert hits, "the corpus has answered documents"
    for cid in chunks:
        named = index.ref(chunk_digest(p, second.load(cid))[0]) or {}  # checked by the second run:
        assert (named.get("run_id"), named.get("chunk_id")) == ("second", cid)  # the third shares its files
    # a third run takes the second's bytes as they are (nothing changed since)
    p3 = new_run(store, settings, first, "third")
    assert reuse_unchanged(p3, chunks)[0] == set(chunks)
    assert [OutcomeLog(store, "third").raw_chunk(c) for c in chunks] == [
        OutcomeLog(store, "second").raw_chunk(c) for c in chunks
    ]


def test_a_file_changed_in_place_leaves_its_chunk_to_the_pass(
    tmp_path: Path, finished: tuple[Path, str]
) -> None:
    settings, store, first, chunks = answered(tmp_path, finished)
    p = new_run(store, settings, first, "second")
    inv = InventoryChunks(store, "second")
    docs = inv.load(chunks[1])
    i = next(n for n, d in enumerate(docs) if d["status"] == "ok" and not d.get("duplicate_of"))
    docs[i] = {**docs[i], "sha256": "0" * 64}  # the inventory saw other bytes: another key
    inv.put(chunks[1], docs)
    reused, digests = reuse_unchanged(p, chunks)
    assert chunks[1] not in reused and reused == set(chunks) - {chunks[1]}
    assert set(digests) == {chunks[1]}
    assert chunks[1] not in OutcomeLog(store, "second").chunks_done()  # the per-file pass decides it


def test_a_chunk_holding_what_the_ledger_does_not_is_decided_again(
    tmp_path: Path, finished: tuple[Path, str]
) -> None:
    """A retryable failure, or an answer held for review and never written to the ledger (the cost
    guard), is not a ledger hit: a later run decides its chunk again."""
    settings, store, first, chunks = answered(tmp_path, finished)
    log = OutcomeLog(store, first)
    retry = log.read_chunk(chunks[0]) or []
    retry[0] = {**retry[0], "state": "failed", "retryable": True, "failure_type": "transport_exhausted"}
    log.store.put_json(f"runs/{first}/outcomes/{chunks[0]}.json", {"chunk_id": chunks[0], "outcomes": retry})
    held = log.read_chunk(chunks[2]) or []
    j = next(n for n, o in enumerate(held) if o["key"])
    store.delete(p_key := f"results/{FILE_PASS}/{held[j]['key']}.json")  # never written to the ledger
    assert not store.exists(p_key)
    p = new_run(store, settings, first, "second")
    reused, _ = reuse_unchanged(p, chunks)
    assert reused == set(chunks) - {chunks[0], chunks[2]}


def test_remember_chunks_records_only_finished_chunks(tmp_path: Path, finished: tuple[Path, str]) -> None:
    settings, store, first, chunks = answered(tmp_path, finished)
    p = new_run(store, settings, first, "second")
    digests = {cid: f"digest-{cid}" for cid in chunks}
    assert remember_chunks(p, digests) == 0  # nothing of run "second" is finished
    OutcomeLog(store, "second").write_chunk(chunks[0], OutcomeLog(store, first).read_chunk(chunks[0]) or [])
    assert remember_chunks(p, digests) == 1


class CountingStore(LocalStore):
    """The local backend, counting the objects read under a prefix."""

    def __init__(self, root: str, prefix: str) -> None:
        super().__init__(root)
        self.prefix, self.reads = prefix, 0

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        self.reads += key.startswith(self.prefix) and "/outcomes/" in key
        return super().get_with_etag(key)


def test_a_checked_chunk_is_shared_without_reading_its_outcomes(
    tmp_path: Path, finished: tuple[Path, str]
) -> None:
    """Once a run has checked a chunk, the next unchanged run links its file (no outcome read, no
    bytes written); a file written since (another ETag) is read and checked again."""
    settings, store, first, chunks = answered(tmp_path, finished)
    assert reuse_unchanged(new_run(store, settings, first, "second"), chunks)[0] == set(chunks)
    counting = CountingStore(settings.store or "", "runs/")
    p3 = new_run(counting, settings, first, "third")
    review = [
        c
        for c in chunks
        if any(o["state"] == "needs_review" for o in OutcomeLog(store, "second").read_chunk(c) or [])
    ]
    counting.reads = 0
    assert reuse_unchanged(p3, chunks)[0] == set(chunks)
    assert counting.reads == len(review)  # only chunks holding documents to queue for review are read
    root = Path(settings.store or "")
    for cid in set(chunks) - set(review):
        third = (root / f"runs/third/outcomes/{cid}.json").stat()
        assert third.st_nlink >= 2  # shared with the file the index names: no bytes written
    assert [OutcomeLog(store, "third").raw_chunk(c) for c in chunks] == [
        OutcomeLog(store, "second").raw_chunk(c) for c in chunks
    ]
    # the file an entry names is written again (other bytes, same outcomes): read and checked
    ref = ChunkIndex(store).ref(chunk_digest(p3, InventoryChunks(store, "third").load(chunks[0]))[0])
    assert ref is not None and "etag" in ref
    named = OutcomeLog(store, ref["run_id"])
    store.put_json(
        f"runs/{ref['run_id']}/outcomes/{chunks[0]}.json",
        {"chunk_id": chunks[0], "outcomes": named.read_chunk(chunks[0]), "x": 1},
    )
    p4 = new_run(counting, settings, first, "fourth")
    counting.reads = 0
    assert reuse_unchanged(p4, chunks)[0] == set(chunks)
    assert counting.reads == len(set(review) | {chunks[0]})
    assert OutcomeLog(store, "fourth").read_chunk(chunks[0]) == OutcomeLog(store, "third").read_chunk(
        chunks[0]
    )


def test_a_file_changed_in_place_in_an_unchanged_source_is_sent_and_reported(
    tmp_path: Path, emulator: Any
) -> None:
    """Whole runs (the only way to see the inventory, the shared chunks, the integration record and
    the report together): two unchanged runs share everything, then one file rewritten with the same
    size and its mtime put back is read, sent once, and listed in the report with its new value."""
    corpus, _ = make_corpus(tmp_path, count=12, seed=4)
    settings = settings_for(emulator, str(tmp_path / "store")).model_copy(update={"chunk_size": 4})
    store = open_store(settings.store)

    def run() -> dict[str, Any]:
        return run_extract(
            RunParams(str(corpus), "invoices"), settings=settings, wiring=RunWiring(progress=False)
        )

    run()
    run()  # checks every chunk: the next unchanged run shares them
    billed = len(emulator.state.accounting.billed)
    same = run()
    assert len(emulator.state.accounting.billed) == billed and same["cost_usd"] == 0.0
    integration = store.get_json(f"runs/{same['run_id']}/integration.json")
    assert integration["calls"] == 0 and integration["delta"]["to_integrate"] == 0
    copies = {
        p.read_bytes() for p in corpus.rglob("copy-of-*")
    }  # an original with a copy: two documents move
    target = next(
        p
        for p in sorted(corpus.rglob("*.md"))
        if "Invoice number: INV-" in p.read_text() and p.read_bytes() not in copies
    )
    text, st = target.read_text(), target.stat()
    number = text.split("Invoice number: ")[1].split()[0]
    other = number[:-1] + ("1" if number[-1] != "1" else "2")  # the same length: the same size
    target.write_text(text.replace(number, other))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # its mtime put back: only the ctime moved
    assert target.stat().st_size == st.st_size
    moved = run()
    outcomes = {o["doc_id"]: o for o in OutcomeLog(store, moved["run_id"]).all()}
    doc = next(d for d, o in outcomes.items() if not o.get("from_ledger") and o.get("key"))
    assert outcomes[doc]["output"]["invoice_number"]["value"] == other
    assert sum(1 for o in outcomes.values() if not o.get("from_ledger") and o.get("key")) == 1
    integration = store.get_json(f"runs/{moved['run_id']}/integration.json")
    assert integration["delta"]["changed"] == 1
    # that document once, and the integration's notes over it
    assert len(emulator.state.accounting.billed) == billed + 1 + integration["calls"]
    report = store.get(f"runs/{moved['run_id']}/report.md").decode()
    assert other in report
    rows = store.get(f"runs/{moved['run_id']}/exports/results.jsonl").decode().splitlines()
    row = next(json.loads(r) for r in rows if json.loads(r)["doc_id"] == doc)
    assert row["output"]["invoice_number"]["value"] == other  # new exports, not the last run's

"""Batch mode against the real emulator with the real SDK: every result type, the repair round
(batch and realtime), resubmission limits, expiry, cancel, archived results, cutting by count and
bytes, and reconciliation of an intent without a batch id across listing pages. Only time is faked:
the engine's sleep advances the emulator's virtual clock."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoints.batches import BatchPhase, BatchRecords
from checkpoints.costs import CostLedger
from checkpoints.ledger import ResponseLog, ResultsLedger
from checkpoints.review_queue import ReviewQueue
from checkpoints.store import local as local_store
from checkpoints.store import open_store
from docmill import crash_points
from docmill.settings import Settings, get_settings
from tasks.api.client import ModelClient
from tasks.api.usage import COMPACT, RepeatedJson
from tasks.batch import ingest
from tasks.batch import lifecycle as batch_lifecycle
from tasks.batch.engine import LOCAL_WORKERS, STORE_WORKERS, io_threads, run_batches
from tasks.batch.items import WorkItem
from tasks.batch.spool import BatchBody, request_line
from tasks.per_file.outcome import DocOutcome, DocState
from tasks.per_file.scope import RunScope
from tasks.recipes import load_recipe
from tasks.request import FILE_PASS, file_key, file_params
from tasks.source.inventory import Document, inventory
from tests.fixtures.emulator import sdk_client

ROOT = Path(__file__).resolve().parents[3]


class Abort(Exception):
    """Stops the engine in-process at a lifecycle point (a crash without the kill)."""


def make_corpus(out: Path, count: int, seed: int = 7) -> Path:
    spec = importlib.util.spec_from_file_location("make_invoices", ROOT / "examples" / "make_invoices.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_invoices"] = mod
    spec.loader.exec_module(mod)
    mod.generate(out, out.with_suffix(".truth.jsonl"), count, seed, list(mod.FORMATS))
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("batch") / "corpus", 30)


class Rig:
    """One run: store, settings, recipe, SDK client, and the emulator's clock as the engine's."""

    def __init__(
        self, emulator: Any, tmp_path: Path, corpus: Path, store_uri: str | None = None, **batch: Any
    ) -> None:
        self.em = emulator
        self.corpus = corpus
        batch = {"poll_seconds": 60.0, "poll_max_seconds": 600.0, **batch}
        uri = store_uri or str(tmp_path / "store")
        self.settings = Settings(store=uri, batch=batch)  # type: ignore[arg-type]
        self.store = open_store(uri)
        self.recipe = load_recipe("invoices")
        self.client = sdk_client(emulator)
        self.repairs = ModelClient(self.settings, base_url=emulator.base_url, api_key="test-key")
        self.events: list[dict[str, Any]] = []
        self.run_id = "run-1"

    def docs(self) -> list[Document]:
        return list(inventory(str(self.corpus), self.settings, doc_types=self.recipe.doc_types))

    def ok_docs(self) -> list[Document]:
        return [d for d in self.docs() if d.status == "ok"]

    def key(self, doc: Document) -> str:
        return file_key(self.recipe, doc, self.settings.api.model, file_params(self.settings))

    def run(self, docs: list[Document] | None = None, **kw: Any) -> list[DocOutcome]:
        def progress(event: dict[str, Any]) -> None:
            self.events.append(event)
            if "on_progress" in kw:
                kw["on_progress"](event)

        return list(
            run_batches(
                self.docs() if docs is None else docs,
                RunScope(
                    self.recipe,
                    self.run_id,
                    self.store,
                    kw.get("model_client") or self.repairs,
                    self.settings,
                ),
                lambda: self.client,
                clock=self.em.state.clock.now,
                sleep=self.em.state.clock.advance,
                on_progress=progress,
            )
        )

    def billed(self) -> Counter[str]:
        return Counter(r.custom_id for r in self.em.state.accounting.billed if r.custom_id)

    def sent(self) -> Counter[str]:
        """How many batches each custom_id was sent in."""
        return Counter(cid for b in self.em.state.batches.batches.values() for cid, _ in b.requests)

    def records(self) -> BatchRecords:
        return BatchRecords(self.store, self.run_id)


def batch_threads() -> int:
    """The threads preparing requests now (the engine's pool)."""
    return sum(t.name.startswith("docmill-batch") for t in threading.enumerate())


def by_key(outcomes: list[DocOutcome]) -> dict[str, DocOutcome]:
    return {o.key: o for o in outcomes if o.key}


def test_all_succeed_cut_by_count_and_a_rerun_costs_nothing(
    emulator: Any, tmp_path: Path, corpus: Path
) -> None:
    rig = Rig(emulator, tmp_path, corpus, max_requests=4)
    docs = rig.docs()
    threads: list[int] = []
    outcomes = rig.run(docs, on_progress=lambda e: threads.append(batch_threads()))
    assert len(outcomes) == len(docs)  # one terminal outcome per document
    assert 1 <= max(threads) <= LOCAL_WORKERS  # local files: few threads (more only hand the GIL around)
    ok = {rig.key(d) for d in docs if d.status == "ok"}
    assert {o.key for o in outcomes if o.state is DocState.SUCCEEDED} >= ok
    assert rig.billed() == Counter(dict.fromkeys(ok, 1))  # each request billed once
    records = rig.records().load_all()
    assert len(records) == -(-len(ok) // 4) and all(r.phase is BatchPhase.COLLECTED for r in records)
    assert all(max(r.request_counts.values()) <= 4 for r in records)
    assert {e["event"] for e in rig.events} >= {"submitted", "status", "collected"}
    # Cost: batch usage at 50 %, one cost object per batch, equal to what the emulator billed.
    totals = CostLedger(rig.store, rig.run_id).totals()
    assert totals["entries"] == len(ok)
    assert totals["usd"] == pytest.approx(emulator.state.accounting.total_usd())
    assert len(list(rig.store.list(f"runs/{rig.run_id}/costs/"))) == len(records)
    # A re-run: every key is in the ledger, zero requests.
    received = emulator.state.accounting.received
    again = rig.run(docs)
    assert emulator.state.accounting.received == received
    assert {o.doc_id: o.state for o in again} == {o.doc_id: o.state for o in outcomes}
    assert all(o.from_ledger for o in again if o.key in ok)
    # an outcome a run settles is the ledger's record for its key (tasks.per_file.unchanged relies
    # on it: the next night marks it a ledger hit without reading the record)
    first = {o.doc_id: o.model_dump(mode="json") for o in outcomes}
    hits = [o.model_dump(mode="json") for o in again if o.key in ok]
    assert hits and all(o == {**first[o["doc_id"]], "from_ledger": True} for o in hits)


def test_batches_are_cut_by_bytes(emulator: Any, tmp_path: Path, corpus: Path) -> None:
    rig = Rig(emulator, tmp_path, corpus, max_bytes=20_000)
    outcomes = rig.run()
    sizes = [r.request_bytes for r in rig.records().load_all()]
    assert len(sizes) > 1 and max(sizes) <= 20_000
    assert Counter(o.state for o in outcomes)[DocState.SUCCEEDED] >= len(rig.ok_docs())


def test_invalid_request_fails_once_and_is_never_resent(emulator: Any, tmp_path: Path, corpus: Path) -> None:
    rig = Rig(emulator, tmp_path, corpus)
    bad = rig.key(rig.ok_docs()[0])
    emulator.state.faults.add(kind="invalid_request", custom_id=bad, message="messages.0: bad block")
    outcomes = by_key(rig.run())
    assert outcomes[bad].state is DocState.FAILED
    assert outcomes[bad].failure_type == "api_error:invalid_request_error"
    assert "bad block" in (outcomes[bad].last_error or "")
    assert rig.sent()[bad] == 1 and rig.billed()[bad] == 0
    assert ResultsLedger(rig.store).get(FILE_PASS, bad) is not None  # final: a resume will not resend
    rig.run()
    assert rig.sent()[bad] == 1


@pytest.mark.parametrize(("failures", "kind"), [(1, "overloaded"), (2, "server_error"), (1, "conflict")])
def test_server_errors_are_resubmitted_in_a_later_round(
    emulator: Any, tmp_path: Path, corpus: Path, failures: int, kind: str
) -> None:
    rig = Rig(emulator, tmp_path, corpus, resubmit_attempts=3)
    key = rig.key(rig.ok_docs()[1])
    emulator.state.faults.add(kind=kind, custom_id=key, count=failures)
    outcomes = by_key(rig.run())
    assert outcomes[key].state is DocState.SUCCEEDED
    assert rig.sent()[key] == failures + 1 and rig.billed()[key] == 1
    assert [r.round for r in rig.records().load_all()] == list(range(1, failures + 2))


def test_resubmission_is_bounded(emulator: Any, tmp_path: Path, corpus: Path) -> None:
    rig = Rig(emulator, tmp_path, corpus, resubmit_attempts=2)
    key = rig.key(rig.ok_docs()[1])
    emulator.state.faults.add(kind="overloaded", custom_id=key)  # forever
    outcomes = by_key(rig.run())
    assert outcomes[key].state is DocState.FAILED
    assert outcomes[key].failure_type == "batch_rounds_exhausted"
    assert "overloaded_error" in (outcomes[key].last_error or "")
    assert rig.sent()[key] == 2 and rig.billed()[key] == 0


def test_expired_requests_are_resubmitted(emulator: Any, tmp_path: Path, corpus: Path) -> None:
    # One item finishes per 50,000 virtual seconds: only the first beats the 24 h expiry.
    emulator.state.configure({"batch_seconds_per_request": 50_000.0})
    rig = Rig(emulator, tmp_path, corpus, max_requests=3, poll_seconds=3600, poll_max_seconds=7200)
    docs = rig.ok_docs()[:3]

    def faster(event: dict[str, Any]) -> None:
        if event["event"] == "collected":
            emulator.state.configure({"batch_seconds_per_request": 0.0})

    outcomes = rig.run(docs, on_progress=faster)
    first = rig.records().load(1)
    assert first.request_counts == {
        "processing": 0,
        "succeeded": 1,
        "errored": 0,
        "canceled": 0,
        "expired": 2,
    }
    assert all(o.state is DocState.SUCCEEDED for o in outcomes)
    assert sorted(rig.sent().values()) == [1, 2, 2]
    assert set(rig.billed().values()) == {1}


def test_canceled_keeps_what_succeeded_and_resubmits_the_rest(
    emulator: Any, tmp_path: Path, corpus: Path
) -> None:
    emulator.state.configure({"batch_seconds_per_request": 80.0})  # after the batch's first minute
    rig = Rig(emulator, tmp_path, corpus, poll_seconds=250, poll_max_seconds=250)
    docs = rig.ok_docs()[:4]

    polls, canceled = 0, False

    def cancel_once(event: dict[str, Any]) -> None:
        nonlocal polls, canceled
        polls += event["event"] == "status" and event["n"] == 1 and event["status"] == "in_progress"
        if polls == 2 and event["event"] == "status" and not canceled:  # t = 250 s: 2 items done (140, 220)
            canceled = True
            report = batch_lifecycle.cancel_run(rig.run_id, rig.store, rig.client, rig.settings)
            assert report["batches"][0]["batch_ids"] == event["batch_ids"]
            emulator.state.configure({"batch_seconds_per_request": 0.0})

    rig.events.clear()
    outcomes = rig.run(docs, on_progress=cancel_once)
    first = rig.records().load(1)
    assert first.request_counts["succeeded"] == 2 and first.request_counts["canceled"] == 2
    assert first.canceled_ids == first.batch_ids
    assert all(o.state is DocState.SUCCEEDED for o in outcomes)
    assert sorted(rig.sent().values()) == [1, 1, 2, 2]
    assert set(rig.billed().values()) == {1}


def test_gate_failures_are_repaired_in_a_second_batch_round(
    emulator: Any, tmp_path: Path, corpus: Path
) -> None:
    rig = Rig(emulator, tmp_path, corpus)
    doc = rig.ok_docs()[2]
    key = rig.key(doc)
    emulator.state.faults.add(kind="schema_invalid", custom_id=key, count=1)
    outcomes = by_key(rig.run())
    assert outcomes[key].state is DocState.SUCCEEDED
    assert outcomes[key].attempts == 2
    repair_round = rig.records().load(2)
    (item,) = list(rig.records().items(2))
    assert repair_round.round == 2 and item["action"] == "repair"
    assert "failed validation" in item["request"]["messages"][-1]["content"][0]["text"]
    assert rig.billed()[key] == 2  # two different requests: the first answer and the repair
    bodies = {r.body_sha256 for r in emulator.state.accounting.billed if r.custom_id == key}
    assert len(bodies) == 2


def test_repairs_beyond_the_budget_go_to_review(emulator: Any, tmp_path: Path, corpus: Path) -> None:
    rig = Rig(emulator, tmp_path, corpus)
    rig.settings.gate.repair_attempts = 1
    doc = rig.ok_docs()[2]
    key = rig.key(doc)
    emulator.state.faults.add(kind="schema_invalid", custom_id=key)  # every answer is invalid
    outcomes = by_key(rig.run())
    assert outcomes[key].state is DocState.NEEDS_REVIEW
    assert outcomes[key].reason == "validation_failed" and outcomes[key].raw_output
    assert rig.sent()[key] == 2
    item = ReviewQueue(rig.store, rig.run_id).get(doc.doc_id)
    assert item is not None and item["reason"] == "validation_failed"


def test_repairs_can_go_realtime_and_a_crash_does_not_resend_them(
    emulator: Any, tmp_path: Path, corpus: Path
) -> None:
    rig = Rig(emulator, tmp_path, corpus, repairs_realtime=True)
    key = rig.key(rig.ok_docs()[2])
    emulator.state.faults.add(kind="schema_invalid", custom_id=key, count=1)
    writes = 0

    def crash_at_first_ledger_write_after_the_repair(point: str) -> None:
        nonlocal writes
        realtime = [r for r in emulator.state.accounting.billed if not r.batch]
        writes += point == "before_ledger_write" and bool(realtime)
        if writes == 1:
            raise Abort

    crash_points.HOOK = crash_at_first_ledger_write_after_the_repair
    try:
        with pytest.raises(Abort):
            rig.run(model_client=ModelClient(rig.settings, base_url=emulator.base_url, api_key="test-key"))
    finally:
        crash_points.HOOK = None
    outcomes = by_key(rig.run())  # resume, with another ModelClient
    assert outcomes[key].state is DocState.SUCCEEDED and outcomes[key].attempts == 2
    assert len(rig.records().load_all()) == 1  # no second batch round
    from checkpoints.inflight import InFlight

    assert InFlight(rig.store, rig.run_id).totals()["groups"] == 0  # the repair's record closed once costed
    realtime = [r for r in emulator.state.accounting.billed if not r.batch]
    assert len(realtime) == 1  # the persisted realtime answer was reused, not resent
    assert set(rig.billed().values()) == {1}
    assert {e.batch for e in CostLedger(rig.store, rig.run_id).entries() if e.key == key} == {True, False}
    # the follow-up's meta is built by the one builder: the slot it was written to, and when
    meta = ResponseLog(rig.store).get(FILE_PASS, key, 2)["_docmill"]
    assert meta["attempt"] == 2 and meta["purpose"] == "repair" and meta["at"] > 0


def test_archived_results_are_reported_and_resubmitted(emulator: Any, tmp_path: Path, corpus: Path) -> None:
    rig = Rig(emulator, tmp_path, corpus)
    docs = rig.ok_docs()[:3]

    def stop(event: dict[str, Any]) -> None:
        if event["event"] == "submitted":
            raise Abort

    with pytest.raises(Abort):
        rig.run(docs, on_progress=stop)
    emulator.state.clock.advance(30 * 24 * 3600.0)  # the results are gone after 29 days
    outcomes = rig.run(docs)
    first = rig.records().load(1)
    assert any("gone" in note for note in first.notes)
    assert all(o.state is DocState.SUCCEEDED for o in outcomes)
    assert set(rig.sent().values()) == {2}


def test_intent_without_batch_id_is_reconciled_across_list_pages(
    emulator: Any, tmp_path: Path, corpus: Path
) -> None:
    rig = Rig(emulator, tmp_path, corpus, max_requests=1)
    docs = rig.ok_docs()[:11]
    creates = 0

    def crash_after_tenth_create(point: str) -> None:
        nonlocal creates
        if point == "after_create":
            creates += 1
            if creates == 10:
                raise Abort

    crash_points.HOOK = crash_after_tenth_create
    try:
        with pytest.raises(Abort):
            rig.run(docs)
    finally:
        crash_points.HOOK = None
    assert rig.records().load(10).phase is BatchPhase.INTENT
    # Another workload of the same workspace creates 25 batches after ours: ours moves to page 2.
    other = sdk_client(emulator)
    for i in range(25):
        request = {
            "model": "claude-haiku-4-5",
            "max_tokens": 16,
            "messages": [{"role": "user", "content": "hi"}],
        }
        reqs: Any = [{"custom_id": f"other-{i}-{j}", "params": request} for j in range(2)]
        other.messages.batches.create(requests=reqs)
    calls_before = emulator.state.accounting.received_by_path.get("/v1/messages/batches", 0)
    outcomes = rig.run(docs)
    assert emulator.state.accounting.received_by_path["/v1/messages/batches"] - calls_before >= 2  # paged
    tenth = rig.records().load(10)
    assert tenth.phase is BatchPhase.COLLECTED and len(tenth.batch_ids) == 1
    assert any("reconciled" in note for note in tenth.notes)
    assert all(o.state is DocState.SUCCEEDED for o in outcomes)
    ours = {rig.key(d) for d in docs}
    assert {k: v for k, v in rig.billed().items() if k in ours} == dict.fromkeys(ours, 1)
    assert len(rig.records().load_all()) == 11


def test_a_batch_past_max_wait_is_canceled_and_its_requests_resent(
    emulator: Any, tmp_path: Path, corpus: Path
) -> None:
    emulator.state.configure({"batch_seconds_per_request": 1000.0})
    rig = Rig(emulator, tmp_path, corpus, max_wait_seconds=500, poll_seconds=200, poll_max_seconds=200)

    def faster(event: dict[str, Any]) -> None:
        if event["event"] == "collected":
            emulator.state.configure({"batch_seconds_per_request": 0.0})

    outcomes = rig.run(rig.ok_docs()[:2], on_progress=faster)
    first = rig.records().load(1)
    assert first.canceled_ids == first.batch_ids and any("max_wait" in n for n in first.notes)
    assert first.request_counts["canceled"] == 2
    assert all(o.state is DocState.SUCCEEDED for o in outcomes)
    assert set(rig.sent().values()) == {2} and set(rig.billed().values()) == {1}


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=400), min_size=1, max_size=40),
    max_requests=st.integers(min_value=1, max_value=8),
    max_bytes=st.integers(min_value=300, max_value=3000),
)
def test_batch_bodies_respect_both_limits_and_stream_valid_json(
    sizes: list[int], max_requests: int, max_bytes: int
) -> None:
    import hashlib
    import json

    from checkpoints.batches import item_custom_id

    bodies, body, skipped = [], BatchBody(max_requests, max_bytes), 0
    for i, size in enumerate(sizes):
        item = WorkItem(custom_id=f"k_{i}", doc={"doc_id": f"d{i}", "pad": "é" * (i % 3)}, max_tokens=8)
        line = request_line(item.custom_id, {"model": "m", "text": "x" * size}, RepeatedJson(COMPACT).dumps)
        if not body.alone_fits(line):
            skipped += 1
            continue
        if not body.fits(line):
            bodies.append(body)
            body = BatchBody(max_requests, max_bytes)
        body.add(item, line)
    bodies.append(body)
    seen = []
    for b in bodies:
        data = b"".join(b.chunks())
        assert data == b"".join(b.chunks())  # a fresh stream each time (create can be retried)
        assert len(data) == b.size <= max_bytes and len(b) <= max_requests
        assert hashlib.sha256(data).hexdigest() == b.sha256()
        requests = json.loads(data)["requests"]
        assert [r["custom_id"] for r in requests] == [item_custom_id(x) for x in b.lines]
        assert [WorkItem.from_line(json.loads(x)) for x in b.lines] == b.items()
        seen += [r["custom_id"] for r in requests]
        b.close()
    assert len(seen) + skipped == len(sizes) and len(set(seen)) == len(seen)


def test_reads_overlap_in_more_threads_where_the_store_or_the_documents_are_on_s3() -> None:
    assert io_threads("/var/docmill", "file:///data/a.txt") == LOCAL_WORKERS
    assert io_threads("s3://bucket/docmill", "file:///data/a.txt") == STORE_WORKERS > LOCAL_WORKERS
    assert io_threads("/var/docmill", "s3://bucket/in/a.txt") == STORE_WORKERS


def test_records_and_ledger_on_s3_survive_a_crash_after_create(
    emulator: Any, tmp_path: Path, corpus: Path, s3_store_uri: str
) -> None:
    rig = Rig(emulator, tmp_path, corpus, store_uri=s3_store_uri, max_requests=3)
    docs = rig.ok_docs()[:7]

    def crash_after_second_create(point: str) -> None:
        if point == "after_create" and len(emulator.state.batches.batches) == 2:
            raise Abort

    crash_points.HOOK = crash_after_second_create
    try:
        with pytest.raises(Abort):
            rig.run(docs)
    finally:
        crash_points.HOOK = None
    assert rig.records().load(2).phase is BatchPhase.INTENT
    outcomes = rig.run(docs)
    assert all(o.state is DocState.SUCCEEDED for o in outcomes) and len(outcomes) == 7
    assert [r.phase for r in rig.records().load_all()] == [BatchPhase.COLLECTED] * 3
    assert set(rig.billed().values()) == {1} and len(rig.billed()) == 7
    assert all(ResultsLedger(rig.store).has(FILE_PASS, rig.key(d)) for d in docs)


def test_every_document_gets_an_outcome_even_when_two_share_a_key(
    emulator: Any, tmp_path: Path, corpus: Path
) -> None:
    rig = Rig(emulator, tmp_path, corpus, max_requests=2)
    docs = rig.ok_docs()[:3]
    twin = docs[0].model_copy(update={"doc_id": "renamed/" + docs[0].doc_id})  # same content, same key
    outcomes = rig.run([*docs, twin])
    by_doc = {o.doc_id: o for o in outcomes}
    assert set(by_doc) == {d.doc_id for d in [*docs, twin]}
    assert (
        by_doc[twin.doc_id].state is DocState.SUCCEEDED
        and by_doc[twin.doc_id].output == by_doc[docs[0].doc_id].output
    )
    assert rig.sent()[rig.key(docs[0])] == 1


def test_a_collected_batch_makes_its_results_durable_with_one_flush(
    emulator: Any, tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The results of a batch are written to the ledger without an fsync each: one flush of the file
    system per chunk of results makes them durable, before each is linked into place (counted, the
    real fsync and syncfs still run)."""
    fsynced: list[str] = []
    flushes: list[Path] = []
    real_fsync, real_flush = os.fsync, local_store._sync_file_system

    def counting_fsync(fd: int) -> None:
        fsynced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def counting_flush(root: Path) -> None:
        flushes.append(root)
        real_flush(root)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    monkeypatch.setattr(local_store, "_sync_file_system", counting_flush)
    rig = Rig(emulator, tmp_path, corpus)
    docs = rig.docs()
    outcomes = rig.run(docs)
    ok = {rig.key(d) for d in docs if d.status == "ok"}
    assert len(ok) >= 20 and {o.key for o in outcomes if o.state is DocState.SUCCEEDED} >= ok
    records = rig.records().load_all()
    assert all(r.phase is BatchPhase.COLLECTED for r in records)
    assert [p for p in fsynced if "/results/" in p] == []  # was one per result
    assert 1 <= len(flushes) <= len(records) * -(-len(ok) // ingest.CHUNK)
    ledger = ResultsLedger(rig.store)
    assert all(ledger.get(FILE_PASS, key) is not None for key in ok)  # readable as any result


def test_fsync_off_writes_results_without_any_flush(
    emulator: Any, tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DOCMILL_STORE_IO__FSYNC=false keeps meaning no flush at all, grouped or not."""
    flushes: list[Path] = []
    monkeypatch.setattr(local_store, "_sync_file_system", flushes.append)
    monkeypatch.setenv("DOCMILL_STORE_IO__FSYNC", "false")
    get_settings.cache_clear()
    try:
        rig = Rig(emulator, tmp_path, corpus)
        outcomes = rig.run()
    finally:
        monkeypatch.delenv("DOCMILL_STORE_IO__FSYNC")
        get_settings.cache_clear()
    assert any(o.state is DocState.SUCCEEDED for o in outcomes)
    assert flushes == []


def test_answers_are_gated_against_the_text_sent_without_reading_the_documents_again(
    emulator: Any, tmp_path: Path, corpus: Path
) -> None:
    """The gate proves a batch answer against the text layer its request was built from (kept by
    tasks.batch.sent), not a second read of the file: a text file rewritten after its batch was
    created is still gated, where a second read fails it (its sha256 changed)."""
    own = tmp_path / "corpus"
    shutil.copytree(corpus, own)
    rig = Rig(emulator, tmp_path, own)
    docs = rig.ok_docs()
    kept = [d for d in docs if d.doc_type in ("txt", "html", "md")]
    assert kept

    def rewrite(event: dict[str, Any]) -> None:
        if event["event"] == "submitted":
            for d in kept:
                path = own / d.doc_id
                path.write_bytes(path.read_bytes() + b"\n")

    states = {o.doc_id: o for o in rig.run(docs, on_progress=rewrite)}
    assert [d.doc_id for d in kept if states[d.doc_id].state is not DocState.SUCCEEDED] == []


def test_the_poll_interval_runs_from_the_start_of_a_look(
    emulator: Any, tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A look that takes time (a slow network, many batches) is part of the interval: the engine
    sleeps what is left of it, so an ended batch is noticed as soon as the cadence says."""
    clock = emulator.state.clock
    real_poll, real_advance = batch_lifecycle.poll, clock.advance
    sleeps: list[float] = []

    def slow_poll(*args: Any, **kw: Any) -> Any:
        real_advance(1.5)  # the look takes 1.5 s
        return real_poll(*args, **kw)

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        real_advance(seconds)

    monkeypatch.setattr(batch_lifecycle, "poll", slow_poll)
    monkeypatch.setattr(clock, "advance", sleep)
    rig = Rig(emulator, tmp_path, corpus)
    docs = rig.ok_docs()[:3]
    emulator.state.faults.add(kind="slow_batch", seconds=200, custom_id=rig.key(docs[0]))
    outcomes = rig.run(docs)
    assert all(o.state is DocState.SUCCEEDED for o in outcomes)
    # 60 s, then 120 s, each from its look's start (the emulator's clock also moves with the wall)
    assert sleeps[:2] == [pytest.approx(58.5, abs=0.3), pytest.approx(118.5, abs=0.3)]

"""The batch-shaped per-file pass holds the chunks in flight, not the whole inventory: a run's memory
must not grow by a whole inventory record per document (~0.9 KB as Python objects; issue: batch
driver RSS flat in the corpus). Synthetic inventory records in the store, `per_file_pass` over them
with outcomes that come, as a batch's do, only after every document was streamed and in an order
that completes no chunk before the last round; tracemalloc measures what the pass holds at its peak."""

from __future__ import annotations

import json
import os
import tracemalloc
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import ClassVar

import anthropic

from checkpoints.chunks import InventoryChunks, chunk_id
from checkpoints.outcomes import OutcomeLog
from checkpoints.store import open_store
from docmill.settings import Settings
from flows.run.context import Endpoint, RunContext
from flows.run.modes import PassKind
from flows.run.passes import PendingChunks, Unwritten, per_file_pass, write_batched
from flows.run.progress import Progress
from tasks.api.client import ModelClient
from tasks.per_file.outcome import DocOutcome, DocState
from tasks.recipes import load_recipe
from tasks.source.inventory import Document

DOCS, SIZE = 4000, 50


def doc_id(i: int) -> str:
    return f"archive/2026/suppliers/invoice-{i:06d}.txt"


def record(i: int) -> dict[str, object]:
    return Document(
        doc_id=doc_id(i),
        source_uri=f"file:///srv/archive/2026/suppliers/invoice-{i:06d}.txt",
        sha256=f"{i:064x}",
        size=1000 + i,
        doc_type="invoice",
        text_chars=900 + i,
    ).model_dump(mode="json")


class AfterEveryDocument:
    """A batch-shaped pass: every document streamed before the first outcome, then the first document
    of every chunk, the second of every chunk, ... (a batch's results come in any order). Nothing
    here keeps a document or an outcome: the traced peak is the pass's."""

    kind: ClassVar[PassKind] = PassKind.BATCH

    def run(self, ctx: RunContext, pending: PendingChunks, bar: Progress) -> None:
        def outcomes(docs: Iterator[Document], expected: int) -> Iterable[DocOutcome]:
            streamed = sum(1 for _ in docs)
            assert streamed == expected == DOCS
            for i in range(SIZE):
                for n in range(DOCS // SIZE):
                    yield DocOutcome(doc_id=doc_id(n * SIZE + i), state=DocState.SKIPPED, reason="empty")

        write_batched(ctx, pending, bar, outcomes)


def test_the_batch_pass_streams_the_inventory_chunk_by_chunk(tmp_path: Path) -> None:
    settings = Settings(store=str(tmp_path / "store"), store_io={"fsync": False})  # type: ignore[arg-type]
    store = open_store(settings.store)
    chunks = InventoryChunks(store, "run-1")
    ids = [
        chunks.put(chunk_id(n), [record(i) for i in range(n * SIZE, (n + 1) * SIZE)])
        for n in range(DOCS // SIZE)
    ]
    chunks.finish(ids, DOCS)
    url = "http://127.0.0.1:9"  # nothing is sent: the pass's outcomes are made here
    client = ModelClient(settings, base_url=url, api_key="test-key")
    sdk = anthropic.Anthropic(api_key="test-key", base_url=url)
    ctx = RunContext(
        load_recipe("invoices"),
        "run-1",
        store,
        client,
        settings,
        Endpoint(url, "test-key", True),
        lambda: sdk,
    )
    whole = len(ids) * sum(len(repr(r)) for r in chunks.load(ids[0]))  # the inventory's records as text
    file_pass = AfterEveryDocument()

    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        per_file_pass(ctx, file_pass, ids, progress=False)
        held = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()

    # every record and every outcome held at once is ~4x the records' text (the code before: 6.8 MiB
    # for 1.8); a place per document (~0.4x) and the chunks in flight are well below
    assert held < whole * 2 / 3, (
        f"the pass held {held / 2**20:.2f} MiB for {whole / 2**20:.2f} MiB of records"
    )
    log = OutcomeLog(store, "run-1")
    assert log.chunks_done() == set(ids)
    for n, cid in enumerate(ids):  # each chunk written whole, in inventory order
        assert [r["doc_id"] for r in log.read_chunk(cid) or []] == [
            doc_id(i) for i in range(n * SIZE, (n + 1) * SIZE)
        ]


def test_unwritten_outcomes_wait_in_a_spill_emptied_when_no_chunk_waits() -> None:
    chunks = [(chunk_id(n), [record(i) for i in range(n * 3, n * 3 + 3)], 3) for n in range(2)]
    with Unwritten() as unwritten:
        assert [d.doc_id for d in unwritten.documents(chunks)] == [doc_id(i) for i in range(6)]
        whole = []
        for i in (5, 0, 3, 1, 4, 1, 2):  # doc 1 twice: the first outcome counts
            reason = "second" if whole and i == 1 else "empty"
            got = unwritten.add(DocOutcome(doc_id=doc_id(i), state=DocState.SKIPPED, reason=reason))
            if got is not None:
                whole.append(got)
                size = os.fstat(unwritten.spill.fileno()).st_size
                assert (size == 0) == (len(whole) == 2)  # chunk 000000 still waits after 000001
    records = [(w.chunk_id, [json.loads(o) for o in w.outcomes]) for w in whole]
    assert [(cid, [r["doc_id"] for r in rs]) for cid, rs in records] == [
        ("000001", [doc_id(3), doc_id(4), doc_id(5)]),
        ("000000", [doc_id(0), doc_id(1), doc_id(2)]),
    ]
    assert {r["reason"] for _, rs in records for r in rs} == {"empty"}
    assert not any(w.retry or w.budget for w in whole)


def test_a_whole_chunk_says_whether_it_holds_a_retryable_outcome_or_a_budget_stop() -> None:
    chunks = [(chunk_id(n), [record(n)], 1) for n in range(3)]
    with Unwritten() as unwritten:
        list(unwritten.documents(chunks))
        plain = unwritten.add(DocOutcome(doc_id=doc_id(0), state=DocState.SUCCEEDED))
        retry = unwritten.add(DocOutcome(doc_id=doc_id(1), state=DocState.FAILED, retryable=True))
        budget = unwritten.add(DocOutcome(doc_id=doc_id(2), state=DocState.FAILED, failure_type="budget"))
    assert plain is not None and retry is not None and budget is not None
    assert [(w.retry, w.budget) for w in (plain, retry, budget)] == [
        (False, False),
        (True, False),
        (False, True),
    ]
    assert json.loads(retry.outcomes[0])["retryable"] is True


def test_a_chunk_joined_from_encoded_outcomes_reads_back_as_written(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    outcomes = [DocOutcome(doc_id=doc_id(i), state=DocState.SKIPPED, reason="é") for i in range(3)]
    log = OutcomeLog(store, "r")
    log.write_encoded("c1", [o.model_dump_json().encode() for o in outcomes], retry=True)
    log.write_chunk("c2", [o.model_dump(mode="json") for o in outcomes])
    assert log.read_chunk("c1") == log.read_chunk("c2") == [o.model_dump(mode="json") for o in outcomes]
    assert log.chunks_done() == {"c2"}  # c1 holds a retryable outcome: not done

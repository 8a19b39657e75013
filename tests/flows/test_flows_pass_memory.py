"""The batch-shaped per-file pass holds the chunks in flight, not the whole inventory: a run's memory
must not grow by a whole inventory record per document (~0.9 KB as Python objects; issue: batch
driver RSS flat in the corpus). Synthetic inventory records in the store, `per_file_pass` over them
with outcomes that come, as a batch's do, only after every document was streamed and in another
order; tracemalloc measures what the pass holds at its peak."""

from __future__ import annotations

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
from flows.run.passes import PendingChunks, per_file_pass, write_batched
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
    """A batch-shaped pass: every document streamed before the first outcome, outcomes last-first;
    the traced peak while the documents stream is the pass's, as nothing here keeps them."""

    kind: ClassVar[PassKind] = PassKind.BATCH
    peak = 0

    def run(self, ctx: RunContext, pending: PendingChunks, bar: Progress) -> None:
        def outcomes(docs: Iterator[Document], expected: int) -> Iterable[DocOutcome]:
            streamed = sum(1 for _ in docs)
            assert streamed == expected == DOCS
            self.peak = tracemalloc.get_traced_memory()[1]
            for i in reversed(range(streamed)):
                yield DocOutcome(doc_id=doc_id(i), state=DocState.SKIPPED, reason="empty")

        write_batched(ctx, pending, bar, outcomes)


def test_the_batch_pass_streams_the_inventory_chunk_by_chunk(tmp_path: Path) -> None:
    settings = Settings(store=str(tmp_path / "store"))
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
        load_recipe("invoices"), "run-1", store, client, settings, Endpoint(url, "test-key", True), sdk
    )
    whole = len(ids) * sum(len(repr(r)) for r in chunks.load(ids[0]))  # the inventory's records as text
    file_pass = AfterEveryDocument()

    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        per_file_pass(ctx, file_pass, ids, progress=False)
    finally:
        tracemalloc.stop()

    held = file_pass.peak - start
    # every record held at once is ~2.5x its text; one chunk plus a place per document is far below
    assert held < whole / 2, f"the pass held {held / 2**20:.2f} MiB for {whole / 2**20:.2f} MiB of records"
    log = OutcomeLog(store, "run-1")
    assert log.chunks_done() == set(ids)
    for n, cid in enumerate(ids):  # each chunk written whole, in inventory order
        assert [r["doc_id"] for r in log.read_chunk(cid) or []] == [
            doc_id(i) for i in range(n * SIZE, (n + 1) * SIZE)
        ]

"""The per-file pass over a run's chunks, one `FilePass` per run (chosen once: flows.run.driver.choose_pass):
`RealtimePass` (`review_one_chunk` per chunk, handed out as the client's window wants documents:
tasks.per_file.realtime.feed), `BatchPass` (tasks.batch.engine), or the deadline's `DeadlinePass`
(flows.run.deadline); the batch-shaped two share `write_batched`. The cost cap's stop between chunks.
Memory stays flat in the corpus (`PendingChunks`, `Unwritten`).

`map_chunks` is how chunks run: `plain_map` (a bounded thread pool) here, Prefect tasks in
flows.orchestration.chunk_tasks, shards over workers in flows.workers.spread.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from checkpoints.chunks import DUP_PREFIX, InventoryChunks
from checkpoints.inflight import run_spend
from checkpoints.outcomes import OutcomeLog
from checkpoints.outcomes_places import DigestMap, Spill, digest
from docmill.collector import relaxed_gc
from docmill.errors import BudgetExhausted
from docmill.settings import Settings
from flows.run.context import RunContext
from flows.run.modes import PassKind
from flows.run.progress import Progress
from tasks.batch.engine import run_batches
from tasks.cost.batch_cap import Cut, affordable_chunks
from tasks.per_file.outcome import DocOutcome
from tasks.per_file.realtime import extract_recorded, feed
from tasks.source.inventory import Document

ChunkFn = Callable[[str, list[dict[str, Any]]], dict[str, int]]
Chunk = tuple[str, list[dict[str, Any]]]
MapChunks = Callable[[ChunkFn, Iterable[Chunk]], list[dict[str, int]]]
CHUNK_WORKERS = Settings().chunk_workers  # read once: the Prefect task runner is built at import


def chunk_label(cid: str, docs: list[dict[str, Any]]) -> str:
    """What a chunk holds, for its task-run name: `000003: 2026-05/inv-001004.html .. 2026-06/inv-001020.md
    (20 docs)` (first and last doc id; long ids shortened to their tail)."""

    def short(doc_id: str) -> str:
        return doc_id if len(doc_id) <= 60 else "…" + doc_id[-59:]

    if not docs:
        return f"{cid}: empty"
    first, last = short(str(docs[0]["doc_id"])), short(str(docs[-1]["doc_id"]))
    span = first if len(docs) == 1 else f"{first} .. {last}"
    return f"{cid}: {span} ({len(docs)} doc{'s' if len(docs) != 1 else ''})"


def plain_map(fn: ChunkFn, chunks: Iterable[Chunk]) -> list[dict[str, int]]:
    """Chunks on a bounded thread pool (the Prefect flows use a bounded task runner instead), taken
    from `chunks` as it hands them out: the realtime pass hands out a chunk when the client's window
    wants more documents (tasks.per_file.realtime.feed), so as many chunks run as the window needs."""
    with ThreadPoolExecutor(max_workers=CHUNK_WORKERS, thread_name_prefix="docmill-chunk") as pool:
        return list(pool.map(lambda c: fn(*c), chunks))


def review_one_chunk(ctx: RunContext, cid: str, docs: list[dict[str, Any]]) -> dict[str, int]:
    """Per-file pass over one chunk (realtime); outcomes written once per chunk."""

    def settle(outcomes: list[Any]) -> bool:  # whole: earlier lives are recounted
        return not any(o.failure_type == "budget" for o in outcomes)

    documents = [Document.model_validate(d) for d in docs]
    outcomes = extract_recorded(documents, cid, ctx, settle=settle)
    records = [o.model_dump(mode="json") for o in outcomes]
    stopped = any(r.get("failure_type") == "budget" for r in records)
    if stopped:
        # not written: a resume redoes this chunk (finished documents are free ledger hits);
        # returned, not raised, so a Prefect chunk task ends quietly and the driver stops the run.
        # `answered`: its documents that got an answer (kept), as `docmill status` counts them.
        answered = sum(1 for r in records if r.get("failure_type") != "budget" and r.get("attempts"))
        return {"budget": 1, "answered": answered}
    OutcomeLog(ctx.store, ctx.run_id).write_chunk(cid, records)
    return dict(Counter(r["state"] for r in records))


def spent_usd(ctx: RunContext) -> float:
    """What the run has paid as far as anyone can tell: its cost ledger, the answers a crash left
    saved but not costed, and the upper bound of requests a crash left in flight
    (checkpoints.inflight.run_spend: the figure `status`, `runs` and the report show)."""
    spend = run_spend(ctx.store, ctx.run_id)
    return spend["recorded_usd"] + spend["saved_usd"] + spend["possibly_usd"]


def budget_stop(ctx: RunContext, where: str, why: str | None = None) -> BudgetExhausted:
    spent = spent_usd(ctx)
    cap = ctx.settings.cost.max_cost_usd
    why = why or "the next request would pass"
    return BudgetExhausted(
        f"run {ctx.run_id} stopped {where}: {why} its cap of ${cap or 0:.4f} "
        f"(spent ${spent:.4f}); requests in flight were finished and everything is kept",
        hint=f"`docmill resume {ctx.run_id} --max-cost-usd <higher>` finishes it",
        spent_usd=spent,
        cap_usd=cap,
        run_id=ctx.run_id,
    )


class FilePass(Protocol):
    """One way to run the per-file pass over a run's pending chunks, writing each chunk's outcomes
    once all of them are in; raises `BudgetExhausted` when the cost cap stops it."""

    kind: ClassVar[PassKind]

    def run(self, ctx: RunContext, pending: PendingChunks, bar: Progress) -> None: ...


Outcomes = Callable[[Iterator[Document], int], Iterable[DocOutcome]]  # (documents, how many) -> outcomes


@dataclass(frozen=True)
class PendingChunks:
    """A run's chunks without an outcome file, in inventory order: their ids and how many documents
    they hold. A chunk's records are read from the store when a pass comes to it, so the pass holds
    the chunks in flight, not the whole inventory (~0.9 KB a record as Python objects)."""

    inventory: InventoryChunks
    ids: tuple[str, ...]
    documents: int

    def __iter__(self) -> Iterator[Chunk]:
        return self.wave(None)

    def wave(self, duplicates: bool | None) -> Iterator[Chunk]:
        """The chunks read one at a time: all of them (None), or only those of duplicate-content
        documents (True) or only the others (False)."""
        for cid in self.ids:
            if duplicates is None or cid.startswith(DUP_PREFIX) == duplicates:
                yield cid, self.inventory.load(cid)


def pending_chunks(ctx: RunContext, chunk_ids: list[str]) -> PendingChunks:
    """The chunks of `chunk_ids` without an outcome file. Their documents are counted from the finished
    inventory's record when none has one, else by reading the pending chunks one at a time."""
    done = OutcomeLog(ctx.store, ctx.run_id).chunks_done()
    chunks = InventoryChunks(ctx.store, ctx.run_id)
    ids = tuple(cid for cid in chunk_ids if cid not in done)
    record = chunks.done()
    if record is not None and list(ids) == list(record["chunks"]):
        documents = int(record["documents"])
    else:
        documents = sum(len(chunks.load(cid)) for cid in ids)
    return PendingChunks(chunks, ids, documents)


def per_file_pass(ctx: RunContext, file_pass: FilePass, chunk_ids: list[str], progress: bool = True) -> None:
    """The chunks of `chunk_ids` without an outcome file, through `file_pass`."""
    pending = pending_chunks(ctx, chunk_ids)
    bar = Progress(pending.documents, "per-file pass", enabled=progress, listener=ctx.on_progress)
    file_pass.run(ctx, pending, bar)


@dataclass(frozen=True)
class RealtimePass:
    """The Messages API, chunk by chunk through `map_chunks`: originals first, then the duplicates
    that take their results from the ledger."""

    map_chunks: MapChunks
    submit_only: bool = False  # nothing is sent before the flow run (flows.run.early)
    kind: ClassVar[PassKind] = PassKind.REALTIME

    def run(self, ctx: RunContext, pending: PendingChunks, bar: Progress) -> None:
        if self.submit_only:
            return

        def fn(cid: str, docs: list[dict[str, Any]]) -> dict[str, int]:
            counts = review_one_chunk(ctx, cid, docs)
            bar.add(counts["answered"] if counts.get("budget") else len(docs))  # as `docmill status` counts
            return counts

        # A budget stop ends the pass before the duplicates' wave (their originals may have no result yet).
        for wave in (pending.wave(duplicates=False), pending.wave(duplicates=True)):
            with relaxed_gc():  # a full collection would stall every answer on the event loop
                handed = feed(wave, ctx.client, ctx.settings)
                stopped = any(c.get("budget") for c in self.map_chunks(fn, handed))
            if stopped:
                bar.finish()
                raise budget_stop(ctx, "during the per-file pass")


@dataclass(frozen=True)
class BatchPass:
    """The Message Batches API (tasks.batch.engine)."""

    submit_only: bool = False  # stop once every batch is created (flows.run.early)
    kind: ClassVar[PassKind] = PassKind.BATCH

    def run(self, ctx: RunContext, pending: PendingChunks, bar: Progress) -> None:
        def outcomes(docs: Iterator[Document], _expected: int) -> Iterable[DocOutcome]:
            return run_batches(docs, ctx, ctx.batch_sdk, submit_only=self.submit_only)

        write_batched(ctx, pending, bar, outcomes)


def write_batched(ctx: RunContext, pending: PendingChunks, bar: Progress, outcomes: Outcomes) -> None:
    """The chunks that fit under the cost cap, their documents through `outcomes` (in any order), each
    chunk's outcomes written once all of it is in; the cap's stop after what is in flight finished.
    Chunks are read as their documents are streamed (`PendingChunks`); until a chunk is whole, per
    document its place and its spilled outcome (`Unwritten`)."""
    spent = spent_usd(ctx)
    fit = affordable_chunks(
        pending, recipe=ctx.recipe, settings=ctx.settings, store=ctx.store, spent_usd=spent
    )
    stopped = False
    expected = pending.documents if fit.documents is None else fit.documents
    with Unwritten() as unwritten:
        docs = unwritten.documents(fit.take(pending))
        for o in outcomes(docs, expected):  # a chunk is written once all of it is in
            whole = unwritten.add(o)
            if whole is None:
                continue
            if whole.budget:
                stopped = True  # not written: a resume redoes it; what is in flight still finishes
                continue
            OutcomeLog(ctx.store, ctx.run_id).write_encoded(whole.chunk_id, whole.outcomes, retry=whole.retry)
            bar.add(len(whole.outcomes))
    if stopped:
        bar.finish()
        raise budget_stop(ctx, "during the batch pass")
    if not fit.complete:
        raise budget_stop(
            ctx,
            "before submitting the rest of the batch",
            f"{fit.left_documents} more request(s) with a worst case of ${fit.left_usd:.4f} (every "
            f"answer at max_tokens, input as cache writes; {fit.chunks} chunk(s) with a worst case of "
            f"${fit.reserved_usd:.4f} went) would pass",
        )


PLACES = 1 << 20  # a document's place packed in one int: chunk number * PLACES + position in the chunk


@dataclass(frozen=True)
class Whole:
    """A chunk all of whose documents have an outcome: its outcomes as JSON objects, in inventory
    order, and whether one of them is retryable (the chunk is not done) or a budget stop (the chunk
    is not written)."""

    chunk_id: str
    outcomes: list[bytes]
    retry: bool
    budget: bool


RETRYABLE, BUDGET = 1, 2  # a waiting chunk's marks


class Unwritten:
    """The chunks a batch-shaped pass has streamed and not yet written. Outcomes come in any order
    (a batch's results in the API's order, ledger hits while streaming), so a chunk is whole only
    near the end of its batch: each streamed document's place waits for its outcome (a 16-byte digest
    of its doc id -> one int, in a `DigestMap`: ~40-100 bytes a document, ~130 as a dict), and the
    outcomes of chunks not yet whole wait in a temporary file as the JSON the chunk's file is joined
    from (OutcomeLog.write_encoded), one int each in memory (held as dicts, a batch's records cost
    ~16 KB a document)."""

    def __init__(self) -> None:
        self.ids: list[str] = []  # chunk number -> chunk id
        self.sizes: list[int] = []  # chunk number -> its documents (a chunk cut short is never whole)
        self.places = DigestMap()
        self.got: dict[int, dict[int, int]] = {}  # chunk number -> position -> spilled outcome
        self.marks: dict[int, int] = {}  # chunk number -> RETRYABLE | BUDGET of its outcomes so far
        self.spill = Spill("docmill-outcomes-")

    def __enter__(self) -> Unwritten:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.spill.close()

    def documents(self, chunks: Iterable[Cut]) -> Iterator[Document]:
        """The documents of `chunks`, their places noted as they are handed out."""
        for cid, taken, size in chunks:
            n = len(self.ids)
            self.ids.append(cid)
            self.sizes.append(size)
            for i, d in enumerate(taken):
                self.places[digest(d["doc_id"])] = n * PLACES + i
                yield Document.model_validate(d)

    def add(self, outcome: DocOutcome) -> Whole | None:
        """Note one document's outcome; its chunk once every document of the chunk has one, else
        None (also for a second outcome of a document: the first one counts). The spill file is
        emptied whenever no chunk waits."""
        place = self.places.pop(digest(outcome.doc_id), None)
        if place is None:
            return None
        n, i = divmod(place, PLACES)
        got = self.got.setdefault(n, {})
        data = outcome.model_dump_json().encode()
        got[i] = self.spill.put(data)
        mark = self.marks.get(n, 0) | (RETRYABLE if outcome.retryable else 0)
        self.marks[n] = mark | (BUDGET if outcome.failure_type == "budget" else 0)
        if len(got) < self.sizes[n]:
            return None
        del self.got[n]
        mark = self.marks.pop(n)
        parts = [self.spill.get(got[i]) for i in range(self.sizes[n])]
        if not self.got:
            self.spill.clear()
        return Whole(self.ids[n], parts, bool(mark & RETRYABLE), bool(mark & BUDGET))

"""The per-file pass over a run's chunks, one `FilePass` per run (chosen once: flows.run.driver.choose_pass):
`RealtimePass` (`review_one_chunk` per chunk, handed out as the client's window wants documents:
tasks.per_file.realtime.feed), `BatchPass` (tasks.batch.engine), or the deadline's `DeadlinePass`
(flows.run.deadline); the batch-shaped two share `write_batched`. The cost cap's stop between chunks.

`map_chunks` is how chunks run: `plain_map` (a bounded thread pool) here, Prefect tasks in
flows.orchestration.chunk_tasks, shards over workers in flows.workers.spread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from checkpoints.chunks import DUP_PREFIX, InventoryChunks
from checkpoints.inflight import run_spend
from checkpoints.outcomes import OutcomeLog
from docmill.collector import relaxed_gc
from docmill.errors import BudgetExhausted
from docmill.settings import Settings
from flows.run.context import RunContext
from flows.run.modes import PassKind
from flows.run.progress import Progress
from tasks.batch.engine import run_batches
from tasks.cost.batch_cap import affordable_chunks
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
    from concurrent.futures import ThreadPoolExecutor

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
    counts: dict[str, int] = {}
    for r in records:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    return counts


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

    def run(self, ctx: RunContext, pending: list[Chunk], bar: Progress) -> None: ...


Outcomes = Callable[[Iterator[Document], int], Iterable[DocOutcome]]  # (documents, how many) -> outcomes


def per_file_pass(ctx: RunContext, file_pass: FilePass, chunk_ids: list[str], progress: bool = True) -> None:
    """The chunks of `chunk_ids` without an outcome file, through `file_pass`."""
    done = OutcomeLog(ctx.store, ctx.run_id).chunks_done()
    pending = [
        (cid, InventoryChunks(ctx.store, ctx.run_id).load(cid)) for cid in chunk_ids if cid not in done
    ]
    total = sum(len(d) for _, d in pending)
    bar = Progress(total, "per-file pass", enabled=progress, listener=ctx.on_progress)
    file_pass.run(ctx, pending, bar)


@dataclass(frozen=True)
class RealtimePass:
    """The Messages API, chunk by chunk through `map_chunks`: originals first, then the duplicates
    that take their results from the ledger."""

    map_chunks: MapChunks
    submit_only: bool = False  # nothing is sent before the flow run (flows.run.early)
    kind: ClassVar[PassKind] = PassKind.REALTIME

    def run(self, ctx: RunContext, pending: list[Chunk], bar: Progress) -> None:
        if self.submit_only:
            return

        def fn(cid: str, docs: list[dict[str, Any]]) -> dict[str, int]:
            counts = review_one_chunk(ctx, cid, docs)
            bar.add(counts["answered"] if counts.get("budget") else len(docs))  # as `docmill status` counts
            return counts

        # A budget stop ends the pass before the duplicates' wave (their originals may have no result yet).
        for wave in (
            [c for c in pending if not c[0].startswith(DUP_PREFIX)],
            [c for c in pending if c[0].startswith(DUP_PREFIX)],
        ):
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

    def run(self, ctx: RunContext, pending: list[Chunk], bar: Progress) -> None:
        def outcomes(docs: Iterator[Document], _expected: int) -> Iterable[DocOutcome]:
            return run_batches(docs, ctx, ctx.batch_sdk, submit_only=self.submit_only)

        write_batched(ctx, pending, bar, outcomes)


def write_batched(ctx: RunContext, pending: list[Chunk], bar: Progress, outcomes: Outcomes) -> None:
    """The chunks that fit under the cost cap, their documents through `outcomes` (in any order), each
    chunk's outcomes written once all of it is in; the cap's stop after what is in flight finished."""
    spent = spent_usd(ctx)
    full = {cid: chunk for cid, chunk in pending}  # a chunk cut short by the cap is never written
    fit = affordable_chunks(
        pending, recipe=ctx.recipe, settings=ctx.settings, store=ctx.store, spent_usd=spent
    )
    pending = fit.chunks
    docs = (Document.model_validate(d) for _, chunk in pending for d in chunk)
    chunk_of = {d["doc_id"]: cid for cid, chunk in pending for d in chunk}
    sizes = {cid: len(full[cid]) for cid, _ in pending}
    order = {cid: [d["doc_id"] for d in full[cid]] for cid, _ in pending}
    buffered: dict[str, dict[str, dict[str, Any]]] = {}
    stopped = False
    for o in outcomes(docs, sum(sizes.values())):  # a chunk is written once all of it is in
        cid = chunk_of[o.doc_id]
        got = buffered.setdefault(cid, {})
        got[o.doc_id] = o.model_dump(mode="json")
        if len(got) < sizes[cid]:
            continue
        records = [got[doc_id] for doc_id in order[cid]]
        del buffered[cid]
        if any(r.get("failure_type") == "budget" for r in records):
            stopped = True  # not written: a resume redoes it; what is in flight still finishes
            continue
        OutcomeLog(ctx.store, ctx.run_id).write_chunk(cid, records)
        bar.add(len(records))
    if stopped:
        bar.finish()
        raise budget_stop(ctx, "during the batch pass")
    if not fit.complete:
        raise budget_stop(
            ctx,
            "before submitting the rest of the batch",
            f"{fit.left_documents} more request(s) with a worst case of ${fit.left_usd:.4f} (every "
            f"answer at max_tokens, input as cache writes; {len(pending)} chunk(s) with a worst case of "
            f"${fit.reserved_usd:.4f} went) would pass",
        )

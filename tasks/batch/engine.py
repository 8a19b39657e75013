"""The per-file pass as Message Batches, with a crash-safe lifecycle and resume (invariant 2).

Per batch, recorded under `runs/<run_id>/batches/` (checkpoints.batches):
  items + intent (custom_ids, request hash, time, list mark)  -> `create` -> batch id -> poll with
  backoff -> results streamed and routed by type -> ledger -> record `collected` (+ carry).
This module drives the run (stream documents into batches, follow them, collect them); the other
modules of the package are in its README.

Resume = call `run_batches` again with the same run id: collected records give their carry, live
ones are polled and collected, an intent without a batch id is reconciled first (lifecycle),
keys in the ledger cost no request, and only what is missing is submitted.

Batch results stay downloadable for 29 days, so a crash while ingesting re-downloads them for free: no
response object per batch answer (one ledger put per document); follow-ups keep their request in the carry.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any

from checkpoints.batches import BatchPhase, BatchRecord, BatchRecords, item_custom_id
from checkpoints.outcomes_places import DigestMap, digest
from docmill.collector import relaxed_gc
from docmill.crash_points import crash_point
from docmill.errors import InputError
from docmill.sdk import anthropic
from docmill.shutdown import SHUTDOWN
from tasks.api.usage import COMPACT, WIDE, RepeatedJson, estimate_input_tokens
from tasks.batch import ingest, lifecycle
from tasks.batch.ingest import Gated, done_future, ordered_map
from tasks.batch.items import WorkItem, decode_item
from tasks.batch.longdocs import long_outcome
from tasks.batch.results import CostRow, ResultRouter, ResultType, Routed, record_batch_costs
from tasks.batch.spool import BatchBody, request_line
from tasks.cost.worst_case import COST_GUARD, Held, over_guard
from tasks.cost.worst_case import request_worst_usd as request_worst
from tasks.per_file.outcome import DocOutcome, DocState
from tasks.per_file.settle import Pass, enqueue_review, outcome_from_original, skipped_outcome
from tasks.records import BatchProgress
from tasks.request import FILE_PASS, file_key, file_params, needs_parts
from tasks.source.inventory import Document

if TYPE_CHECKING:
    from tasks.per_file.scope import RunScope

Progress = Callable[[BatchProgress], None]
STORE_WORKERS = 16  # threads overlapping store and file I/O (ledger reads, document reads) on S3
LOCAL_WORKERS = 2  # the same on local files: page-cache reads are quick, more threads hand the GIL around
INGEST_WORKERS = 2  # threads writing gated results to the ledger (more contend on one folder)
WINDOW = 256  # documents or results in flight in that pool
Chunk = list[tuple[WorkItem, dict[str, Any]]]  # succeeded results routed as one task
Pending = tuple[list[WorkItem], "Future[list[Routed]]"]  # a chunk's items and their routing, in flight


class BatchEngine:
    """One driver of one run's batch pass. Single-threaded; the run's lease keeps it alone. The
    deadline engine drives one through `batch_requests`, `held` (true: requests wait in `pending`
    instead of a batch) and `run(docs, follow=...)`, its own loop over `poll_live`/`submit_pending`."""

    def __init__(
        self,
        p: Pass,
        client: Callable[[], anthropic.Anthropic],
        *,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        on_progress: Progress | None,
        batch_requests: int | None = None,
        held: Callable[[], bool] | None = None,
        submit_only: bool = False,
    ) -> None:
        self.p, self.recipe, self.run_id, self.settings = p, p.recipe, p.run_id, p.settings
        self.router = ResultRouter(p)
        self.api = lifecycle.BatchApi(client, p.settings, sleep=sleep)
        self.records = BatchRecords(p.store, p.run_id)
        self.clock, self.sleep = clock, sleep
        self.on_progress = on_progress or (lambda _e: None)
        self.model = str(p.settings.api.model)
        self.max_tokens = int(p.settings.api.max_tokens)
        self.params = file_params(p.settings)
        self.pending: dict[str, WorkItem] = {}
        self.live: dict[int, BatchRecord] = {}
        self.live_ids = DigestMap()  # digest of the items of batches live at resume
        self.next_n, self.round = 1, 1
        self.duplicates: list[Document] = []
        self.batch_requests = min(
            p.settings.batch.max_requests, batch_requests or p.settings.batch.max_requests
        )
        self.held = held or (lambda: False)
        self.submit_only = submit_only  # stop once every batch is created
        # the JSON of what every request repeats (system prompt, schema), encoded once a run
        self.wide_json, self.compact_json = RepeatedJson(WIDE), RepeatedJson(COMPACT)

    # ---- resume ----------------------------------------------------------------------------

    def _load(self) -> None:
        records = self.records.load_all()
        owned = {bid for r in records for bid in (*r.batch_ids, *r.canceled_ids)}
        self.next_n = records[-1].n + 1 if records else 1
        for rec in records:
            self.round = max(self.round, rec.round)
            if self.pending or rec.live or rec.phase is BatchPhase.NOT_CREATED:
                cids = [item_custom_id(line) for line in self.records.item_lines(rec.n)]
                for cid in cids:
                    self.pending.pop(cid, None)
            if rec.phase is BatchPhase.INTENT:
                rec = lifecycle.reconcile(self.api, self.records, rec, owned)
                self.on_progress(progress_event("reconciled", rec))
            if rec.phase is BatchPhase.NOT_CREATED:
                self.pending.update(
                    (d["custom_id"], WorkItem.from_line(d)) for d in self.records.items(rec.n)
                )
            elif rec.phase is BatchPhase.COLLECTED:
                self.pending.update((d["custom_id"], WorkItem.from_line(d)) for d in rec.carry)
            else:
                self.live[rec.n] = rec
                for key_bytes in map(digest, cids):
                    self.live_ids.add(key_bytes)

    # ---- submission ------------------------------------------------------------------------

    def _line(self, item: WorkItem, doc: Document | None = None) -> bytes | InputError | Held | Document:
        """The item's request line, why its document could not be read, why the cost guard holds it
        (first requests only), or the document itself: a PDF in page ranges (tasks.batch.longdocs)."""
        if doc is not None and item.request is None and needs_parts(doc, self.recipe, self.settings):
            return doc
        try:
            request = self.router.request(item, doc)
        except InputError as e:
            return e
        if not item.request:
            estimate = estimate_input_tokens(request, self.wide_json.dumps)
            why = over_guard(self.settings, request_worst(self.settings, request, estimate))
            if why:
                return Held(why)
        return request_line(item.custom_id, request, self.compact_json.dumps)

    def _add(
        self, body: BatchBody, item: WorkItem, line: bytes | InputError | Held | Document
    ) -> tuple[BatchBody, DocOutcome | None]:
        """Spool one request (submitting the body first when it is full), or its failed outcome."""
        if isinstance(line, Document):  # extracted realtime, in page ranges
            return body, long_outcome(self.p, line, item)
        if isinstance(line, InputError):
            return body, self.router.fail(item, "input:unreadable", line.one_line(), permanent=False)
        if isinstance(line, Held):  # to review before it is paid for; not in the ledger
            held = self.router.outcome(item, DocState.NEEDS_REVIEW, reason=COST_GUARD, last_error=line.why)
            return body, enqueue_review(self.p, Document.model_validate(item.doc), held)
        if not body.alone_fits(line):
            why = f"request of {len(line)} bytes is larger than settings.batch.max_bytes"
            return body, self.router.fail(item, "input:too_large_for_batch", why, permanent=True)
        if not body.fits(line):
            self._submit(body)
            body = self._body()
        body.add(item, line)
        return body, None

    def _body(self) -> BatchBody:
        return BatchBody(self.batch_requests, self.settings.batch.max_bytes)

    def _submit(self, body: BatchBody) -> None:
        """A batch of the body's requests; they wait in `pending` when it was not created, or when no
        batch is created now (`held`: the deadline sends them realtime)."""
        try:
            if not len(body):
                return
            if not self.held():
                SHUTDOWN.check()  # after SIGINT/SIGTERM no batch is created (the requests wait for resume)
                n, self.next_n = self.next_n, self.next_n + 1
                rec = lifecycle.submit(
                    self.api, self.records, body, run_id=self.run_id, n=n, round=self.round, now=self.clock()
                )
                self.on_progress(progress_event("submitted", rec))
                if rec.phase is not BatchPhase.NOT_CREATED:
                    self.live[n] = rec  # its keys are in `streamed` (not held twice: memory per document)
                    return
            self.pending.update((i.custom_id, i) for i in body.items())
        finally:
            body.close()

    def _prepare(self, doc: Document) -> tuple[Document, str | None, Any]:
        """Worker-side part of streaming one document: key, ledger lookup, request (I/O overlaps)."""
        if doc.status != "ok":
            return doc, None, None
        key = file_key(self.recipe, doc, self.model, self.params)
        if key in self.pending or digest(key) in self.live_ids:
            return doc, key, None
        stored = self.p.ledger.get(FILE_PASS, key)
        if stored is not None:
            return doc, key, stored
        item = WorkItem(custom_id=key, doc=doc.model_dump(mode="json"), max_tokens=self.max_tokens)
        return doc, key, (item, self._line(item, doc))

    def _stream_docs(self, docs: Iterable[Document]) -> Iterator[DocOutcome]:
        body = self._body()
        streamed = DigestMap()  # a second document with a key already seen waits for its result
        rest = iter(docs)
        first = next(rest, None)
        threads = io_threads(self.p.store.uri, first.source_uri if first else "")
        with ThreadPoolExecutor(threads, thread_name_prefix="docmill-batch") as pool:
            docs = itertools.chain([first] if first else [], rest)
            for doc, key, got in ordered_map(pool, self._prepare, docs, WINDOW):
                if key is None or (key_bytes := digest(key)) in streamed:
                    if doc.duplicate_of or key is not None:
                        self.duplicates.append(doc)
                    else:
                        yield skipped_outcome(doc)
                    continue
                streamed.add(key_bytes)
                if isinstance(got, dict):
                    self.pending.pop(key, None)
                    yield self.router.from_ledger(doc, got)
                elif got is not None:
                    body, failed = self._add(body, *got)
                    if failed is not None:
                        yield failed
        self._submit(body)

    def submit_pending(self) -> Iterator[DocOutcome]:
        self.round, body = self.round + 1, self._body()
        items, self.pending = list(self.pending.values()), {}
        for item in items:
            body, failed = self._add(body, item, self._line(item))
            if failed is not None:
                yield failed
        self._submit(body)

    # ---- following -------------------------------------------------------------------------

    def _drive(self) -> Iterator[DocOutcome]:
        interval = self.settings.batch.poll_seconds
        while self.live or self.pending:
            if not self.live:
                yield from self.submit_pending()
                interval = self.settings.batch.poll_seconds
                continue
            SHUTDOWN.check()  # batches in flight keep running; resume re-attaches to them
            looked, live = self.clock(), len(self.live)
            yield from self.poll_live()
            if self.live and len(self.live) == live:  # none ended; the interval runs from this look
                self.sleep(max(0.0, interval - (self.clock() - looked)))
                interval = min(interval * 2, self.settings.batch.poll_max_seconds)

    def poll_live(self) -> Iterator[DocOutcome]:
        """Every live batch looked at once; an ended one collected (and no longer live)."""
        for n in sorted(self.live):
            crash_point("polling")
            rec = self.live[n] = lifecycle.poll(self.api, self.records, self.live[n], self.clock())
            self.on_progress(progress_event("status", rec))
            if rec.phase is BatchPhase.ENDED:
                yield from self.collect(rec)

    # ---- collection ------------------------------------------------------------------------

    def collect(self, rec: BatchRecord) -> Iterator[DocOutcome]:
        raw = {item_custom_id(line): line for line in self.records.item_lines(rec.n)}
        done: set[str] = set()
        retry: dict[str, str] = {}
        carry: dict[str, WorkItem] = {}
        costs: list[CostRow] = []
        counts: Counter[str] = Counter()
        notes: list[str] = []
        answered: set[str] = set()
        route = self.router.route  # by result type
        gate_remotely = len(raw) >= ingest.MIN_RESULTS
        for bid in rec.batch_ids:
            lines = lifecycle.results(self.api, bid)
            if lines is None:
                notes.append(
                    f"results of {bid} are gone (archived after 29 days); its requests are resubmitted"
                )
                continue
            inflight: deque[Pending] = deque()
            chunk: Chunk = []
            for line in lines:
                crash_point("streaming_results")
                cid = line.get("custom_id")
                if cid not in raw or cid in done or cid in carry or cid in answered:
                    counts["foreign" if cid not in raw else "duplicate"] += 1
                    continue
                item = decode_item(raw, cid)
                assert item is not None
                result = line.get("result") or {}
                kind = str(result.get("type"))
                counts[kind] += 1
                if kind == ResultType.SUCCEEDED:  # gate in worker processes, ledger writes in the pool
                    answered.add(item.custom_id)
                    chunk.append((item, result))
                    if len(chunk) >= ingest.CHUNK:  # in-process gating too: one durable flush a chunk
                        self._send(chunk, inflight, bid, costs, gate_remotely)
                        chunk = []
                    while len(inflight) * ingest.CHUNK >= WINDOW:
                        yield from self._settle(inflight.popleft(), done, carry, retry)
                    continue
                yield from self._settle(
                    ([item], done_future([route(kind, item, result, bid, costs)])), done, carry, retry
                )
            self._send(chunk, inflight, bid, costs, gate_remotely)
            while inflight:
                yield from self._settle(inflight.popleft(), done, carry, retry)
        for cid in raw:
            if cid not in done and cid not in carry and cid not in retry:
                retry[cid] = "no result"
        for cid, why in retry.items():
            item = decode_item(raw, cid)
            assert item is not None
            item.rounds += 1
            item.last_error = why
            if item.rounds >= self.settings.batch.resubmit_attempts:
                detail = f"no answer after {item.rounds} batch round(s); last: {why}"
                yield self.router.fail(item, "batch_rounds_exhausted", detail, permanent=False)
            else:
                carry[cid] = item
        record_batch_costs(self.p, rec.n, costs)
        outcome_counts = dict(counts) | {"carried": len(carry)}

        def collected(r: BatchRecord) -> None:
            r.phase = BatchPhase.COLLECTED
            r.collected_at = self.clock()
            r.carry = [i.to_line() for i in carry.values()]
            r.outcome_counts = outcome_counts
            r.notes.extend(notes)

        rec = self.records.update(rec.n, collected)
        del self.live[rec.n]
        self.pending.update(carry)
        self.on_progress(progress_event("collected", rec))

    def _send(
        self, chunk: Chunk, inflight: deque[Pending], bid: str, costs: list[CostRow], gate_remotely: bool
    ) -> None:
        """Route succeeded results as one task of the ingest pool, their answers gated as one chunk in
        a worker process (a task per result cost ~20 us of the driver's CPU each)."""
        if not chunk:
            return
        gated = None
        if gate_remotely:
            gated = self.gates.submit([(item.doc, result.get("message") or {}) for item, result in chunk])
        items = [item for item, _ in chunk]
        inflight.append((items, self.ingest.submit(self._route_chunk, chunk, gated, bid, costs)))

    def _route_chunk(
        self, chunk: Chunk, gated: Future[list[Gated]] | None, bid: str, costs: list[CostRow]
    ) -> list[Routed]:
        out: list[Routed] = []
        # the chunk's ledger writes made durable together, before the driver yields any of them
        with self.router.grouped() as settled:
            for i, (item, result) in enumerate(chunk):
                if gated is not None:
                    message = result.get("message") or {}
                    self.router.prechecked[item.custom_id] = partial(
                        self.gates.result, gated, i, item.doc, message
                    )
                out.append(self.router.route(ResultType.SUCCEEDED, item, result, bid, costs))
        return [(settled(outcome), follow, why) for outcome, follow, why in out]

    def _settle(
        self, pair: Pending, done: set[str], carry: dict[str, WorkItem], retry: dict[str, str]
    ) -> Iterator[DocOutcome]:
        items, future = pair
        for item, (outcome, follow, why) in zip(items, future.result(), strict=True):
            if outcome is not None:
                done.add(item.custom_id)
                retry.pop(item.custom_id, None)
                yield outcome
            elif follow is not None:
                carry[item.custom_id] = follow
                retry.pop(item.custom_id, None)
            else:
                retry[item.custom_id] = why or "no answer"

    # ---- the run ---------------------------------------------------------------------------

    def run(
        self, docs: Iterable[Document], follow: Callable[[], Iterator[DocOutcome]] | None = None
    ) -> Iterator[DocOutcome]:
        """Every document's outcome: stream them into batches, then follow the batches to their end
        (`follow`: another loop over the same steps, the deadline's)."""
        self.gates = ingest.Prechecker(self.recipe, self.settings)
        try:
            with (
                relaxed_gc(),
                ThreadPoolExecutor(INGEST_WORKERS, thread_name_prefix="docmill-ingest") as self.ingest,
            ):
                lifecycle.join_first_look(self.run_id)  # an earlier submit-only call's, in this process
                self._load()
                yield from self._stream_docs(docs)
                if self.submit_only:  # created; the first look on a thread, a later call follows them
                    lifecycle.first_look(self.api, self.records, list(self.live.values()), self.clock)
                    return
                if sum(r.request_count for r in self.live.values()) >= ingest.MIN_RESULTS:
                    self.gates.start()  # its processes start while the batches run
                yield from (follow or self._drive)()
                for doc in self.duplicates:
                    key = file_key(self.recipe, doc, self.model, self.params)
                    yield outcome_from_original(self.p, doc, key)
        finally:
            self.gates.close()
            self.router.sent.close()


def io_threads(*uris: str) -> int:
    """The threads reading documents and the ledger: STORE_WORKERS where the store or the documents
    (`uris`) are on S3, else LOCAL_WORKERS."""
    return STORE_WORKERS if any(u.startswith("s3://") for u in uris) else LOCAL_WORKERS


def progress_event(kind: str, rec: BatchRecord) -> BatchProgress:  # also the deadline engine's
    return {
        "event": kind,
        "run_id": rec.run_id,
        "n": rec.n,
        "round": rec.round,
        "phase": rec.phase.value,
        "batch_ids": list(rec.batch_ids),
        "status": rec.processing_status,
        "counts": dict(rec.request_counts),
        "requests": rec.request_count,
        "outcomes": dict(rec.outcome_counts),
        "notes": list(rec.notes),
    }


# ---- public entry points ---------------------------------------------------------------------


def run_batches(
    docs: Iterable[Document],
    scope: RunScope,
    sdk: Callable[[], anthropic.Anthropic],
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    on_progress: Progress | None = None,
    submit_only: bool = False,
) -> Iterator[DocOutcome]:
    """The per-file pass as batches: a generator of one terminal `DocOutcome` per document, resumed
    by calling it again with the same run id (the module docstring). Nothing happens until it is
    iterated; outcomes come as documents become terminal (ledger hits and skipped documents while
    streaming, the rest as their batches are collected, duplicates of another document's content
    last). `on_progress(event)` gets a `tasks.records.BatchProgress` at every submit, poll, collect
    and reconcile. `sdk()` makes the client that sends the batches (at the first batch call); the
    scope's model client sends repairs when settings.batch.repairs_realtime is set. `submit_only`:
    stop once every batch is created."""
    p = Pass.of(scope)
    engine = BatchEngine(p, sdk, clock=clock, sleep=sleep, on_progress=on_progress, submit_only=submit_only)
    yield from engine.run(docs)

"""The per-file pass as Message Batches, with a crash-safe lifecycle and resume (invariant 2).

Per batch, recorded under `runs/<run_id>/batches/` (checkpoints.batches):
  items + intent (custom_ids, request hash, time, list mark)  -> `create` -> batch id -> poll with
  backoff -> results streamed and routed by type -> ledger -> record `collected` (+ carry).
Result types (RESULT_ROUTES): succeeded -> gate -> accept / needs_review / a follow-up request
(repair with the validation errors, or a larger max_tokens) in a later round (or realtime with
settings.batch.repairs_realtime); errored invalid_request_error & co -> failed, written to the
ledger, never resent; errored api/overloaded/rate-limit/timeout, expired, canceled -> resent in a
later round while settings.batch.resubmit_attempts allows.

Resume = call `run_batches` again with the same run id: collected records give their carry, live
ones are polled and collected, an intent without a batch id is reconciled first (batch_records),
keys in the ledger cost no request, and only what is missing is submitted.

Batch results stay downloadable for 29 days, so a crash while ingesting re-downloads them for
free: no per-document response object is written for batch answers (one ledger put per document);
only follow-ups keep their request in the record's carry.
"""

from __future__ import annotations

import json
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from enum import StrEnum
from typing import Any, TypeVar

import anthropic

from checkpoints.batches import BatchPhase, BatchRecord, BatchRecords, item_custom_id
from checkpoints.costs import CostEntry
from docmill.errors import ApiCallError, BatchError, InputError
from docmill.prices import cost_usd
from tasks import batch_records as api_records
from tasks.batch_records import BatchBody, WorkItem, lifecycle, request_line
from tasks.gate import Action, Verdict, check, decide, next_request
from tasks.inventory import Document, load_text
from tasks.outcome import DocOutcome, DocState, add_usage
from tasks.realtime import ModelClient
from tasks.requests import FILE_PASS, estimate_input_tokens, file_key, file_params, file_request
from tasks.review import Pass, _from_original, _review_item, _skipped, _write, record_cost

Progress = Callable[[dict[str, Any]], None]
COST_GROUP = 5000  # cost entries per cost-ledger object
STORE_WORKERS = 16  # threads overlapping store and file I/O (ledger reads/writes, document reads)
WINDOW = 256  # documents or results in flight in that pool
RETRYABLE_ERRORS = frozenset({"api_error", "overloaded_error", "rate_limit_error", "timeout_error"})


Routed = tuple[DocOutcome | None, "WorkItem | None", str | None]
CostRow = tuple[str, int, str, str, dict[str, Any], str]  # key, attempt, doc_id, model, usage, batch id


T = TypeVar("T")
R = TypeVar("R")


def decode_item(raw: dict[str, bytes], cid: Any) -> WorkItem | None:
    """The WorkItem of `cid`, decoded from its encoded line each time (never cached: 100k decoded
    items cost far more memory than their lines; only carried items are kept)."""
    line = raw.get(cid) if isinstance(cid, str) else None
    return None if line is None else WorkItem.from_line(json.loads(line))


class ResultType(StrEnum):
    SUCCEEDED = "succeeded"
    ERRORED = "errored"
    EXPIRED = "expired"
    CANCELED = "canceled"


class BatchEngine:
    """One driver of one run's batch pass. Single-threaded; the run's lease keeps it alone."""

    def __init__(
        self,
        *,
        recipe: Any,
        run_id: str,
        store: Any,
        client: anthropic.Anthropic,
        settings: Any,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        on_progress: Progress | None = None,
        model_client: Any = None,
    ) -> None:
        if model_client is None and settings.batch.repairs_realtime:
            model_client = ModelClient(settings, base_url=str(client.base_url), api_key=client.api_key)
        self.p = Pass(recipe, run_id, store, model_client, settings)
        self.recipe, self.run_id, self.settings = recipe, run_id, settings
        self.api = api_records.BatchApi(client, settings, sleep=sleep)
        self.records = BatchRecords(store, run_id)
        self.clock, self.sleep = clock, sleep
        self.on_progress = on_progress or (lambda _e: None)
        self.model = str(settings.api.model)
        self.max_tokens = int(settings.api.max_tokens)
        self.params = file_params(settings)
        self.pending: dict[str, WorkItem] = {}
        self.live: dict[int, BatchRecord] = {}
        self.live_ids: set[str] = set()
        self.next_n = 1
        self.round = 1
        self.duplicates: list[Document] = []

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
                rec = api_records.reconcile(self.api, self.records, rec, owned)
                self.on_progress(_event("reconciled", rec))
            if rec.phase is BatchPhase.NOT_CREATED:
                self.pending.update(
                    (d["custom_id"], WorkItem.from_line(d)) for d in self.records.items(rec.n)
                )
            elif rec.phase is BatchPhase.COLLECTED:
                self.pending.update((d["custom_id"], WorkItem.from_line(d)) for d in rec.carry)
            else:
                self.live[rec.n] = rec
                self.live_ids.update(cids)

    # ---- submission ------------------------------------------------------------------------

    def _request(
        self, item: WorkItem, doc: Document | None = None, text: str | None = None
    ) -> dict[str, Any]:
        if item.request is not None:
            return item.request
        doc = doc or Document.model_validate(item.doc)
        text = text if text is not None else load_text(doc, self.settings)
        return file_request(self.recipe, doc, text, model=self.model, max_tokens=item.max_tokens)

    def _add(self, body: BatchBody, item: WorkItem, line: bytes) -> tuple[BatchBody, DocOutcome | None]:
        if not body.alone_fits(line):
            why = f"request of {len(line)} bytes is larger than settings.batch.max_bytes"
            return body, self._fail(item, "input:too_large_for_batch", why, permanent=True)
        if not body.fits(line):
            self._submit(body)
            body = self._body()
        body.add(item, line)
        return body, None

    def _body(self) -> BatchBody:
        return BatchBody(self.settings.batch.max_requests, self.settings.batch.max_bytes)

    def _submit(self, body: BatchBody) -> None:
        if not len(body):
            body.close()
            return
        n, self.next_n = self.next_n, self.next_n + 1
        try:
            rec = api_records.submit(
                self.api, self.records, body, run_id=self.run_id, n=n, round=self.round, now=self.clock()
            )
        finally:
            body.close()
        self.on_progress(_event("submitted", rec))
        if rec.phase is BatchPhase.NOT_CREATED:
            self.pending.update((i.custom_id, i) for i in body.items())
            return
        self.live[n] = rec
        self.live_ids.update(body.custom_ids)

    def _prepare(self, doc: Document) -> tuple[Document, str | None, Any]:
        """Worker-side part of streaming one document: key, ledger lookup, request (I/O overlaps)."""
        if doc.status != "ok":
            return doc, None, None
        key = file_key(self.recipe, doc, self.model, self.params)
        if key in self.live_ids or key in self.pending:
            return doc, key, None
        stored = self.p.ledger.get(FILE_PASS, key)
        if stored is not None:
            return doc, key, stored
        item = WorkItem(custom_id=key, doc=doc.model_dump(mode="json"), max_tokens=self.max_tokens)
        try:
            return doc, key, (item, request_line(key, self._request(item, doc)))
        except InputError as e:
            return doc, key, (item, e)

    def _stream_docs(self, docs: Iterable[Document]) -> Iterator[DocOutcome]:
        body = self._body()
        streamed: set[str] = set()  # a second document with a key already seen waits for its result
        for doc, key, got in ordered_map(self.pool, self._prepare, docs, WINDOW):
            if key is None or key in streamed:
                if doc.duplicate_of or key is not None:
                    self.duplicates.append(doc)
                else:
                    yield _skipped(doc)
                continue
            streamed.add(key)
            if isinstance(got, dict):
                self.pending.pop(key, None)
                yield self._from_ledger(doc, got)
            elif got is not None:
                item, line = got
                if isinstance(line, InputError):
                    yield self._fail(item, "input:unreadable", line.one_line(), permanent=False)
                    continue
                body, failed = self._add(body, item, line)
                if failed is not None:
                    yield failed
        self._submit(body)

    def _submit_pending(self) -> Iterator[DocOutcome]:
        self.round += 1
        body = self._body()
        items, self.pending = list(self.pending.values()), {}
        for item in items:
            try:
                line = request_line(item.custom_id, self._request(item))
            except InputError as e:
                yield self._fail(item, "input:unreadable", e.one_line(), permanent=False)
                continue
            body, failed = self._add(body, item, line)
            if failed is not None:
                yield failed
        self._submit(body)

    # ---- following -------------------------------------------------------------------------

    def _drive(self) -> Iterator[DocOutcome]:
        interval = self.settings.batch.poll_seconds
        while self.live or self.pending:
            if not self.live:
                yield from self._submit_pending()
                interval = self.settings.batch.poll_seconds
                continue
            ended_any = False
            for n in sorted(self.live):
                lifecycle("polling")
                rec = api_records.poll(self.api, self.records, self.live[n], self.clock())
                self.live[n] = rec
                self.on_progress(_event("status", rec))
                if rec.phase is BatchPhase.ENDED:
                    ended_any = True
                    yield from self._collect(rec)
            if self.live and not ended_any:
                self.sleep(interval)
                interval = min(interval * 2, self.settings.batch.poll_max_seconds)

    # ---- collection ------------------------------------------------------------------------

    def _collect(self, rec: BatchRecord) -> Iterator[DocOutcome]:
        raw = {item_custom_id(line): line for line in self.records.item_lines(rec.n)}
        done: set[str] = set()
        retry: dict[str, str] = {}
        carry: dict[str, WorkItem] = {}
        costs: list[CostRow] = []
        counts: Counter[str] = Counter()
        notes: list[str] = []
        answered: set[str] = set()
        for bid in rec.batch_ids:
            lines = api_records.results(self.api, bid)
            if lines is None:
                notes.append(
                    f"results of {bid} are gone (archived after 29 days); its requests are resubmitted"
                )
                continue
            inflight: deque[tuple[WorkItem, Future[Routed]]] = deque()
            for line in lines:
                lifecycle("streaming_results")
                cid = line.get("custom_id")
                if cid not in raw or cid in done or cid in carry or cid in answered:
                    counts["foreign" if cid not in raw else "duplicate"] += 1
                    continue
                item = decode_item(raw, cid)
                assert item is not None
                result = line.get("result") or {}
                kind = str(result.get("type"))
                counts[kind] += 1
                if kind == ResultType.SUCCEEDED:  # gate + ledger write in the pool (I/O overlaps)
                    answered.add(item.custom_id)
                    inflight.append(
                        (item, self.pool.submit(_route_succeeded, self, item, result, bid, costs))
                    )
                    if len(inflight) >= WINDOW:
                        yield from self._settle(inflight.popleft(), done, carry, retry)
                    continue
                route = RESULT_ROUTES.get(kind, _route_unknown)
                yield from self._settle(
                    (item, _done(route(self, item, result, bid, costs))), done, carry, retry
                )
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
                yield self._fail(item, "batch_rounds_exhausted", detail, permanent=False)
            else:
                carry[cid] = item
        self._record_costs(rec, costs)
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
        self.on_progress(_event("collected", rec))

    def _settle(
        self,
        pair: tuple[WorkItem, Future[Routed]],
        done: set[str],
        carry: dict[str, WorkItem],
        retry: dict[str, str],
    ) -> Iterator[DocOutcome]:
        item, future = pair
        outcome, follow, why = future.result()
        if outcome is not None:
            done.add(item.custom_id)
            retry.pop(item.custom_id, None)
            yield outcome
        elif follow is not None:
            carry[item.custom_id] = follow
            retry.pop(item.custom_id, None)
        else:
            retry[item.custom_id] = why or "no answer"

    def _record_costs(self, rec: BatchRecord, costs: list[CostRow]) -> None:
        """One cost object per COST_GROUP entries, grouped in custom_id order (a re-collection after
        a crash makes the same groups, and a group is written once)."""
        costs.sort(key=lambda row: (row[0], row[1], row[5]))
        for i in range(0, len(costs), COST_GROUP):
            entries = [
                CostEntry.from_usage(
                    run_id=self.run_id,
                    pass_name=FILE_PASS,
                    doc_id=doc_id,
                    key=key,
                    attempt=attempt,
                    model=model,
                    usage=usage,
                    request_id=bid,
                    batch=True,
                )
                for key, attempt, doc_id, model, usage, bid in costs[i : i + COST_GROUP]
            ]
            self.p.costs.record(f"batch-{rec.n:05d}-{i // COST_GROUP:04d}", entries)

    # ---- outcomes --------------------------------------------------------------------------

    def _outcome(self, item: WorkItem, state: DocState, **kw: Any) -> DocOutcome:
        return DocOutcome(
            doc_id=item.doc_id, key=item.custom_id, pass_name=FILE_PASS, state=state,
            attempts=item.attempts + item.rounds, model=kw.pop("model", self.model), usage=dict(item.usage),
            cost_usd=item.cost_usd, request_ids=list(item.request_ids), **kw,
        )  # fmt: skip

    def _finish(self, item: WorkItem, outcome: DocOutcome, errors: list[str] | None = None) -> DocOutcome:
        lifecycle("before_ledger_write")
        outcome = _write(self.p, outcome)
        if outcome.state is DocState.NEEDS_REVIEW:
            doc = Document.model_validate(item.doc)
            self.p.queue.add(_review_item(self.p, doc, outcome, errors=errors))
        return outcome

    def _fail(self, item: WorkItem, failure_type: str, error: str, *, permanent: bool) -> DocOutcome:
        outcome = self._outcome(item, DocState.FAILED, failure_type=failure_type, last_error=error)
        return self._finish(item, outcome) if permanent else outcome

    def _from_ledger(self, doc: Document, stored: dict[str, Any]) -> DocOutcome:
        outcome = DocOutcome.from_record(stored, doc_id=doc.doc_id)
        if outcome.state is DocState.NEEDS_REVIEW:
            self.p.queue.add(_review_item(self.p, doc, outcome))
        return outcome

    def _gated(
        self, item: WorkItem, message: dict[str, Any], model: str
    ) -> tuple[DocOutcome | None, WorkItem | None]:
        """Gate one answer: a terminal outcome, or the item with its follow-up request."""
        doc = Document.model_validate(item.doc)
        try:
            text = load_text(doc, self.settings)
        except InputError as e:
            return self._fail(item, "input:unreadable", e.one_line(), permanent=False), None
        while True:
            verdict = check(self.recipe, text, message)
            progress = item.progress()
            progress.note(Action(item.action) if item.action else None, message.get("usage"))
            item.take_progress(progress)
            request = self._request(item, doc, text) if not verdict.ok else {}
            estimate = estimate_input_tokens(request) + len(verdict.raw_text) // 4 if not verdict.ok else 0
            decision = decide(verdict, progress, self.settings, next_input_tokens=estimate)
            if decision.action in (Action.ACCEPT, Action.REVIEW):
                return self._accept_or_review(item, verdict, decision.action, decision.reason, model), None
            item.request = {**next_request(decision, request, verdict), "model": model}
            item.action = decision.action.value
            if not self.settings.batch.repairs_realtime:
                return None, item
            try:
                message, model = self._realtime(item)
            except ApiCallError as e:
                failure = str(e.fields.get("failure_type") or "transport_exhausted")
                last = str(e.fields.get("last_error") or e.message)
                return self._outcome(item, DocState.FAILED, failure_type=failure, last_error=last), None

    def _realtime(self, item: WorkItem) -> tuple[dict[str, Any], str]:
        """Send a follow-up realtime (settings.batch.repairs_realtime). The answer is persisted the
        moment it arrives (invariant 3) under its attempt number; a resume reuses it, never resends."""
        assert item.request is not None
        n, key, request = item.attempts + 1, item.custom_id, item.request
        message = self.p.responses.get(FILE_PASS, key, n)
        if message is None:

            def persist(_transport_attempt: int, answer: dict[str, Any]) -> None:
                answer["_docmill"] = {
                    "attempt": n, "purpose": item.action, "max_tokens": request["max_tokens"],
                    "model": answer.get("model") or request["model"],
                }  # fmt: skip
                self.p.responses.put(FILE_PASS, key, n, answer)

            result = self.p.client.call(
                request, key=key, doc_id=item.doc_id, pass_name=FILE_PASS, on_response=persist
            )
            message = result.message
        model = str((message.get("_docmill") or {}).get("model") or message.get("model") or request["model"])
        usage = message.get("usage") or {}
        usd = cost_usd(model, usage)
        add_usage(item.usage, usage)
        item.cost_usd += usd
        request_id = message.get("_request_id")
        if request_id:
            item.request_ids.append(str(request_id))
        record_cost(self.p, item.doc_id, key, n, model, request_id, usage, usd)
        return message, model

    def _accept_or_review(
        self, item: WorkItem, verdict: Verdict, action: Action, reason: str | None, model: str
    ) -> DocOutcome:
        accepted = action is Action.ACCEPT
        outcome = self._outcome(
            item,
            DocState.SUCCEEDED if accepted else DocState.NEEDS_REVIEW,
            reason=None if accepted else reason,
            output=verdict.output,
            raw_output=None if accepted else verdict.raw_text,
            flags=verdict.flags,
            last_error=None if accepted else "; ".join(verdict.errors)[:2000] or None,
            model=model,
        )
        return self._finish(item, outcome, errors=verdict.errors)

    # ---- the run ---------------------------------------------------------------------------

    def run(self, docs: Iterable[Document]) -> Iterator[DocOutcome]:
        with ThreadPoolExecutor(STORE_WORKERS, thread_name_prefix="docmill-batch") as self.pool:
            self._load()
            yield from self._stream_docs(docs)
            yield from self._drive()
            for doc in self.duplicates:
                yield _from_original(self.p, doc, file_key(self.recipe, doc, self.model, self.params))


# ---- routing by result type ------------------------------------------------------------------


def _done(routed: Routed) -> Future[Routed]:
    f: Future[Routed] = Future()
    f.set_result(routed)
    return f


def ordered_map(pool: Executor, fn: Callable[[T], R], items: Iterable[T], window: int) -> Iterator[R]:
    """`fn` over `items` in `pool`, results in input order, at most `window` in flight."""
    queue: deque[Future[R]] = deque()
    for x in items:
        queue.append(pool.submit(fn, x))
        if len(queue) >= window:
            yield queue.popleft().result()
    while queue:
        yield queue.popleft().result()


def _route_succeeded(
    e: BatchEngine, item: WorkItem, result: dict[str, Any], bid: str, costs: list[CostRow]
) -> Routed:
    message = result.get("message") or {}
    usage = message.get("usage") or {}
    model = str(message.get("model") or e.model)
    add_usage(item.usage, usage)
    item.cost_usd += cost_usd(model, usage, batch=True)
    item.request_ids.append(bid)
    costs.append((item.custom_id, item.attempts + 1, item.doc_id, model, usage, bid))
    outcome, follow = e._gated(item, message, model)
    return outcome, follow, None


def _route_errored(
    e: BatchEngine, item: WorkItem, result: dict[str, Any], bid: str, costs: list[CostRow]
) -> Routed:
    error = ((result.get("error") or {}).get("error")) or {}
    kind = str(error.get("type") or "api_error")
    text = f"{kind}: {error.get('message') or ''}".strip()
    if kind in RETRYABLE_ERRORS:
        return None, None, text
    return e._fail(item, f"api_error:{kind}", text, permanent=True), None, None


def _route_unanswered(
    e: BatchEngine, item: WorkItem, result: dict[str, Any], bid: str, costs: list[CostRow]
) -> Routed:
    return None, None, str(result.get("type"))


def _route_unknown(
    e: BatchEngine, item: WorkItem, result: dict[str, Any], bid: str, costs: list[CostRow]
) -> Routed:
    raise BatchError(
        f"batch {bid} returned an unknown result type {result.get('type')!r} for {item.custom_id}",
        hint="upgrade docmill; the API has a result type this version does not know",
    )


RESULT_ROUTES: dict[str, Callable[[BatchEngine, WorkItem, dict[str, Any], str, list[CostRow]], Routed]] = {
    ResultType.SUCCEEDED: _route_succeeded,
    ResultType.ERRORED: _route_errored,
    ResultType.EXPIRED: _route_unanswered,
    ResultType.CANCELED: _route_unanswered,
}


def _event(kind: str, rec: BatchRecord) -> dict[str, Any]:
    return {
        "event": kind, "run_id": rec.run_id, "n": rec.n, "round": rec.round, "phase": rec.phase.value,
        "batch_ids": list(rec.batch_ids), "status": rec.processing_status, "counts": dict(rec.request_counts),
        "requests": rec.request_count, "outcomes": dict(rec.outcome_counts), "notes": list(rec.notes),
    }  # fmt: skip


# ---- public entry points ---------------------------------------------------------------------


def run_batches(
    docs: Iterable[Document],
    *,
    recipe: Any,
    run_id: str,
    store: Any,
    client: anthropic.Anthropic,
    settings: Any,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    on_progress: Progress | None = None,
    model_client: Any = None,
) -> Iterator[DocOutcome]:
    """The per-file pass as batches: a generator of one terminal `DocOutcome` per document.

    Nothing happens until it is iterated; outcomes come as documents become terminal (ledger hits
    and skipped documents while streaming, the rest as their batches are collected, duplicates of
    another document's content last). Calling it again with the same run id resumes: batches in
    flight are re-attached, keys in the ledger are skipped, only what is missing is submitted.
    `on_progress(event)` gets {"event": "submitted" | "status" (every poll) | "collected" |
    "reconciled", "run_id", "n", "round", "phase", "batch_ids", "status", "counts" (the API's
    request counts), "requests", "outcomes" (per result type, "carried"), "notes"}.
    `model_client` (a tasks.realtime.ModelClient) is used for repairs when
    settings.batch.repairs_realtime is set.
    """
    engine = BatchEngine(
        recipe=recipe, run_id=run_id, store=store, client=client, settings=settings,
        clock=clock, sleep=sleep, on_progress=on_progress, model_client=model_client,
    )  # fmt: skip
    yield from engine.run(docs)


def cancel_batches(
    run_id: str, store: Any, client: anthropic.Anthropic, settings: Any = None
) -> dict[str, Any]:
    """Cancel the run's in-flight batches (reconciling an intent without id first); returns what
    the API said per batch. The next `run_batches` of the run collects what succeeded."""
    return api_records.cancel_run(run_id, store, client, settings)

"""Batch results routed by type (`ResultRouter.route`), and what turns an answer into an outcome.

succeeded -> gate -> accept / needs_review / a follow-up request (repair with the validation errors,
or a larger max_tokens) for a later round (or realtime with settings.batch.repairs_realtime);
errored invalid_request_error & co -> failed, written to the ledger, never resent; errored
api/overloaded/rate-limit/timeout, expired, canceled -> resent in a later round (the engine counts
rounds against settings.batch.resubmit_attempts). The gate, the ledger write and the review queue
are the realtime pass's own (tasks.per_file.gate, tasks.per_file.accounting), so both modes settle a document the
same way.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from enum import StrEnum
from typing import Any

from checkpoints.inflight import InFlight, life_of
from docmill.crash_points import crash_point
from docmill.errors import ApiCallError, BatchError, InputError
from docmill.prices import priced_usd, worst_usd
from tasks.api.retrying import RETRYABLE_ERROR_TYPES
from tasks.api.usage import add_usage, estimate_input_tokens
from tasks.batch.items import WorkItem
from tasks.batch.sent import SentTexts
from tasks.per_file.accounting import account_attempt, answered_model, file_cost_entry
from tasks.per_file.gate import Action, Verdict, check, next_request
from tasks.per_file.outcome import DocOutcome, DocState
from tasks.per_file.settle import (
    Pass,
    decide_next,
    enqueue_review,
    gated_fields,
    outcome_from_ledger,
    persist_answer,
    write_outcome,
    write_outcomes,
)
from tasks.request import FILE_PASS, Payload, cache_ttl, file_request, load_payload
from tasks.source.inventory import Document

COST_GROUP = 5000  # cost entries per cost-ledger object
RETRYABLE_FAILURES = frozenset({"batch_rounds_exhausted"})  # transient to the end: a resume resends

# a terminal outcome, or the item with its follow-up request, or (neither) why it is resent
Routed = tuple[DocOutcome | None, WorkItem | None, str | None]
# key, attempt, doc_id, model asked for, usage, batch id, the answer's own `model`
CostRow = tuple[str, int, str, str, dict[str, Any], str, str | None]


class ResultType(StrEnum):
    SUCCEEDED = "succeeded"
    ERRORED = "errored"
    EXPIRED = "expired"
    CANCELED = "canceled"


class ResultRouter:
    """Turns a batch request's result into a terminal outcome or a follow-up item."""

    def __init__(self, p: Pass) -> None:
        self.p = p
        self.model = str(p.settings.api.model)
        self.ttl = cache_ttl(p.recipe, self.model, p.settings, batch=True)  # batches: 1 h when it pays
        # custom_id -> the verdict of its answer gated elsewhere (tasks.batch.ingest), taken once
        self.prechecked: dict[str, Callable[[], tuple[str, Any]]] = {}
        self._local = threading.local()  # this thread's group of ledger writes (`grouped`)
        self.sent = SentTexts()  # the text layers first requests were built from, for the gate

    def request(
        self, item: WorkItem, doc: Document | None = None, text: Payload | None = None
    ) -> dict[str, Any]:
        """The request an item sends: its follow-up request, or the first one rebuilt from the document."""
        if item.request is not None:
            return item.request
        doc = doc or Document.model_validate(item.doc)
        if text is None:
            text = load_payload(doc, self.p.recipe, self.p.settings)
            self.sent.keep(item.custom_id, text)
        return file_request(
            self.p.recipe, doc, text, model=self.model, max_tokens=item.max_tokens, ttl=self.ttl
        )

    def route(
        self, kind: str, item: WorkItem, result: dict[str, Any], bid: str, costs: list[CostRow]
    ) -> Routed:
        """One result by its type: a succeeded answer is costed and gated, an errored one fails for
        good or is resent, an expired or canceled one is resent."""
        if kind == ResultType.SUCCEEDED:
            message = result.get("message") or {}
            usage = message.get("usage") or {}
            model = self.model  # priced by the model asked for; the answer may name a dated id
            add_usage(item.usage, usage)
            item.cost_usd += priced_usd(model, usage, batch=True) or 0.0
            item.request_ids.append(bid)
            answered = str(message["model"]) if message.get("model") else None
            costs.append((item.custom_id, item.attempts + 1, item.doc_id, model, usage, bid, answered))
            return *self.gated(item, message, model), None
        if kind == ResultType.ERRORED:
            error = ((result.get("error") or {}).get("error")) or {}
            etype = str(error.get("type") or "api_error")
            text = f"{etype}: {error.get('message') or ''}".strip()
            if etype in RETRYABLE_ERROR_TYPES:  # the one decision, shared with realtime (409 included)
                return None, None, text
            return self.fail(item, f"api_error:{etype}", text, permanent=True), None, None
        if kind in (ResultType.EXPIRED, ResultType.CANCELED):
            return None, None, str(result.get("type"))
        raise BatchError(
            f"batch {bid} returned an unknown result type {result.get('type')!r} for {item.custom_id}",
            hint="upgrade docmill; the API has a result type this version does not know",
        )

    # ---- outcomes --------------------------------------------------------------------------

    def outcome(self, item: WorkItem, state: DocState, **kw: Any) -> DocOutcome:
        return DocOutcome(
            doc_id=item.doc_id,
            key=item.custom_id,
            state=state,
            attempts=item.attempts + item.rounds,
            model=kw.pop("model", self.model),
            usage=dict(item.usage),
            cost_usd=item.cost_usd,
            request_ids=list(item.request_ids),
            **kw,
        )

    def finish(self, item: WorkItem, outcome: DocOutcome, errors: list[str] | None = None) -> DocOutcome:
        """Write a terminal outcome to the ledger (and the review queue when it needs review); inside
        `grouped`, at the group's end, and the outcome returned is then the one `settled` maps."""
        crash_point("before_ledger_write")
        group: list[tuple[WorkItem, DocOutcome, list[str] | None]] | None = getattr(
            self._local, "group", None
        )
        if group is not None:
            group.append((item, outcome, errors))
            return outcome
        return self._review(item, write_outcome(self.p, outcome), errors)

    def _review(self, item: WorkItem, outcome: DocOutcome, errors: list[str] | None) -> DocOutcome:
        if outcome.state is DocState.NEEDS_REVIEW:  # the document is decoded only when needed
            enqueue_review(self.p, Document.model_validate(item.doc), outcome, errors=errors)
        return outcome

    @contextlib.contextmanager
    def grouped(self) -> Iterator[Callable[[DocOutcome | None], DocOutcome | None]]:
        """Outcomes finished by this thread inside are written to the ledger together when the block
        ends (`write_outcomes`: durable with one flush of a local store, not one fsync each), then
        queued for review. Yields `settled`, which maps an outcome `finish` returned inside to the
        one in the ledger (the winner's, where another writer put the key first).

        Why the later write is safe: nothing outside the block sees these outcomes before the block
        ends (the engine yields them, and records the batch collected, only after), and a crash
        before the write leaves the keys absent with the batch not collected, so a rerun downloads
        the batch's results again (free) and writes them then: nothing is paid for twice, and each
        key is still written once, complete (invariant 1)."""
        group: list[tuple[WorkItem, DocOutcome, list[str] | None]] = []
        settled: dict[int, DocOutcome] = {}
        self._local.group = group
        try:
            yield lambda o: settled.get(id(o), o) if o is not None else None
            self._local.group = None
            written = write_outcomes(self.p, [outcome for _, outcome, _ in group]) if group else []
            for (item, outcome, errors), final in zip(group, written, strict=True):
                settled[id(outcome)] = self._review(item, final, errors)
        finally:
            self._local.group = None

    def fail(self, item: WorkItem, failure_type: str, error: str, *, permanent: bool) -> DocOutcome:
        """A failed outcome; written to the ledger only when `permanent` (never retried)."""
        outcome = self.outcome(
            item,
            DocState.FAILED,
            failure_type=failure_type,
            last_error=error,
            retryable=failure_type in RETRYABLE_FAILURES,
        )
        return self.finish(item, outcome) if permanent else outcome

    def from_ledger(self, doc: Document, stored: dict[str, Any]) -> DocOutcome:
        return outcome_from_ledger(self.p, doc, stored)

    def gated(
        self, item: WorkItem, message: dict[str, Any], model: str
    ) -> tuple[DocOutcome | None, WorkItem | None]:
        """Gate one answer: a terminal outcome, or the item with its follow-up request. The document
        record is validated only when its text is needed (an answer gated in a worker and accepted
        needs neither: ~40 us a result of the driver's CPU)."""
        doc: Document | None = None
        text: Payload | None = None
        verdict: Verdict | None = None
        pre = self.prechecked.pop(item.custom_id, None)  # gated in a worker process (batch_ingest)
        if pre is not None:
            kind, got = pre()
            if kind != "verdict":
                return self.fail(item, "input:unreadable", str(got), permanent=False), None
            verdict = got
        while True:
            if verdict is None or (not verdict.ok and text is None):
                doc = doc or Document.model_validate(item.doc)
                try:
                    text = (
                        text
                        or self.sent.payload(item.custom_id)
                        or load_payload(doc, self.p.recipe, self.p.settings)
                    )
                except InputError as e:
                    return self.fail(item, "input:unreadable", e.one_line(), permanent=False), None
            if verdict is None:
                assert text is not None
                verdict = check(self.p.recipe, text, message)
            progress = item.note(Action(item.action) if item.action else None, message.get("usage"))
            request = self.request(item, doc, text) if not verdict.ok else {}
            decision = decide_next(self.p.settings, verdict, progress, request)
            if decision.action in (Action.ACCEPT, Action.REVIEW):
                fields = gated_fields(verdict, decision.action, decision.reason)
                outcome = self.outcome(item, fields.pop("state"), model=model, **fields)
                return self.finish(item, outcome, errors=verdict.errors), None
            item.request = {**next_request(decision, request, verdict), "model": model}
            item.action = decision.action.value
            if not self.p.settings.batch.repairs_realtime:
                return None, item
            try:
                message, model = self._realtime(item)
            except ApiCallError as e:
                return self._call_failed(item, e), None
            verdict = None

    def finish_realtime(self, item: WorkItem) -> DocOutcome:
        """An item with a follow-up request, finished realtime (its batch ended: a deadline moved it
        there, tasks.deadline): the request, then the gate, its own repairs realtime too."""
        if not self.p.settings.batch.repairs_realtime:
            batch = self.p.settings.batch.model_copy(update={"repairs_realtime": True})
            self.p.settings = self.p.settings.model_copy(update={"batch": batch})
        try:
            message, model = self._realtime(item)
        except ApiCallError as e:
            return self._call_failed(item, e)
        outcome, _ = self.gated(item, message, model)
        assert outcome is not None  # repairs realtime: the gate always ends with an outcome
        return outcome

    def _call_failed(self, item: WorkItem, e: ApiCallError) -> DocOutcome:
        last = e.last_error or e.message
        return self.outcome(item, DocState.FAILED, failure_type=e.failure_type, last_error=last)

    def _realtime(self, item: WorkItem) -> tuple[dict[str, Any], str]:
        """Send a follow-up realtime (settings.batch.repairs_realtime). The answer is persisted the
        moment it arrives (invariant 3) under its attempt number; a resume reuses it, never resends."""
        assert item.request is not None
        n, key, request = item.attempts + 1, item.custom_id, item.request
        message = self.p.responses.get(FILE_PASS, key, n)
        if message is not None:
            return message, self._account(item, n, message)

        def persist(_transport_attempt: int, answer: dict[str, Any]) -> None:
            nonlocal n
            n = persist_answer(self.p, key, n, answer, purpose=item.action, request=request)

        # in flight until its cost entry is written (invariant 13: a kill in between is counted)
        client = self.p.client
        worst = worst_usd(str(request["model"]), estimate_input_tokens(request), int(request["max_tokens"]))
        mark = InFlight(self.p.store, self.p.run_id).open_call(
            f"{key}-{n}", life_of(client), client.concurrency, worst or 0.0
        )
        try:
            result = client.call(
                request, key=key, doc_id=item.doc_id, pass_name=FILE_PASS, on_response=persist
            )
            return result.message, self._account(item, n, result.message)
        finally:  # answered and costed, or failed (the client recorded a paid attempt without answer)
            InFlight(self.p.store, self.p.run_id).close(mark)

    def _account(self, item: WorkItem, n: int, message: dict[str, Any]) -> str:
        """Answer `n` of the item's follow-up request into its cost, usage and request ids; the model
        that answered."""
        assert item.request is not None
        model = answered_model(message, item.request["model"])
        item.cost_usd += account_attempt(
            self.p, item.doc_id, item.custom_id, n, model, message, item.usage, item.request_ids
        )
        return model


def record_batch_costs(p: Pass, n: int, costs: list[CostRow]) -> None:
    """One cost object per COST_GROUP entries of batch `n`, grouped in custom_id order (a
    re-collection after a crash makes the same groups, and a group is written once)."""
    costs.sort(key=lambda row: (row[0], row[1], row[5]))
    for i in range(0, len(costs), COST_GROUP):
        entries = [
            file_cost_entry(p.run_id, doc_id, key, attempt, model, bid, usage, batch=True, answered=answered)
            for key, attempt, doc_id, model, usage, bid, answered in costs[i : i + COST_GROUP]
        ]
        p.costs.record(f"batch-{n:05d}-{i // COST_GROUP:04d}", entries)

"""The per-file pass over one chunk of documents, realtime (issue #4, invariants 1, 3, 5).

For each document, on the client's thread pool (as wide as its concurrency, shared by every chunk in
flight, so a slow document never idles the rate limit behind a chunk boundary):
  skipped            -> skipped (empty, unsupported type) or failed "input:<skip reason>" (no call)
  ledger hit         -> the stored outcome (from_ledger=True, no call: invariant 1)
  persisted response -> gated without a call (crash recovery: invariant 3)
  otherwise          -> call -> persist response -> gate -> repair policy -> ledger (put-if-absent)
                        -> a cost entry per attempt -> a review item for needs_review.
The chunk's cost entries are written as one group at its end (also when it stops early); a chunk
run again after a crash recounts the attempts behind results this run already wrote.
Documents sharing a key (duplicate content) are resolved after the first one, from the ledger,
never with a second call. Any unexpected error of one document becomes its failed outcome.
The state and outcome bookkeeping it shares with batch mode live in tasks.per_file.accounting.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from docmill.errors import (
    ApiCallError,
    BudgetExhausted,
    InputError,
    Interrupted,
    SpendLimitReached,
    SystemicFailure,
)
from docmill.logs import get_logger, redact
from tasks.per_file.accounting import account_attempt, answered_model, flush_costs, recount_attempts
from tasks.per_file.cost_guard import COST_GUARD, long_worst_usd, over_guard, request_worst_usd
from tasks.per_file.gate import (
    Action,
    Decision,
    Problem,
    Progress,
    Verdict,
    action_of,
    check,
    next_request,
)
from tasks.per_file.media import Payload, goes_long, load_payload, long_tokens
from tasks.per_file.outcome import DocOutcome, DocState
from tasks.per_file.requests import FILE_PASS, file_request
from tasks.per_file.settle import (
    Pass,
    decide_next,
    enqueue_review,
    failed_outcome,
    gated_fields,
    outcome_from_ledger,
    outcome_from_original,
    persist_answer,
    prompt_version,
    skipped_outcome,
    write_outcome,
)

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore
    from docmill.settings import Settings
    from tasks.api.client import ModelClient
    from tasks.inventory import Document
    from tasks.recipes import Recipe

# 4xx answers that depend only on the request: written to the ledger, never re-sent.
# (401/403/404/402 depend on the account or config: a resume after fixing it retries them.)
PERMANENT_STATUSES = frozenset({400, 413, 422})
log = get_logger("review")


class Attempts:
    """The answered attempts of one document: numbering, persistence, usage, cost, log."""

    def __init__(self, p: Pass, doc_id: str, key: str, *, model: str) -> None:
        self.p, self.doc_id, self.key, self.model = p, doc_id, key, model
        self.n = 0  # answered attempts (ResponseLog numbering)
        self.transport_attempts = 0  # HTTP attempts, failed ones included
        self.usage: dict[str, int] = {}
        self.cost = 0.0
        self.request_ids: list[str] = []
        self.log: list[dict[str, Any]] = []
        self.last_verdict: Verdict | None = None

    def recovered(self, progress: Progress) -> dict[str, Any] | None:
        """The last persisted response of this key, if a crash left responses without a result.
        Every persisted attempt is accounted (cost entries are written once, so none twice)."""
        numbers = self.p.responses.attempts(FILE_PASS, self.key)
        latest: dict[str, Any] | None = None
        purpose = "first"
        for n in numbers:
            message = self.p.responses.get(FILE_PASS, self.key, n)
            if not message:
                continue
            meta = message.get("_docmill") or {}
            self.n = n
            self.model = answered_model(message, self.model)
            purpose = str(meta.get("purpose") or "first")
            progress.note(action_of(purpose), message.get("usage"))
            progress.max_tokens = int(meta.get("max_tokens") or progress.max_tokens)
            self._account(message, f"recovered:{purpose}", meta.get("max_tokens"))
            latest = message
        if latest is None:
            return None
        progress.attempts = max(self.n - 1, 0)
        self.transport_attempts = self.n
        return latest

    def call(self, request: dict[str, Any], purpose: str) -> dict[str, Any]:
        sent_at = time.time()  # the report's timeline: submitted -> answered

        def on_response(_transport_attempt: int, message: dict[str, Any]) -> None:
            self.n = persist_answer(
                self.p, self.key, self.n + 1, message, purpose=purpose, request=request, sent_at=sent_at
            )

        result = self.p.client.call(
            request, key=self.key, doc_id=self.doc_id, pass_name=FILE_PASS, on_response=on_response,
            purpose=purpose, prompt_version=prompt_version(self.p.recipe),
        )  # fmt: skip
        self.transport_attempts += result.attempts
        self.model = result.model
        self._account(result.message, purpose, request["max_tokens"])
        return result.message

    def _account(self, message: dict[str, Any], purpose: str, max_tokens: Any) -> None:
        model = answered_model(message, self.model)
        self.cost += account_attempt(
            self.p, self.doc_id, self.key, self.n, model, message, self.usage, self.request_ids
        )
        request_id = message.get("_request_id")
        self.log.append(
            {
                "attempt": self.n,
                "purpose": purpose,
                "model": model,
                "max_tokens": max_tokens,
                "stop_reason": message.get("stop_reason"),
                "request_id": request_id,
            }
        )

    def note_verdict(self, verdict: Verdict) -> None:
        self.last_verdict = verdict
        if self.log:
            self.log[-1]["problem"] = verdict.problem.value
            self.log[-1]["errors"] = verdict.errors[:20]

    def outcome(self, doc_id: str, *, state: DocState, **kw: Any) -> DocOutcome:
        return DocOutcome(
            doc_id=doc_id,
            key=self.key,
            pass_name=FILE_PASS,
            state=state,
            attempts=max(self.transport_attempts, self.n),
            model=self.model,
            usage=dict(self.usage),
            cost_usd=self.cost,
            request_ids=list(self.request_ids),
            origin_run=self.p.run_id,
            **kw,
        )


def extract_chunk(
    docs: list[Document],
    *,
    recipe: Recipe,
    run_id: str,
    store: ObjectStore,
    client: ModelClient,
    settings: Settings,
) -> list[DocOutcome]:
    """One terminal `DocOutcome` per document, in the order given."""
    p = Pass(recipe, run_id, store, client, settings, buffer_costs=True)
    try:
        return _review_all(p, docs, client)
    finally:
        flush_costs(p)  # one cost group per chunk, also when a document raised or the budget ran out


def _review_all(p: Pass, docs: list[Document], client: ModelClient) -> list[DocOutcome]:
    first: dict[str, int] = {}  # key -> index of the document that may call
    now: list[int] = []
    later: list[int] = []
    keys: dict[int, str | None] = {}
    for i, doc in enumerate(docs):
        keys[i] = _key_or_none(p, doc)
        k = keys[i]
        if k is None:
            now.append(i)
        elif doc.duplicate_of or k in first:
            later.append(i)
        else:
            first[k] = i
            now.append(i)
    out: dict[int, DocOutcome] = {}
    # the client's threads, shared with every other chunk in flight: while this chunk waits for its
    # slowest document, the next chunks' documents keep the rate limit busy
    pool: ThreadPoolExecutor = client.pool()
    futures = {i: pool.submit(_guarded, p, docs[i], keys[i]) for i in now}
    for i, future in futures.items():
        out[i] = future.result()
    for i in later:
        out[i] = _guarded(p, docs[i], keys[i], duplicate=True)
    return [out[i] for i in range(len(docs))]


def _key_or_none(p: Pass, doc: Document) -> str | None:
    """A document's key, or None when it will never be called (skipped, not a duplicate)."""
    if doc.status != "ok" and not doc.duplicate_of:
        return None
    return p.key(doc)


def _guarded(p: Pass, doc: Document, key: str | None, *, duplicate: bool = False) -> DocOutcome:
    try:
        if key is None:
            return skipped_outcome(doc)
        if duplicate:
            return outcome_from_original(p, doc, key)
        return _review_one(p, doc, key)
    except BudgetExhausted as e:
        return failed_outcome(doc, key, "budget", e.one_line())
    except (
        SpendLimitReached,
        SystemicFailure,
        Interrupted,
    ):  # the run stops; this chunk is not written, a resume redoes it
        raise
    except InputError as e:
        return failed_outcome(doc, key, "input:unreadable", e.one_line())
    except Exception as e:  # one broken document never sinks the chunk
        return failed_outcome(
            doc, key, f"unexpected:{type(e).__name__}", f"{type(e).__name__}: {str(e)[:500]}"
        )


def _review_one(p: Pass, doc: Document, key: str) -> DocOutcome:
    record = p.ledger.get(FILE_PASS, key)
    if record is not None:
        if record.get("origin_run") == p.run_id:  # this run wrote it: a chunk run again after a crash
            recount_attempts(p, doc.doc_id, key)
        return outcome_from_ledger(p, doc, record)
    payload = load_payload(doc, p.recipe, p.settings)
    text = payload.text
    long = goes_long(doc, p.recipe, payload, p.settings)
    max_tokens = int(p.settings.api.max_tokens)
    request = {} if long else file_request(p.recipe, doc, payload, model=p.model, max_tokens=max_tokens)
    held = _held(p, doc, key, text, request)
    if held is not None:
        return held
    if long:
        return _review_long(p, doc, key, payload)
    tries = Attempts(p, doc.doc_id, key, model=p.model)
    progress = Progress(max_tokens=max_tokens)
    action: Action | None = None
    try:
        message = tries.recovered(progress)
        if message is None:
            message = tries.call(request, "first")
        while True:
            verdict = check(p.recipe, payload, message)
            p.client.breaker.answer(*answer_cause(verdict))
            progress.note(action, message.get("usage"))
            tries.note_verdict(verdict)
            decision = decide_next(p.settings, verdict, progress, request)
            if decision.action in (Action.ACCEPT, Action.REVIEW):
                return _finish(p, doc, key, tries, verdict, decision)
            request = {**next_request(decision, request, verdict), "model": tries.model}
            action = decision.action
            progress.max_tokens = int(request["max_tokens"])
            message = tries.call(request, action.value)
    except ApiCallError as e:
        return _api_failure(p, doc, key, tries, e)
    except BudgetExhausted as e:  # not written: a resume with a higher cap continues from the responses
        return _unfinished(doc, tries, "budget", e.one_line())


def _held(p: Pass, doc: Document, key: str, text: str, request: dict[str, Any]) -> DocOutcome | None:
    """needs_review `cost_guard` when the document's worst case passes the per-document guard
    (tasks.per_file.cost_guard); not written to the ledger, so a run with a higher guard sends it."""
    if request:
        worst = request_worst_usd(p.settings, request)
    else:
        worst = long_worst_usd(p.settings, p.model, long_tokens(doc, p.recipe, text))
    why = over_guard(p.settings, worst)
    if why is None:
        return None
    outcome = DocOutcome(
        doc_id=doc.doc_id, key=key, pass_name=FILE_PASS, state=DocState.NEEDS_REVIEW, reason=COST_GUARD,
        last_error=why, model=p.model, origin_run=p.run_id,
    )  # fmt: skip
    return enqueue_review(p, doc, outcome)


def answer_cause(verdict: Verdict) -> tuple[str | None, str]:
    """What the circuit breaker hears about one gated answer (tasks.api.breaker): nothing wrong,
    or an invalid answer / refusal keyed by its first error, so only answers invalid alike add up."""
    if verdict.problem not in (Problem.INVALID, Problem.REFUSAL):
        return None, ""
    first = (verdict.errors or [verdict.problem.value])[0]
    return f"{verdict.problem.value}:{first[:60]}", first


def _review_long(p: Pass, doc: Document, key: str, payload: Payload) -> DocOutcome:
    """A document above the per-file budget (tasks.per_file.longdoc.review_long)."""
    from tasks.per_file.longdoc import review_long

    return review_long(p, doc, key, payload)


def _finish(
    p: Pass, doc: Document, key: str, tries: Attempts, verdict: Verdict, decision: Decision
) -> DocOutcome:
    outcome = tries.outcome(doc.doc_id, **gated_fields(verdict, decision.action, decision.reason))
    return enqueue_review(p, doc, write_outcome(p, outcome), tries=tries.log, errors=verdict.errors)


def _api_failure(p: Pass, doc: Document, key: str, tries: Attempts, e: ApiCallError) -> DocOutcome:
    tries.transport_attempts += e.attempts
    failure_type = e.failure_type
    log.warning(
        "%s call failed: %s",
        FILE_PASS,
        e.message,
        extra={
            "run_id": p.run_id,
            "doc_id": doc.doc_id,
            "request_id": e.request_id,
            "model": e.model,
            "prompt_version": prompt_version(p.recipe),
            "status": e.status,
            "attempt": e.attempts,
        },
    )
    # an API error may echo request data (headers, keys): mask secrets before it is stored
    outcome = _unfinished(doc, tries, failure_type, redact(e.last_error or e.message))
    outcome.retryable = e.status not in PERMANENT_STATUSES  # not ledger-final: resume retries it
    request_id = e.request_id
    if request_id:
        outcome.request_ids.append(str(request_id))
    if e.status in PERMANENT_STATUSES:
        outcome = write_outcome(p, outcome)
    return outcome


def _unfinished(doc: Document, tries: Attempts, failure_type: str, error: str) -> DocOutcome:
    """A failed outcome that keeps every attempt's usage and the last (partial) output."""
    last = tries.last_verdict
    return tries.outcome(
        doc.doc_id,
        state=DocState.FAILED,
        failure_type=failure_type,
        last_error=error,
        output=last.output if last else None,
        raw_output=last.raw_text if last else None,
        flags=last.flags if last else [],
    )

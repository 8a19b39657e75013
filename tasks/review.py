"""The per-file pass over one chunk of documents, realtime (issue #4, invariants 1, 3, 5).

For each document, in a thread pool as wide as the client's concurrency:
  skipped            -> failed "input:<skip reason>" (no call)
  ledger hit         -> the stored outcome (from_ledger=True, no call: invariant 1)
  persisted response -> gated without a call (crash recovery: invariant 3)
  otherwise          -> call -> persist response -> gate -> repair policy -> ledger (put-if-absent)
                        -> a cost entry per attempt -> a review item for needs_review.
Documents sharing a key (duplicate content) are resolved after the first one, from the ledger,
never with a second call. Any unexpected error of one document becomes its failed outcome.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from checkpoints.costs import CostEntry, CostLedger
from checkpoints.ledger import ResponseLog, ResultsLedger
from checkpoints.review_queue import ReviewQueue
from docmill.errors import ApiCallError, BudgetExhausted, InputError
from docmill.logs import get_logger, redact
from docmill.prices import cost_usd
from tasks.gate import Action, Decision, Progress, Verdict, check, decide, next_request
from tasks.inventory import load_text
from tasks.longdoc import extract_long, is_long
from tasks.outcome import DocOutcome, DocState, add_usage
from tasks.requests import FILE_PASS, estimate_input_tokens, file_key, file_params, file_request, recipe_parts

# 4xx answers that depend only on the request: written to the ledger, never re-sent.
# (401/403/404/402 depend on the account or config: a resume after fixing it retries them.)
PERMANENT_STATUSES = frozenset({400, 413, 422})
log = get_logger("review")


@dataclass
class Pass:
    """Everything one chunk's documents share."""

    recipe: Any
    run_id: str
    store: Any
    client: Any
    settings: Any
    ledger: ResultsLedger = field(init=False)
    responses: ResponseLog = field(init=False)
    costs: CostLedger = field(init=False)
    queue: ReviewQueue = field(init=False)

    def __post_init__(self) -> None:
        self.ledger = ResultsLedger(self.store)
        self.responses = ResponseLog(self.store)
        self.costs = CostLedger(self.store, self.run_id)
        self.queue = ReviewQueue(self.store, self.run_id)

    @property
    def model(self) -> str:
        return str(self.settings.api.model)

    def key(self, doc: Any) -> str:
        return file_key(self.recipe, doc, self.model, file_params(self.settings))


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
            self.model = str(meta.get("model") or message.get("model") or self.model)
            purpose = str(meta.get("purpose") or "first")
            if purpose == Action.REPAIR.value:
                progress.repairs += 1
                progress.repair_tokens += sum(
                    int((message.get("usage") or {}).get(f) or 0) for f in ("input_tokens", "output_tokens")
                )
            elif purpose == Action.RETRY_LARGER.value:
                progress.truncation_retries += 1
            progress.max_tokens = int(meta.get("max_tokens") or progress.max_tokens)
            self._account(message, f"recovered:{purpose}", meta.get("max_tokens"))
            latest = message
        if latest is None:
            return None
        progress.attempts = max(self.n - 1, 0)
        self.transport_attempts = self.n
        return latest

    def call(self, request: dict[str, Any], purpose: str) -> dict[str, Any]:
        def on_response(_transport_attempt: int, message: dict[str, Any]) -> None:
            message["_docmill"] = {
                "attempt": self.n + 1,
                "purpose": purpose,
                "model": message.get("model") or request["model"],
                "max_tokens": request["max_tokens"],
            }
            # before anything else (invariant 3); the log never overwrites, it may pick a later slot
            self.n = self.p.responses.put(FILE_PASS, self.key, self.n + 1, message)
            message["_docmill"]["attempt"] = self.n

        result = self.p.client.call(
            request, key=self.key, doc_id=self.doc_id, pass_name=FILE_PASS, on_response=on_response,
            purpose=purpose, prompt_version=prompt_version(self.p.recipe),
        )  # fmt: skip
        self.transport_attempts += result.attempts
        self.model = result.model
        self._account(result.message, purpose, request["max_tokens"])
        return result.message

    def _account(self, message: dict[str, Any], purpose: str, max_tokens: Any) -> None:
        model = str((message.get("_docmill") or {}).get("model") or self.model)
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
            **kw,
        )


def prompt_version(recipe: Any) -> str:
    """Recipe version and a short hash of its prompts, as log lines show it."""
    return f"{recipe.version}/{recipe_parts(recipe)[0][:8]}"


def account_attempt(
    p: Pass, doc_id: str, key: str, attempt: int, model: str, message: dict[str, Any],
    usage_total: dict[str, int], request_ids: list[str],
) -> float:  # fmt: skip
    """Account one answered realtime attempt: its usage added to `usage_total`, its request id to
    `request_ids`, its cost entry written; returns its cost in USD."""
    usage = message.get("usage") or {}
    usd = cost_usd(model, usage)
    add_usage(usage_total, usage)
    request_id = message.get("_request_id")
    if request_id:
        request_ids.append(str(request_id))
    record_cost(p, doc_id, key, attempt, model, request_id, usage, usd)
    return usd


def record_cost(
    p: Pass,
    doc_id: str,
    key: str,
    attempt: int,
    model: str,
    request_id: Any,
    usage: dict[str, Any],
    usd: float,
) -> None:
    """One cost entry per answered attempt, group id `<key>-<attempt>` (written once)."""
    entry = file_cost_entry(p.run_id, doc_id, key, attempt, model, request_id, usage, batch=False)
    p.costs.record(f"{key}-{attempt}", [entry])


def file_cost_entry(
    run_id: str, doc_id: str, key: str, attempt: int, model: str, request_id: Any, usage: dict[str, Any],
    *, batch: bool,
) -> CostEntry:  # fmt: skip
    """The cost entry of one answered per-file attempt, realtime or (`batch=True`) batch-priced."""
    return CostEntry.from_usage(
        run_id=run_id, pass_name=FILE_PASS, doc_id=doc_id, key=key, attempt=attempt, model=model,
        request_id=request_id, usage=usage, batch=batch,
    )  # fmt: skip


def review_chunk(
    docs: list[Any], *, recipe: Any, run_id: str, store: Any, client: Any, settings: Any
) -> list[DocOutcome]:
    """One terminal `DocOutcome` per document, in the order given."""
    p = Pass(recipe, run_id, store, client, settings)
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
    workers = max(1, min(int(getattr(client, "concurrency", 1)), len(now)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="docmill-review") as pool:
        for i, outcome in zip(now, pool.map(lambda i: _guarded(p, docs[i], keys[i]), now), strict=True):
            out[i] = outcome
    for i in later:
        out[i] = _guarded(p, docs[i], keys[i], duplicate=True)
    return [out[i] for i in range(len(docs))]


def _key_or_none(p: Pass, doc: Any) -> str | None:
    """A document's key, or None when it will never be called (skipped, not a duplicate)."""
    if doc.status != "ok" and not doc.duplicate_of:
        return None
    return p.key(doc)


def _guarded(p: Pass, doc: Any, key: str | None, *, duplicate: bool = False) -> DocOutcome:
    try:
        if key is None:
            return skipped_outcome(doc)
        if duplicate:
            return outcome_from_original(p, doc, key)
        return _review_one(p, doc, key)
    except BudgetExhausted as e:
        return _failed(doc, key, "budget", e.one_line())
    except InputError as e:
        return _failed(doc, key, "input:unreadable", e.one_line())
    except Exception as e:  # one broken document never sinks the chunk
        return _failed(doc, key, f"unexpected:{type(e).__name__}", f"{type(e).__name__}: {str(e)[:500]}")


def _failed(doc: Any, key: str | None, failure_type: str, error: str, **kw: Any) -> DocOutcome:
    return DocOutcome(
        doc_id=doc.doc_id, key=key, pass_name=FILE_PASS, state=DocState.FAILED,
        failure_type=failure_type, last_error=error, **kw,
    )  # fmt: skip


def skipped_outcome(doc: Any) -> DocOutcome:
    """The failed outcome of a document the inventory skipped ("input:<skip reason>", no call)."""
    reason = getattr(doc.skip_reason, "value", doc.skip_reason) or "skipped"
    detail = getattr(doc, "skip_detail", None)
    return _failed(doc, None, f"input:{reason}", detail or f"document skipped by inventory: {reason}")


def outcome_from_original(p: Pass, doc: Any, key: str) -> DocOutcome:
    """A duplicate-content document takes the ledger result of its original (no second call),
    marked `duplicate_of:<original>`; failed when the original has no result in the ledger."""
    original = doc.duplicate_of or "an earlier document with the same content"
    record = p.ledger.get(FILE_PASS, key)
    if record is None:
        return _failed(
            doc, key, "input:duplicate", f"original {original} has no result in the ledger (it failed)",
            reason=f"duplicate_of:{original}",
        )  # fmt: skip
    outcome = DocOutcome.from_record(record, doc_id=doc.doc_id)
    mark = f"duplicate_of:{original}"
    outcome.reason = mark if not outcome.reason else f"{outcome.reason};{mark}"
    return enqueue_review(p, doc, outcome)


def outcome_from_ledger(p: Pass, doc: Any, record: dict[str, Any]) -> DocOutcome:
    """The stored outcome of a ledger hit (no call: invariant 1), queued again for review when it
    needs review (the queue is per run)."""
    return enqueue_review(p, doc, DocOutcome.from_record(record, doc_id=doc.doc_id))


def _review_one(p: Pass, doc: Any, key: str) -> DocOutcome:
    record = p.ledger.get(FILE_PASS, key)
    if record is not None:
        return outcome_from_ledger(p, doc, record)
    text = load_text(doc)
    if is_long(text, p.settings):
        return _review_long(p, doc, key, text)
    max_tokens = int(p.settings.api.max_tokens)
    request = file_request(p.recipe, doc, text, model=p.model, max_tokens=max_tokens)
    tries = Attempts(p, doc.doc_id, key, model=p.model)
    progress = Progress(max_tokens=max_tokens)
    action: Action | None = None
    try:
        message = tries.recovered(progress)
        if message is None:
            message = tries.call(request, "first")
        while True:
            verdict = check(p.recipe, text, message)
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


def decide_next(settings: Any, verdict: Verdict, progress: Progress, request: dict[str, Any]) -> Decision:
    """The repair policy's next step for one answer; `request` is the one that would be followed up
    (its size and the answer's estimate the next call's input; unused when the verdict is ok)."""
    estimate = estimate_input_tokens(request) + len(verdict.raw_text) // 4 if not verdict.ok else 0
    return decide(verdict, progress, settings, next_input_tokens=estimate)


def _review_long(p: Pass, doc: Any, key: str, text: str) -> DocOutcome:
    """A document above the per-file budget: split on structure, extracted chunk by chunk in one
    conversation task (tasks.longdoc), merged with provenance, then gated like any answer."""
    from pydantic import ValidationError

    from tasks.gate import evidence_flags

    result = extract_long(
        text, doc_id=doc.doc_id, doc_type=doc.doc_type, recipe=p.recipe, run_id=p.run_id, store=p.store,
        client=p.client, settings=p.settings,
    )  # fmt: skip
    errors: list[str] = []
    flags: list[dict[str, Any]] = []
    output: dict[str, Any] | None = None
    try:
        output = p.recipe.file_schema.model_validate(result["output"]).model_dump(mode="json")
        flags = evidence_flags(p.recipe, output, text)
    except ValidationError as e:
        errors = [f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors()[:20]]
    if result["failed_chunks"]:
        errors.append(f"chunks without a valid answer: {result['failed_chunks']}")
    ok = not errors and not flags
    outcome = DocOutcome(
        doc_id=doc.doc_id, key=key, pass_name=FILE_PASS,
        state=DocState.SUCCEEDED if ok else DocState.NEEDS_REVIEW,
        reason=None if ok else ("validation_failed" if errors else "evidence_not_found"),
        output=output if output is not None else result["output"], flags=flags,
        last_error="; ".join(errors)[:2000] or None, model=p.model, attempts=len(result["chunks"]),
        provenance={"chunks": result["chunks"], "fields": result["provenance"]},
    )  # fmt: skip
    return enqueue_review(p, doc, write_outcome(p, outcome), errors=errors)


def _finish(p: Pass, doc: Any, key: str, tries: Attempts, verdict: Verdict, decision: Decision) -> DocOutcome:
    outcome = tries.outcome(doc.doc_id, **gated_fields(verdict, decision.action, decision.reason))
    return enqueue_review(p, doc, write_outcome(p, outcome), tries=tries.log, errors=verdict.errors)


def gated_fields(verdict: Verdict, action: Action, reason: str | None) -> dict[str, Any]:
    """The outcome fields of a gated answer the policy settled on: succeeded for ACCEPT, else
    needs_review with the reason, the raw answer and the validation errors."""
    accepted = action is Action.ACCEPT
    return {
        "state": DocState.SUCCEEDED if accepted else DocState.NEEDS_REVIEW,
        "reason": None if accepted else reason,
        "output": verdict.output,
        "raw_output": None if accepted else verdict.raw_text,
        "flags": verdict.flags,
        "last_error": None if accepted else "; ".join(verdict.errors)[:2000] or None,
    }


def _api_failure(p: Pass, doc: Any, key: str, tries: Attempts, e: ApiCallError) -> DocOutcome:
    tries.transport_attempts += int(getattr(e, "attempts", 0) or 0)
    failure_type = str(getattr(e, "failure_type", "transport_exhausted"))
    log.warning(
        "%s call failed: %s",
        FILE_PASS,
        e.message,
        extra={
            "run_id": p.run_id,
            "doc_id": doc.doc_id,
            "request_id": getattr(e, "request_id", None),
            "model": getattr(e, "model", None),
            "prompt_version": prompt_version(p.recipe),
            "status": getattr(e, "status", None),
            "attempt": getattr(e, "attempts", None),
        },
    )
    # an API error may echo request data (headers, keys): mask secrets before it is stored
    outcome = _unfinished(doc, tries, failure_type, redact(str(getattr(e, "last_error", None) or e.message)))
    request_id = getattr(e, "request_id", None)
    if request_id:
        outcome.request_ids.append(str(request_id))
    if getattr(e, "status", None) in PERMANENT_STATUSES:
        outcome = write_outcome(p, outcome)
    return outcome


def _unfinished(doc: Any, tries: Attempts, failure_type: str, error: str) -> DocOutcome:
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


def write_outcome(p: Pass, outcome: DocOutcome) -> DocOutcome:
    """Put-if-absent into the results ledger; returns the outcome, or, when another writer won the
    race for the key, the winner's record (the ledger holds one result per key, written once)."""
    stored, written = p.ledger.put(FILE_PASS, str(outcome.key), outcome.to_record())
    if written:
        return outcome
    return DocOutcome.from_record(stored, doc_id=outcome.doc_id)


def enqueue_review(
    p: Pass, doc: Any, outcome: DocOutcome, *, tries: list[dict[str, Any]] | None = None,
    errors: list[str] | None = None,
) -> DocOutcome:  # fmt: skip
    """Add a needs_review outcome to the run's review queue (others pass through); returns it."""
    if outcome.state is DocState.NEEDS_REVIEW:
        p.queue.add(review_item(p, doc, outcome, tries=tries, errors=errors))
    return outcome


def review_item(
    p: Pass, doc: Any, outcome: DocOutcome, *, tries: list[dict[str, Any]] | None = None,
    errors: list[str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The review-queue entry of one outcome: what a reviewer needs (errors default to the outcome's
    last error; `tries` is the per-attempt log of the realtime pass)."""
    return {
        "doc_id": doc.doc_id,
        "run_id": p.run_id,
        "source_uri": getattr(doc, "source_uri", None),
        "key": outcome.key,
        "pass_name": FILE_PASS,
        "reason": outcome.reason,
        "errors": errors if errors is not None else ([outcome.last_error] if outcome.last_error else []),
        "raw_output": outcome.raw_output,
        "output": outcome.output,
        "flags": outcome.flags,
        "model": outcome.model,
        "attempts": outcome.attempts,
        "tried": tries or [],
        "from_ledger": outcome.from_ledger,
    }

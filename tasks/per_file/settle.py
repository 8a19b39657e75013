"""How a per-file document is settled, the same in realtime (tasks.per_file.realtime) and batch
(tasks.batch): `Pass` holds what one chunk's documents share (recipe, run, store, ledgers, review
queue); around it the results-ledger write (put-if-absent), the review queue, the outcomes that need
no call, the gate's settled fields and the repair policy's next step.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from checkpoints.costs import CostEntry, CostLedger
from checkpoints.ledger import ResponseLog, ResultsLedger
from checkpoints.review_queue import ReviewQueue
from tasks.api.usage import estimate_input_tokens
from tasks.cost.worst_case import COST_GUARD
from tasks.per_file.gate import Action, Decision, Progress, Verdict, decide
from tasks.per_file.outcome import DocOutcome, DocState
from tasks.records import ResponseMeta, ReviewItem
from tasks.request import FILE_PASS, file_key, file_params, recipe_parts

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore
    from docmill.settings import Settings
    from tasks.api.client import ModelClient
    from tasks.per_file.scope import RunScope
    from tasks.recipes import Recipe
    from tasks.source.inventory import Document

COST_FLUSH_SECONDS = 15.0  # buffered realtime cost entries are written at least this often


@dataclass
class Pass:
    """Everything one chunk's documents share."""

    recipe: Recipe
    run_id: str
    store: ObjectStore
    client: ModelClient
    settings: Settings
    ledger: ResultsLedger = field(init=False)
    responses: ResponseLog = field(init=False)
    costs: CostLedger = field(init=False)
    queue: ReviewQueue = field(init=False)
    # Realtime chunks collect their cost entries and write them as one group (`flush_costs`) when the
    # chunk ends, or sooner once `cost_flush_seconds` passed: one object per chunk (or per 15 s)
    # instead of one per answer. Entries a crash kept from being written are recounted from the
    # response log when the chunk runs again (`tasks.per_file.realtime`).
    buffer_costs: bool = False
    cost_flush_seconds: float = COST_FLUSH_SECONDS  # a long chunk still shows its spending to `status`
    clock: Callable[[], float] = time.monotonic
    pending_costs: list[CostEntry] = field(init=False, default_factory=list)
    flushed_at: float = field(init=False, default=0.0)
    _costs_lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.flushed_at = self.clock()
        self.ledger = ResultsLedger(self.store)
        self.responses = ResponseLog(self.store)
        self.costs = CostLedger(self.store, self.run_id)
        self.queue = ReviewQueue(self.store, self.run_id)

    @classmethod
    def of(cls, scope: RunScope, *, buffer_costs: bool = False) -> Pass:
        """The pass of one run's documents (realtime chunks buffer their cost entries)."""
        return cls(
            scope.recipe, scope.run_id, scope.store, scope.client, scope.settings, buffer_costs=buffer_costs
        )

    @property
    def model(self) -> str:
        return str(self.settings.api.model)

    def key(self, doc: Document) -> str | None:
        """The document's per-file key; None for one the inventory skipped for its own sake (never
        called; a duplicate is keyed: it takes its original's result)."""
        if doc.status != "ok" and not doc.duplicate_of:
            return None
        return file_key(self.recipe, doc, self.model, file_params(self.settings))


def persist_answer(
    p: Pass,
    key: str,
    attempt: int,
    message: dict[str, Any],
    *,
    purpose: str | None,
    request: dict[str, Any],
    sent_at: float | None = None,
) -> int:
    """Persist one answer the moment it arrives (invariant 3), with docmill's `ResponseMeta` beside
    it; the one builder of that meta, for realtime answers and batch follow-ups alike. The response
    log never overwrites a billed answer: a taken slot moves to the next free one, which is returned
    and named in the meta as stored."""
    meta: ResponseMeta = {
        "attempt": attempt,
        "purpose": purpose or "first",
        "model": str(message.get("_asked_model") or request["model"]),  # the model asked for (priced by)
        "max_tokens": int(request["max_tokens"]),
        "at": time.time(),
        "run_id": p.run_id,
    }
    if sent_at is not None:  # when the request went out (realtime; the report's timeline)
        meta["sent_at"] = sent_at
    message["_docmill"] = meta

    def stamp(slot: int) -> None:
        meta["attempt"] = slot

    return p.responses.put(FILE_PASS, key, attempt, message, on_slot=stamp)


def write_outcome(p: Pass, outcome: DocOutcome) -> DocOutcome:
    """Put-if-absent into the results ledger; returns the outcome, or, when another writer won the
    race for the key, the winner's record (the ledger holds one result per key, written once)."""
    stored, written = p.ledger.put(FILE_PASS, str(outcome.key), outcome.to_record())
    return outcome if written else DocOutcome.from_record(stored, doc_id=outcome.doc_id)


def write_outcomes(p: Pass, outcomes: Sequence[DocOutcome]) -> list[DocOutcome]:
    """`write_outcome` of each, made durable together (`ResultsLedger.put_many`): what the batch
    pass settles a chunk of answers with, one flush of a local store instead of one fsync each."""
    stored = p.ledger.put_many(FILE_PASS, [(str(o.key), o.record_json()) for o in outcomes])
    return [
        o if winner is None else DocOutcome.from_record(winner, doc_id=o.doc_id)
        for o, winner in zip(outcomes, stored, strict=True)
    ]


def enqueue_review(
    p: Pass,
    doc: Document,
    outcome: DocOutcome,
    *,
    tries: list[dict[str, Any]] | None = None,
    errors: list[str] | None = None,
) -> DocOutcome:
    """Add a needs_review outcome to the run's review queue (others pass through); returns it. The
    entry holds what a reviewer needs (errors default to the outcome's last error; `tries` is the
    per-attempt log of the realtime pass)."""
    if outcome.state is not DocState.NEEDS_REVIEW:
        return outcome
    item: ReviewItem = {
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
        "provenance": outcome.provenance,  # each excerpt's page and offsets (unverified on a scanned page)
        "model": outcome.model,
        "attempts": outcome.attempts,
        "tried": tries or [],
        "from_ledger": outcome.from_ledger,
    }
    p.queue.add(item)
    return outcome


def hold_for_cost(p: Pass, doc: Document, key: str, why: str) -> DocOutcome:
    """needs_review `cost_guard`, queued for review: the document's worst case passes the
    per-document guard (tasks.cost.worst_case). Not written to the ledger, so a run with a
    higher guard sends it. The realtime pass and batch mode's long documents both hold this way."""
    held = DocOutcome(
        doc_id=doc.doc_id,
        key=key,
        state=DocState.NEEDS_REVIEW,
        reason=COST_GUARD,
        last_error=why,
        model=p.model,
        origin_run=p.run_id,
    )
    return enqueue_review(p, doc, held)


def failed_outcome(doc: Document, key: str | None, failure_type: str, error: str, **kw: Any) -> DocOutcome:
    return DocOutcome(
        doc_id=doc.doc_id,
        key=key,
        state=DocState.FAILED,
        failure_type=failure_type,
        last_error=error,
        **kw,
    )


# Inputs with nothing to extract: `skipped`, not `failed` (no alert, nothing to fix). Every other skip
# reason (unreadable, binary, undecodable, oversized) is a file that should have had text: `failed`.
NOTHING_TO_EXTRACT = frozenset({"empty", "unsupported_type"})


def skipped_outcome(doc: Document) -> DocOutcome:
    """The outcome of a document the inventory skipped, without a call: `skipped` with the skip reason
    for an empty/marker file or a type the recipe does not take, else `failed` "input:<skip reason>"."""
    reason = getattr(doc.skip_reason, "value", doc.skip_reason) or "skipped"
    detail = getattr(doc, "skip_detail", None) or f"document skipped by inventory: {reason}"
    if reason in NOTHING_TO_EXTRACT:
        return DocOutcome(doc_id=doc.doc_id, state=DocState.SKIPPED, reason=reason, last_error=detail)
    return failed_outcome(doc, None, f"input:{reason}", detail)


def outcome_from_original(p: Pass, doc: Document, key: str) -> DocOutcome:
    """A duplicate-content document takes the ledger result of its original (no second call),
    marked `duplicate_of:<original>`; failed when the original has no result in the ledger."""
    original = doc.duplicate_of or "an earlier document with the same content"
    record = p.ledger.get(FILE_PASS, key)
    if record is None:
        return failed_outcome(
            doc,
            key,
            "input:duplicate",
            f"original {original} has no result in the ledger (it failed)",
            reason=f"duplicate_of:{original}",
        )
    outcome = DocOutcome.from_record(record, doc_id=doc.doc_id)
    mark = f"duplicate_of:{original}"
    outcome.reason = mark if not outcome.reason else f"{outcome.reason};{mark}"
    return enqueue_review(p, doc, outcome)


def outcome_from_ledger(p: Pass, doc: Document, record: dict[str, Any]) -> DocOutcome:
    """The stored outcome of a ledger hit (no call: invariant 1), queued again for review when it
    needs review (the queue is per run)."""
    return enqueue_review(p, doc, DocOutcome.from_record(record, doc_id=doc.doc_id))


def gated_fields(verdict: Verdict, action: Action, reason: str | None) -> dict[str, Any]:
    """The outcome fields of a gated answer the policy settled on: succeeded for ACCEPT, else
    needs_review with the reason, the raw answer and the validation errors."""
    accepted = action is Action.ACCEPT
    # where each excerpt sits (offsets, page, verified), and how the document was sent if not as text
    provenance: dict[str, Any] = {"fields": verdict.offsets} if verdict.offsets else {}
    if verdict.sent_as != "text":
        provenance["sent_as"] = verdict.sent_as
    if getattr(verdict, "encoding", None):
        provenance["encoding"] = f"{verdict.encoding} (guessed)"
    return {
        "state": DocState.SUCCEEDED if accepted else DocState.NEEDS_REVIEW,
        "reason": None if accepted else reason,
        "output": verdict.output,
        "raw_output": None if accepted else verdict.raw_text,
        "flags": verdict.flags,
        "last_error": None if accepted else "; ".join(verdict.errors)[:2000] or None,
        "provenance": provenance or None,
    }


def decide_next(
    settings: Settings, verdict: Verdict, progress: Progress, request: dict[str, Any]
) -> Decision:
    """The repair policy's next step for one answer; `request` is the one that would be followed up
    (its size and the answer's estimate the next call's input; unused when the verdict is ok)."""
    estimate = estimate_input_tokens(request) + len(verdict.raw_text) // 4 if not verdict.ok else 0
    return decide(verdict, progress, settings, next_input_tokens=estimate)


def prompt_version(recipe: Recipe) -> str:
    """Recipe version and a short hash of its prompts, as log lines show it."""
    return f"{recipe.version}/{recipe_parts(recipe).prompt_hash[:8]}"

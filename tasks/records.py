"""Typed records for the shapes that cross module boundaries (a leaf: TypedDicts only, zero cost at
run time). The stored bytes are unchanged: these describe what the store, the phases and the reports
already exchange, so callers stop indexing nested dicts by hand."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class ResponseMeta(TypedDict):
    """`_docmill` beside each persisted answer in the response log (built by
    `tasks.per_file.settle.persist_answer` for realtime and batch follow-ups alike)."""

    attempt: int  # the response-log slot the answer was written to
    purpose: str  # "first", or the gate action that produced the request (repair, retry_larger)
    model: str  # the model that answered (the API's field, else the one asked for)
    max_tokens: int
    at: float  # epoch seconds when it was answered
    sent_at: NotRequired[float]  # epoch seconds when the request was sent (realtime answers)
    run_id: NotRequired[str]  # the run that paid for it (the response log is shared by every run)


class Conflict(TypedDict):
    """Documents sharing a key field's value but disagreeing on another field."""

    key_field: str
    key: Any
    field: str
    values: list[dict[str, Any]]  # {"value", "doc_id", "evidence"} per document


class IntegrationChecks(TypedDict):
    conflicts: list[Conflict]
    coverage_gaps: list[dict[str, Any]]
    flags: list[dict[str, Any]]  # what code fixed in the model's answers (unknown doc ids removed)
    unaccounted: NotRequired[list[str]]  # doc ids in no entity and no gap (empty when complete)


class IntegrationResult(TypedDict):
    """`runs/<run_id>/integration.json`: the integration pass's answer plus the checks code made,
    and its state (`tasks.integration.run.integrate`)."""

    run_id: str
    recipe: str
    documents: int
    output: dict[str, Any]
    checks: IntegrationChecks
    mode: NotRequired[str]  # incremental | full | skip
    status: NotRequired[str]  # complete | partial | failed | skipped
    problems: NotRequired[list[dict[str, Any]]]  # why partial or failed, with the doc ids concerned
    doc_ids: NotRequired[list[str]]
    delta: NotRequired[dict[str, int]]  # added, changed, removed, pending, retracted_slices, to_integrate
    calls: NotRequired[int]  # model calls this run (ledger hits excluded)
    truncated: NotRequired[int]  # answers cut at max_tokens (each split and asked again in halves)
    state_key: NotRequired[str | None]
    # of the code that built its sections and checks (integration.run.RECORD_VERSION)
    version: NotRequired[int]


class RunSummary(TypedDict):
    """`tasks.reporting.summary.summarize`: a run's outcomes counted."""

    documents: int
    states: dict[str, int]
    reasons: dict[str, int]
    retryable: int  # failed documents a resume sends again
    from_ledger: int
    cost_usd: float


class ReviewItem(TypedDict):
    """One entry of `review/<run_id>/<doc_id>.json`: what a reviewer needs."""

    doc_id: str
    run_id: str
    source_uri: NotRequired[str | None]
    key: NotRequired[str | None]
    pass_name: str
    reason: str | None
    errors: list[str]
    raw_output: str | None
    output: dict[str, Any] | None
    flags: NotRequired[list[dict[str, Any]]]
    provenance: NotRequired[dict[str, Any] | None]  # evidence pages and offsets (tasks.per_file.gate)
    model: str | None
    attempts: int
    tried: list[dict[str, Any]]
    from_ledger: NotRequired[bool]
    conflicts: NotRequired[list[Conflict]]


class BatchProgress(TypedDict):
    """A batch-mode progress event (`tasks.batch.engine.run_batches(on_progress=...)`)."""

    event: str  # submitted | status (every poll) | collected | reconciled
    run_id: str
    n: int
    round: int
    phase: str
    batch_ids: list[str]
    status: str | None  # the API's processing_status
    counts: dict[str, int]  # the API's request counts
    requests: int
    outcomes: dict[str, int]  # per result type, and "carried"
    notes: list[str]

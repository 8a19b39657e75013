"""The terminal outcome of one document in one pass (invariant 5): exactly one `DocState`. The same
record, minus `from_ledger`, is what the results ledger stores under the document's idempotency key.

`skipped`: an input with nothing to extract (an empty or marker file, a type the recipe does not
take; no call). A failed outcome is either final (written to the ledger: the request itself is bad)
or `retryable` (invariant 12: transport failures after retries, a misconfigured endpoint or
account; never written to the ledger), sent again by `resume`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field


class DocState(StrEnum):
    SUCCEEDED = "succeeded"
    NEEDS_REVIEW = "needs_review"
    FAILED = "failed"
    SKIPPED = "skipped"


class DocOutcome(BaseModel):
    """What happened to one document. `reason` explains needs_review (and duplicates) and skipped
    (the skip reason: "empty", "unsupported_type");
    `failure_type` explains failed: "input:<skip_reason>", "api_error:<status>",
    "transport_exhausted", "budget", "unexpected:<ExceptionType>"."""

    doc_id: str
    key: str | None = None
    pass_name: str = "file"  # tasks.request.FILE_PASS: the per-file pass is the one that has outcomes
    state: DocState
    reason: str | None = None
    failure_type: str | None = None
    attempts: int = 0
    last_error: str | None = None
    output: dict[str, Any] | None = None
    raw_output: str | None = None
    flags: list[dict[str, Any]] = Field(default_factory=list)
    model: str | None = None
    usage: dict[str, int] = Field(default_factory=dict)
    cost_usd: float = 0.0
    request_ids: list[str] = Field(default_factory=list)
    provenance: dict[str, Any] | None = None  # long documents: chunks and per-field offsets
    origin_run: str | None = None  # the run whose API calls produced this result (realtime pass)
    retryable: bool = False  # failed for a cause outside the document: resume retries it
    from_ledger: bool = False

    def to_record(self) -> dict[str, Any]:
        """The ledger record: everything except `from_ledger` (a property of the reader)."""
        return self.model_dump(mode="json", exclude={"from_ledger"})

    def record_json(self) -> bytes:
        """The ledger record as JSON bytes (pydantic's serialiser: ~5x faster than `to_record`
        dumped with json; the keys in field order, not sorted)."""
        return self.model_dump_json(exclude={"from_ledger"}).encode()

    @classmethod
    def from_record(cls, record: dict[str, Any], *, doc_id: str | None = None) -> DocOutcome:
        """An outcome read back from the ledger; no API call was made for it in this run.
        `usage`/`cost_usd` are what the original attempts cost, not this run's spending."""
        data = dict(record)
        if doc_id is not None:
            data["doc_id"] = doc_id
        data["from_ledger"] = True
        return cls.model_validate(data)

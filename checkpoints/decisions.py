"""Human review decisions of a run, append-only: `runs/<run_id>/decisions/<doc key>/<seq>.json`.

A decision says what a person did with one document's result: `accept` it as it is, `correct`
some fields (`values`: field path -> the right value), or `reject` it (optionally with the right
values). Each decision is its own object written once (put-if-absent, the next free sequence
number), with who and when; nothing is ever overwritten, so the history of a document is every
decision in order and the one in force is the last. Readers (reports, exports, `eval`) apply
the decision in force and keep the model's original values beside it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from checkpoints.keys import safe_key, safe_segment
from checkpoints.store import ObjectStore
from docmill.errors import StoreError

SEQ_DIGITS = 6
MAX_SEQ_PROBES = 1000


class Action(StrEnum):
    ACCEPT = "accept"
    CORRECT = "correct"
    REJECT = "reject"


class Decision(BaseModel):
    """One person's decision on one document's result."""

    run_id: str
    doc_id: str
    seq: int = Field(description="1, 2, ... per document; the highest is in force.")
    action: Action
    values: dict[str, Any] = Field(default_factory=dict, description="field path -> the right value")
    note: str | None = None
    by: str = Field(description="Who decided (the reviewer's name).")
    at: float = Field(description="When (unix seconds).")


class ReviewDecisions:
    """The decisions of one run."""

    def __init__(self, store: ObjectStore, run_id: str) -> None:
        self.store = store
        self.run_id = safe_segment(run_id)
        self.prefix = f"runs/{self.run_id}/decisions/"

    def _folder(self, doc_id: str) -> str:
        return f"{self.prefix}{safe_key(doc_id)}/"

    def record(
        self,
        doc_id: str,
        action: Action,
        *,
        by: str,
        values: dict[str, Any] | None = None,
        note: str | None = None,
        at: float | None = None,
    ) -> Decision:
        """Append a decision (never overwrites: a taken sequence number moves to the next)."""
        first = max((d.seq for d in self.history(doc_id)), default=0) + 1
        for seq in range(first, first + MAX_SEQ_PROBES):
            d = Decision(
                run_id=self.run_id,
                doc_id=doc_id,
                seq=seq,
                action=action,
                values=dict(values or {}),
                note=note,
                by=by,
                at=time.time() if at is None else at,
            )
            key = f"{self._folder(doc_id)}{seq:0{SEQ_DIGITS}d}.json"
            if self.store.put_json(key, d.model_dump(mode="json"), if_absent=True):
                return d
        raise StoreError(f"no free decision slot for {doc_id} in run {self.run_id}", key=doc_id)

    def history(self, doc_id: str) -> list[Decision]:
        """Every decision on one document, oldest first."""
        mine = (d for d in self._read(self._folder(doc_id)) if d.doc_id == doc_id)  # not `a/b` under `a`
        return sorted(mine, key=lambda d: d.seq)

    def _read(self, prefix: str) -> Iterator[Decision]:
        for _key, data in self.store.json_objects(prefix):
            yield Decision.model_validate(data)

    def in_force(self) -> dict[str, Decision]:
        """doc id -> the decision in force (the last one recorded for it)."""
        out: dict[str, Decision] = {}
        for d in self._read(self.prefix):
            if d.doc_id not in out or d.seq > out[d.doc_id].seq:
                out[d.doc_id] = d
        return out

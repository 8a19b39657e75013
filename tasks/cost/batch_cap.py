"""The run's cost cap for batch mode: reserve a batch's worst case before submitting it.

Realtime requests reserve their worst case one by one (tasks.api.client.ModelClient); a batch is
submitted whole, so here each request's batch worst case (tasks.cost.worst_case) is reserved
document by document, in inventory order, against what is left under the cap: the documents that
fit are submitted, the rest wait for a resume with a higher cap, and the stop names the worst case
that would have passed it (`Affordable.left_usd`). A document whose result is in the ledger reserves
nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from checkpoints.ledger import ResultsLedger
from tasks.cost.estimate import request_of
from tasks.cost.worst_case import worst_case_usd
from tasks.request import FILE_PASS, file_key, file_params
from tasks.source.document import Document

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore
    from docmill.settings import Settings
    from tasks.recipes import Recipe

Chunk = tuple[str, list[dict[str, Any]]]
Cut = tuple[str, list[dict[str, Any]], int]  # chunk id, the documents taken, the chunk's whole size


@dataclass
class Affordable:
    """What the batches under the cap may carry: the leading `documents` of the pending chunks in
    inventory order (None: all of them, no cap), the worst case reserved for them, and the worst case
    of the documents left out (0: everything fits). It keeps counts, not chunks: `take` cuts the
    chunks as they are read again, so the pass holds one chunk at a time, not the inventory."""

    documents: int | None = None
    reserved_usd: float = 0.0
    left_usd: float = 0.0
    left_documents: int = 0
    chunks: int = 0  # chunks handed out by `take` so far

    @property
    def complete(self) -> bool:
        return self.left_documents == 0

    def take(self, pending: Iterable[Chunk]) -> Iterator[Cut]:
        """`pending` cut to what fits, as (chunk id, the documents taken, the chunk's whole size):
        the leading documents; when any was left out, chunks holding a duplicate wait too (their
        originals may not be sent)."""
        left = self.documents
        for cid, chunk in pending:
            if left is not None and left <= 0:
                return
            taken = chunk if left is None else chunk[:left]
            if left is not None:
                left -= len(taken)
            if not self.complete and any(d.get("duplicate_of") for d in taken):
                continue
            self.chunks += 1
            yield cid, taken, len(chunk)


def doc_worst_case_usd(doc: Any, recipe: Recipe, settings: Settings, ledger: ResultsLedger) -> float:
    """A document's batch worst case; 0 when it sends nothing (skipped, or its result is in the ledger)."""
    request = request_of(recipe, doc, settings)
    if request is None:
        return 0.0
    if ledger.get(FILE_PASS, file_key(recipe, doc, settings.api.model, file_params(settings))) is not None:
        return 0.0
    return worst_case_usd(request, batch=True)


def affordable_chunks(
    pending: Iterable[Chunk], *, recipe: Recipe, settings: Settings, store: ObjectStore, spent_usd: float
) -> Affordable:
    """The leading documents whose batch worst case fits under settings.cost.max_cost_usd after
    `spent_usd` (all of them when there is no cap: `pending` is not read). With a cap, `pending` is
    read once here, one chunk at a time; `Affordable.take` cuts it on the second reading."""
    cap = settings.cost.max_cost_usd
    if cap is None:
        return Affordable()
    ledger = ResultsLedger(store)
    out = Affordable(documents=0)
    for _cid, chunk in pending:
        for d in chunk:
            cost = doc_worst_case_usd(Document.model_validate(d), recipe, settings, ledger)
            if out.left_documents or spent_usd + out.reserved_usd + cost > cap:
                out.left_documents += 1  # this one and every later one wait (inventory order)
                out.left_usd += cost
                continue
            out.reserved_usd += cost
            out.documents = (out.documents or 0) + 1
    return out

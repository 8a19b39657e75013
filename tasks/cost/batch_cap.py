"""The run's cost cap for batch mode: reserve a batch's worst case before submitting it.

Realtime requests reserve their worst case one by one in tasks.api.client.ModelClient (Budget).
A batch is submitted whole, so here the worst case of every request it would carry (input as cache
writes, max_tokens of output, at the model's batch multiplier: docmill.prices.worst_usd) is reserved
document by document, in inventory order, against what is left under the cap: the documents that fit
are submitted (a smaller batch), the rest wait for a resume with a higher cap, and the stop names the
worst case that would have passed the cap (`Affordable.left_usd`). Documents whose key is already in
the results ledger cost nothing and reserve nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from checkpoints.ledger import ResultsLedger
from tasks.cost.estimate import request_of
from tasks.cost.worst_case import worst_case_usd
from tasks.request import FILE_PASS, file_key, file_params

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore
    from docmill.settings import Settings
    from tasks.recipes import Recipe

Chunk = tuple[str, list[dict[str, Any]]]


@dataclass
class Affordable:
    """What a batch under the cap may carry: `chunks` (the last one possibly cut short), the worst case
    reserved for them, and the worst case of the documents left out (0: everything fits)."""

    chunks: list[Chunk] = field(default_factory=list)
    reserved_usd: float = 0.0
    left_usd: float = 0.0
    left_documents: int = 0

    @property
    def complete(self) -> bool:
        return self.left_documents == 0


def doc_worst_case_usd(doc: Any, recipe: Recipe, settings: Settings, ledger: ResultsLedger) -> float:
    """A document's batch worst case; 0 when it sends nothing (skipped, or its result is in the ledger)."""
    request = request_of(recipe, doc, settings)
    if request is None:
        return 0.0
    if ledger.get(FILE_PASS, file_key(recipe, doc, settings.api.model, file_params(settings))) is not None:
        return 0.0
    return worst_case_usd(request, batch=True)


def affordable_chunks(
    pending: list[Chunk], *, recipe: Recipe, settings: Settings, store: ObjectStore, spent_usd: float
) -> Affordable:
    """The leading documents whose batch worst case fits under settings.cost.max_cost_usd after
    `spent_usd` (all of them when there is no cap). Duplicates wait when any document was left out
    (their originals may not be sent)."""
    from tasks.source.inventory import Document

    cap = settings.cost.max_cost_usd
    if cap is None:
        return Affordable(chunks=list(pending))
    ledger = ResultsLedger(store)
    out = Affordable()
    for cid, chunk in pending:
        taken: list[dict[str, Any]] = []
        for d in chunk:
            cost = doc_worst_case_usd(Document.model_validate(d), recipe, settings, ledger)
            if out.left_documents or spent_usd + out.reserved_usd + cost > cap:
                out.left_documents += 1  # this one and every later one wait (inventory order)
                out.left_usd += cost
                continue
            out.reserved_usd += cost
            taken.append(d)
        if taken:
            out.chunks.append((cid, taken))
    if not out.complete:
        out.chunks = [c for c in out.chunks if not any(d.get("duplicate_of") for d in c[1])]
    return out

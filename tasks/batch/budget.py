"""The run's cost cap for batch mode: reserve a batch's projected cost before submitting it.

Realtime requests reserve their worst case one by one in tasks.api.client.ModelClient (Budget).
A batch is submitted whole, so here the worst case of every request it would carry (input as
cache writes, max_tokens of output, at the batch discount) is reserved chunk by chunk; the
chunks that fit are submitted, the rest wait for a resume with a higher cap. Documents whose
key is already in the results ledger cost nothing and reserve nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from checkpoints.ledger import ResultsLedger
from tasks.estimate import request_of, worst_case_usd
from tasks.per_file.requests import FILE_PASS, file_key, file_params

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore
    from docmill.settings import Settings
    from tasks.recipes import Recipe

Chunk = tuple[str, list[dict[str, Any]]]


def chunk_worst_case_usd(docs: list[Any], recipe: Recipe, settings: Settings, ledger: ResultsLedger) -> float:
    total = 0.0
    params = file_params(settings)
    for doc in docs:
        request = request_of(recipe, doc, settings)
        if request is None:
            continue
        if ledger.get(FILE_PASS, file_key(recipe, doc, settings.api.model, params)) is not None:
            continue
        total += worst_case_usd(request, batch=True)
    return total


def affordable_chunks(
    pending: list[Chunk], *, recipe: Recipe, settings: Settings, store: ObjectStore, spent_usd: float
) -> tuple[list[Chunk], float]:
    """The leading chunks whose projected batch cost fits under settings.cost.max_cost_usd,
    and the USD reserved for them. All chunks when there is no cap."""
    from tasks.inventory import Document

    cap = settings.cost.max_cost_usd
    if cap is None:
        return pending, 0.0
    ledger = ResultsLedger(store)
    reserved = 0.0
    out: list[Chunk] = []
    for cid, chunk in pending:
        cost = chunk_worst_case_usd([Document.model_validate(d) for d in chunk], recipe, settings, ledger)
        if spent_usd + reserved + cost > cap:
            # duplicates wait for the resume that sends their originals
            return [c for c in out if not any(d.get("duplicate_of") for d in c[1])], reserved
        reserved += cost
        out.append((cid, chunk))
    return out, reserved

"""What requests can cost at most, read from their own tokens the way the API bills them at most
(input as cache writes, `max_tokens` of output: docmill.prices.worst_usd), and the per-document guard:
a document whose worst case passes `settings.cost.max_doc_cost_usd` (`--max-doc-cost-usd`) goes to
review before anything is paid (`over_guard`, `COST_GUARD`). A 5 MB one-line file or a CSV with a
million columns is held there; an ordinary invoice is far below any sane guard (~$0.01 of $2).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from docmill.prices import price_on, worst_usd
from tasks.api.usage import estimate_input_tokens
from tasks.request import SendAs, file_key, file_params, file_request, media_tokens, send_as, wrap_document

if TYPE_CHECKING:
    from docmill.settings import Settings
    from tasks.recipes import Recipe
    from tasks.source.inventory import Document


COST_GUARD = "cost_guard"  # the needs_review reason


@dataclass(frozen=True)
class Held:
    """A request the guard keeps from being sent (batch mode: from being spooled)."""

    why: str


def request_worst_usd(settings: Settings, request: dict[str, Any], estimate: int | None = None) -> float:
    """What a per-file request and the follow-ups the repair policy allows (its repairs and one
    larger retry after truncation) can cost at most (`estimate`: its input tokens, when known)."""
    calls = 1 + settings.gate.repair_attempts + 1
    out = max(int(request.get("max_tokens") or 0), settings.gate.truncation_max_tokens)
    tokens = estimate_input_tokens(request) if estimate is None else estimate
    one = worst_usd(str(request.get("model")), tokens, out)
    return 0.0 if one is None else calls * one


def long_worst_usd(settings: Settings, model: str, text_tokens: int) -> float:
    """What extracting a long document chunk by chunk in one conversation can cost at most: turn i
    sends at most min(context budget, i chunks of text), plus `max_tokens` out."""
    chunk = settings.context.document_budget_tokens
    turns = max(1, math.ceil(text_tokens / chunk))
    each = [
        worst_usd(model, min(settings.context.budget_tokens, (i + 1) * chunk), settings.api.max_tokens)
        for i in range(turns)
    ]
    return sum(u or 0.0 for u in each)


def over_guard(settings: Settings, worst_usd: float) -> str | None:
    """The review message when `worst_usd` passes the guard, else None."""
    cap = settings.cost.max_doc_cost_usd
    if cap is None or worst_usd <= cap:
        return None
    return (
        f"held before sending: this document could cost up to ${worst_usd:.2f}, over the per-document "
        f"guard of ${cap:.2f} (--max-doc-cost-usd / DOCMILL_COST__MAX_DOC_COST_USD)"
    )


# ---- a realtime chunk's requests in flight (checkpoints.inflight) ------------------------------


def request_worsts(docs: Iterable[Document], recipe: Recipe, settings: Settings) -> dict[str, float]:
    """Per request key of a realtime chunk (one per document that calls; checkpoints.inflight
    records them): what one request of it can cost at most. A document's requests go one after the
    other: the first, its repairs (one answer of at most `max_tokens` and the errors added to the
    input) and the retry after truncation (the same input, a larger `max_tokens`): the dearer of the
    last two bounds each of them. Sized from the document's bytes without reading it (bytes / 2
    tokens: /4 as everywhere, x2 for JSON escapes) plus the prompt, at the dearer of the model and
    its fallback; a long document's turns never pass the context budget."""
    models = [m for m in (settings.api.model, settings.api.fallback_model) if m and price_on(m) is not None]
    out = int(settings.api.max_tokens)
    out_max = max(out, int(settings.gate.truncation_max_tokens))
    params = file_params(settings)
    worst: dict[str, float] = {}
    rest: dict[str, int] = {}  # per model: the request's JSON length besides its document wrapper
    for doc in docs:
        if doc.status != "ok" or doc.duplicate_of:
            continue
        each = []
        wrapper = len(json.dumps(wrap_document(doc.doc_id, str(doc.doc_type), ""), ensure_ascii=False))
        media = send_as(doc, recipe) is not SendAs.TEXT  # pages and pixels, not bytes
        body = min(media_tokens(doc) if media else doc.size // 2, settings.context.budget_tokens)
        for model in models:
            if model not in rest:  # the rest is the same for every document: measured once
                request = file_request(recipe, doc, "", model=model, max_tokens=out)
                rest[model] = len(json.dumps(request, ensure_ascii=False)) - wrapper
            sized = max(1, (rest[model] + wrapper) // 4) + body  # estimate_input_tokens + the document's
            repair = worst_usd(model, sized + out, out) or 0.0  # a repair re-sends a whole answer
            each.append(max(repair, worst_usd(model, sized, out_max) or 0.0))  # or the larger limit
        key = file_key(recipe, doc, settings.api.model, params)
        worst[key] = max(worst.get(key, 0.0), max(each, default=0.0))
    return worst


def in_flight_usd(docs: Iterable[Document], recipe: Recipe, settings: Settings) -> float:
    """What a realtime chunk's requests in flight at once can cost at most: the largest worst cases,
    as many as the concurrency lets fly (all of them without a ceiling). See `request_worsts`."""
    worst = sorted(request_worsts(docs, recipe, settings).values(), reverse=True)
    return sum(worst[: settings.api.concurrency or len(worst)])


# ---- one request ---------------------------------------------------------------------------------


def worst_case_usd(request: dict[str, Any], *, batch: bool) -> float:
    """What one request can cost at most: input as cache writes, max_tokens of output (the same bound
    tasks.api.client.ModelClient reserves before a realtime request); 0 without a price."""
    one_hour = '"ttl": "1h"' in json.dumps(request.get("system"))
    usd = worst_usd(
        str(request["model"]),
        estimate_input_tokens(request),
        int(request["max_tokens"]),
        batch=batch,
        one_hour=one_hour,
    )
    return usd or 0.0

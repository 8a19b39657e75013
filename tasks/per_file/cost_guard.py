"""The per-document cost guard: a document whose worst case would cost more than
`settings.cost.max_doc_cost_usd` (`--max-doc-cost-usd`) goes to review before anything is paid.

The worst case is read from the request's own tokens, the way the API bills them at most: every
attempt the repair policy allows (first + repairs + one larger retry after truncation), each with
its input as 5-minute cache writes and `max_tokens` of output. A long document (split and
extracted chunk by chunk in one conversation) is bounded by its turns: turn i sends at most
min(context budget, i chunks of text), plus `max_tokens` out. A 5 MB one-line file or a CSV with a
million columns is held here; an ordinary invoice is far below any sane guard (~$0.01 of $2).
Callers: tasks.per_file.realtime (before the first call) and tasks.batch.engine (before spooling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from docmill.prices import worst_usd
from tasks.api.usage import estimate_input_tokens

if TYPE_CHECKING:
    from docmill.settings import Settings

COST_GUARD = "cost_guard"  # the needs_review reason


@dataclass(frozen=True)
class Held:
    """A request the guard keeps from being sent (batch mode: from being spooled)."""

    why: str


def request_worst_usd(settings: Settings, request: dict[str, Any], estimate: int | None = None) -> float:
    """What a per-file request and the follow-ups the repair policy allows can cost at most
    (`estimate`: the request's input-token estimate, when the caller has it)."""
    calls = 1 + settings.gate.repair_attempts + 1
    out = max(int(request.get("max_tokens") or 0), settings.gate.truncation_max_tokens)
    tokens = estimate_input_tokens(request) if estimate is None else estimate
    one = worst_usd(str(request.get("model")), tokens, out)
    return 0.0 if one is None else calls * one


def long_worst_usd(settings: Settings, model: str, text_tokens: int) -> float:
    """What extracting a long document chunk by chunk can cost at most (see the module docstring)."""
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

"""Documents batch mode does not put in a batch: a PDF that must go in page ranges (more pages,
bytes or tokens than one request takes; tasks.request) is extracted realtime through the
long-document path (tasks.per_file.longdoc), its cost guard and failures the same as in realtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from docmill.errors import ApiCallError, BudgetExhausted, InputError
from tasks.cost.worst_case import long_worst_usd, over_guard
from tasks.per_file.longdoc import review_long
from tasks.per_file.outcome import DocOutcome
from tasks.per_file.settle import failed_outcome, hold_for_cost
from tasks.request import load_payload, long_tokens

if TYPE_CHECKING:
    from tasks.batch.items import WorkItem
    from tasks.per_file.settle import Pass
    from tasks.source.document import Document


def long_outcome(p: Pass, doc: Document, item: WorkItem) -> DocOutcome:
    """The terminal outcome of a long document extracted realtime in batch mode."""
    key = item.custom_id
    try:
        payload = load_payload(doc, p.recipe, p.settings)
        worst = long_worst_usd(p.settings, p.model, long_tokens(doc, p.recipe, payload.text))
        why = over_guard(p.settings, worst)
        if why is not None:
            return hold_for_cost(p, doc, key, why)
        return review_long(p, doc, key, payload)
    except InputError as e:
        return failed_outcome(doc, key, "input:unreadable", e.one_line())
    except BudgetExhausted as e:
        return failed_outcome(doc, key, "budget", e.one_line())
    except ApiCallError as e:
        outcome = failed_outcome(doc, key, e.failure_type, e.last_error or e.message)
        outcome.retryable = True
        return outcome

"""What each document yielded, shaped for people (a leaf): the state a report shows (skipped inputs
apart from failures), the fields with their evidence and offsets, the link to the stored result,
and the review decision in force. report.html and report.md render these records. Imports only
leaves: `tasks.provenance` (each value's support class) and the states of `summary`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TypedDict

from tasks.provenance import support_of
from tasks.reporting.summary import STATES

# Inputs with nothing to extract are "skipped", not failures (`DocState.SKIPPED`, reason = the skip
# reason; records from before that state say failed "input:<reason>" and are shown the same way).
# Unreadable, binary, undecodable or oversized files stay "failed": they should have had text.
SKIP_REASONS = {
    "empty": "empty file (no bytes or no visible text), e.g. a marker file such as py.typed",
    "unsupported_type": "a file type this recipe does not take",
}
REVIEW_REASONS = {
    "conflict": "succeeded, but disagrees with another document on a key field (integration pass)",
    "sample": "succeeded; drawn at random for a spot check (`docmill eval --sample`)",
}
MAX_CELL = 300


class FieldView(TypedDict):
    """One extracted field of a document: value, evidence and where the evidence sits."""

    name: str
    value: Any
    evidence: str | None
    start: int | None
    end: int | None
    page: int | None  # the page (slide, sheet) of the evidence, where the document has pages
    verified: bool  # False: on a page without a text layer (a scan), not checkable by code
    original: Any  # the model's value when a reviewer corrected it, else None
    corrected: bool
    support: str  # verified, verified_text, unverified, missing or no_evidence (tasks.provenance)


class DocView(TypedDict):
    doc_id: str
    state: str  # one of STATES
    why: str  # reason, failure type or skip reason; "" when succeeded
    detail: str  # the skip explanation or the last error
    fields: list[FieldView]
    items: dict[str, int]  # list fields -> their length
    result_key: str | None  # the stored result (results ledger), store-relative
    responses_key: str | None  # the folder of its raw API responses (realtime), store-relative
    review: dict[str, Any] | None  # the decision in force (tasks.review.ReviewMark)
    note: str  # how it was read when that matters: sent as a PDF / image, a guessed encoding


def skip_reason(outcome: dict[str, Any]) -> str | None:
    """The inventory's skip reason when the document was set aside on purpose, else None."""
    if outcome.get("state") == "skipped":
        return str(outcome.get("reason") or outcome.get("failure_type") or "skipped").removeprefix("input:")
    ft = str(outcome.get("failure_type") or "")
    reason = ft.removeprefix("input:")
    return reason if ft.startswith("input:") and reason in SKIP_REASONS else None


def display_state(outcome: dict[str, Any]) -> str:
    """succeeded / needs_review / failed, or skipped for an input set aside on purpose."""
    return "skipped" if skip_reason(outcome) is not None else str(outcome.get("state"))


def display_counts(outcomes: list[dict[str, Any]]) -> dict[str, int]:
    counts = dict.fromkeys(STATES, 0)
    counts.update(Counter(display_state(o) for o in outcomes))
    return counts


def evidence_places(outcome: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(field, where its evidence sits) from the gate (`$.total.evidence` -> `total`) or a long
    document's merge (`total`, `line_items[0]`)."""
    for path, where in (((outcome.get("provenance") or {}).get("fields")) or {}).items():
        if isinstance(where, dict):
            yield path.removeprefix("$.").removesuffix(".evidence"), where


def where_text(f: FieldView) -> str:
    """Where a field's evidence sits, for people: `p. 2, chars 10–40`, or `p. 1, unverified (no text
    layer)` for a scanned page; "" when nothing is known."""
    parts = [f"p. {f['page']}"] if f.get("page") is not None else []
    if f.get("start") is not None:
        parts.append(f"chars {f['start']}–{f['end']}")
    if not f.get("verified", True):
        parts.append("unverified (no text layer)")
    return ", ".join(parts)


def _short(v: Any) -> Any:
    return v[:MAX_CELL] + "…" if isinstance(v, str) and len(v) > MAX_CELL else v


def field_views(outcome: dict[str, Any]) -> tuple[list[FieldView], dict[str, int]]:
    """Scalar and `{value, evidence}` fields of the output; list fields counted."""
    output = outcome.get("output") or {}
    original = outcome.get("original_output") or {}
    corrections = ((outcome.get("review") or {}).get("corrections")) or {}
    offsets: dict[str, dict[str, Any]] = {}  # a field's first place wins
    for name, where in evidence_places(outcome):
        offsets.setdefault(name, where)
    views: list[FieldView] = []
    items: dict[str, int] = {}
    for name, node in output.items():
        if isinstance(node, list):
            items[name] = len(node)
            continue
        if isinstance(node, dict) and "value" not in node:
            continue
        value = node.get("value") if isinstance(node, dict) else node
        evidence = node.get("evidence") if isinstance(node, dict) else None
        if name in corrections and isinstance(original.get(name), dict):
            evidence = original[name].get("evidence")  # the model's excerpt, shown beside the correction
        where = offsets.get(name) or {}
        views.append(
            {
                "name": name,
                "value": _short(value),
                "evidence": _short(evidence) if evidence else None,
                "start": where.get("start"),
                "end": where.get("end"),
                "page": where.get("page"),
                "verified": where.get("verified") is not False,
                "original": corrections[name]["from"] if name in corrections else None,
                "corrected": name in corrections,
                "support": support_of(outcome, name),
            }
        )
    return views, items


def doc_view(outcome: dict[str, Any], *, realtime: bool = False) -> DocView:
    """One document as the reports show it; `realtime` runs also link the raw responses
    (`responses/<pass>/<key>/`, one file per attempt, persisted as they arrived)."""
    state = display_state(outcome)
    skip = skip_reason(outcome)
    fields, items = field_views(outcome)
    key = outcome.get("key")
    why = skip or outcome.get("reason") or outcome.get("failure_type") or ""
    if outcome.get("retryable"):
        why = f"{why} (retryable)"  # transient: a resume retries it, unlike a final failure
    detail = SKIP_REASONS.get(skip or "", "") if skip else str(outcome.get("last_error") or "")
    return {
        "doc_id": outcome["doc_id"],
        "state": state,
        "why": "" if state == "succeeded" and not outcome.get("reason") else str(why),
        "detail": detail[:MAX_CELL],
        "fields": fields,
        "items": items,
        "result_key": f"results/{outcome.get('pass_name') or 'file'}/{key}.json"
        if key and outcome.get("state") != "failed"
        else None,
        "responses_key": f"responses/{outcome.get('pass_name') or 'file'}/{key}/"
        if key and realtime and outcome.get("request_ids")
        else None,
        "review": outcome.get("review"),
        "note": read_note(outcome),
    }


def read_note(outcome: dict[str, Any]) -> str:
    """`sent as pdf`, `read as cp1252 (guessed)`: how a document was read, when not plain text."""
    prov = outcome.get("provenance") or {}
    notes = [f"sent as {prov['sent_as']}"] if prov.get("sent_as") else []
    notes += [f"read as {prov['encoding']}"] if prov.get("encoding") else []
    return ", ".join(notes)


@dataclass
class FieldStats:
    """One field over the listed documents: how many state it, leave it empty, carry a correction
    (of those stating it), by support class, and the first stated value with evidence (doc id, field)."""

    stated: int = 0
    empty: int = 0
    corrected: int = 0
    support: Counter[str] = field(default_factory=Counter)
    example: tuple[str, FieldView] | None = None


def field_stats(views: list[DocView]) -> dict[str, FieldStats]:
    """Every field's `FieldStats`, in the order the fields are first seen."""
    stats: dict[str, FieldStats] = {}
    for v in views:
        for f in v["fields"]:
            if (s := stats.get(f["name"])) is None:
                s = stats[f["name"]] = FieldStats()
            s.support[f["support"]] += 1
            if f["value"] is None:
                s.empty += 1
                continue
            s.stated += 1
            s.corrected += f["corrected"]
            if f["evidence"] and s.example is None:
                s.example = (v["doc_id"], f)
    return stats


# The per-document table's columns of the built-in recipes (a list field shows its length);
# any other recipe shows its key fields, then its first other fields.
RECIPE_COLUMNS: dict[str, tuple[str, ...]] = {
    "invoices": ("invoice_number", "vendor_name", "invoice_date", "total", "currency"),
    "code-review": ("findings", "summary"),
}


def key_columns(recipe: str, key_fields: tuple[str, ...], views: list[DocView], limit: int = 5) -> list[str]:
    """The columns of the per-document table (see RECIPE_COLUMNS)."""
    if recipe in RECIPE_COLUMNS:
        return list(RECIPE_COLUMNS[recipe])
    cols = list(key_fields)[:limit]
    for v in views:
        for f in v["fields"]:
            if len(cols) >= limit:
                return cols
            if f["name"] not in cols:
                cols.append(f["name"])
        if v["fields"]:
            break
    return cols


class ReportExtras(TypedDict, total=False):
    """What the reports need beyond outcomes, integration, costs and the queue (`write_report`
    gathers it): the recipe's key fields, the run's batch records (the batch timeline), and how
    many review decisions are in force."""

    key_fields: tuple[str, ...]
    batches: list[dict[str, Any]]
    decided: int
    generated_at: float
    spread: Any  # tasks.reporting.spread.SpreadSummary | None: shards and workers
    deadline: Any  # tasks.reporting.spread.DeadlineSummary | None: what went batch, what realtime
    pages: Any  # list[tasks.reporting.pages.PageView]: cited pages with their evidence boxes
    unlisted: int  # succeeded documents reused from the ledger left out of the per-document tables
    views: list[DocView]  # the listed outcomes as the reports show them (`listed_views`), made once for both


def listed_views(
    manifest: dict[str, Any], listed: list[dict[str, Any]], extra: ReportExtras
) -> list[DocView]:
    """The listed outcomes as DocViews: those `write_report` made once for report.md and
    report.html (`extra["views"]`), else made here."""
    views = extra.get("views")
    if views is not None:
        return views
    return [doc_view(o, realtime=manifest.get("mode") == "realtime") for o in listed]


def unchanged(outcome: dict[str, Any]) -> bool:
    """A document this run did not touch: succeeded from a result an earlier run stored."""
    return bool(outcome.get("from_ledger")) and outcome.get("state") == "succeeded"


def listed(outcomes: list[dict[str, Any]], most_unchanged: int) -> tuple[list[dict[str, Any]], int]:
    """(the outcomes the per-document tables list, how many are left out). A nightly over a large
    archive lists what changed: with more than `most_unchanged` unchanged documents (`unchanged`),
    none of them is listed; they stay in the counts and in every export. Otherwise all are listed."""
    if sum(1 for o in outcomes if unchanged(o)) <= most_unchanged:
        return outcomes, 0
    shown = [o for o in outcomes if not unchanged(o)]
    return shown, len(outcomes) - len(shown)


def not_succeeded(views: list[DocView]) -> list[tuple[str, str, list[DocView]]]:
    """(state, reason with its explanation for a skip, documents) of every document that did not
    succeed, failures first, then the largest groups."""
    groups: dict[tuple[str, str], list[DocView]] = defaultdict(list)
    for v in views:
        if v["state"] != "succeeded":
            groups[(v["state"], v["why"] or "-")].append(v)
    ordered = sorted(groups.items(), key=lambda kv: (kv[0][0] == "skipped", -len(kv[1])))
    return [
        (state, why + (f" — {SKIP_REASONS[why]}" if state == "skipped" and why in SKIP_REASONS else ""), docs)
        for (state, why), docs in ordered
    ]


def queue_reasons(review: list[dict[str, Any]]) -> Counter[str]:
    """The review queue's items by reason (an item queued for two reasons counts under each)."""
    return Counter(r for item in review for r in str(item.get("reason") or "-").split(";"))


def queue_parts(review: list[dict[str, Any]], counts: dict[str, int]) -> list[str]:
    """What the review queue holds: the documents that need review, and each other reason's items."""
    reasons = queue_reasons(review)
    parts = [
        f"{counts.get('needs_review', 0)} document(s) need review (the gate could not accept their answer)"
    ]
    return parts + [f"{n} {REVIEW_REASONS[r]}" for r, n in sorted(reasons.items()) if r in REVIEW_REASONS]

"""The run report as one self-contained HTML page: inline CSS, inline SVG charts and one small
inline script that pages long tables; no external resource (it opens from a bucket, a mail
attachment or file://, offline).

The sections are report.md's (tasks.reporting.markdown), with per-document evidence and offsets;
numbers carry element ids (`count-succeeded`, `cost-total`, ...) so tests can find them in the
rendered DOM. The markup is in templates/report.html.j2 and the section templates beside it; this
module shapes what they show.
"""

from __future__ import annotations

import time
from typing import Any

from markupsafe import Markup

from docmill.collector import relaxed_gc
from tasks.provenance import SUPPORT_ORDER
from tasks.records import IntegrationResult
from tasks.reporting.findings import findings_of, has_findings
from tasks.reporting.html_sections import (
    DOCS_JS,
    documents_section,
    failures_section,
    fields_section,
    findings_section,
    integration_output_section,
    review_section,
)
from tasks.reporting.htmlkit import CSS, PAGER_JS, Part, paged_table, render
from tasks.reporting.pages import PAGES_CSS, PAGES_JS, pages_data, pages_rows
from tasks.reporting.results import ReportExtras, display_counts, key_columns, listed_views, queue_reasons
from tasks.reporting.spread import deadline_lines, spread_lines
from tasks.reporting.summary import cache_line, integration_state, stop
from tasks.reporting.timeline import run_timeline, span_texts, timeline_svg

PAGE_ROWS = 10  # documents a page of "Pages with evidence" shows
STATE_CLASS = {"succeeded": "ok", "needs_review": "warn", "failed": "bad", "skipped": "skip"}


def _costs(costs: dict[str, Any]) -> dict[str, Any]:
    top = sorted((costs.get("by_doc") or {}).items(), key=lambda kv: -kv[1])[:5]
    return {
        "entries": costs.get("entries", 0),
        "cache": cache_line(costs).capitalize(),
        "breakdown": [
            [(f"{label} {k}", False), (f"${v:.4f}", True)]
            for group, label in (("by_pass", "pass"), ("by_model", "model"))
            for k, v in sorted((costs.get(group) or {}).items())
        ],
        "tokens": [[(k, False), (f"{v:,}", True)] for k, v in (costs.get("tokens") or {}).items() if v],
        "docs": [[(d, False), (f"${u:.4f}", True)] for d, u in top],
    }


def _checks(integration: IntegrationResult | None) -> dict[str, Any] | None:
    """The code-built checks: conflicts across documents and coverage gaps."""
    if not integration:
        return None
    checks = integration.get("checks") or {}
    conflicts = [
        (
            f"{c.get('key_field')} {c.get('key')}",
            c.get("field"),
            [(v.get("value"), v.get("doc_id")) for v in c["values"]],
        )
        for c in checks.get("conflicts") or []
    ]
    gaps = [
        [(g.get("doc_id") or g.get("field"), False), (g.get("reason"), False)]
        for g in checks.get("coverage_gaps") or []
    ]
    return {"conflicts": conflicts, "gaps": gaps}


def _results(
    recipe: str, views: list[Any], outcomes: list[dict[str, Any]], extra: ReportExtras
) -> list[Part]:
    """The recipe's own view and the per-document table: findings first for a review recipe (they
    are the results), the documents first for an extraction recipe (fields with evidence after).
    Parts in order, not joined: the documents' part of a large report is megabytes."""
    columns = key_columns(recipe, tuple(extra.get("key_fields") or ()), views)
    documents = documents_section(views, columns, int(extra.get("unlisted") or 0))
    if has_findings(outcomes):
        return [*findings_section(recipe, findings_of(outcomes)), *documents]
    return [*documents, fields_section(views)]


def _pages(views: list[Any] | None) -> dict[str, Any] | None:
    """Pages with evidence: each PDF or image page a value cites, evidence boxed and labelled
    (tasks.reporting.pages), ten documents a page, filtered by least support class."""
    if not views:
        return None
    data = pages_data(views)
    shown = set(list(dict.fromkeys(v.doc_id for v in views))[:PAGE_ROWS])  # the first page's documents
    first = pages_rows([v for v in views if v.doc_id in shown])
    return {
        "count": len(data),
        "css": PAGES_CSS,
        "table": paged_table(
            "pages", ["document", "pages"], first, choices=SUPPORT_ORDER, size=PAGE_ROWS, data_rows=data
        ),
    }


def _queue_why(review: list[dict[str, Any]]) -> str:
    """What the review queue holds, by reason (`4 conflict`): why it can hold more than the documents
    that need review (a succeeded document in a conflict is queued too)."""
    return ", ".join(f"{n} {r}" for r, n in sorted(queue_reasons(review).items(), key=lambda kv: -kv[1]))


def html_report(
    manifest: dict[str, Any],
    outcomes: list[dict[str, Any]],
    integration: IntegrationResult | None,
    costs: dict[str, Any],
    review: list[dict[str, Any]],
    entries: list[dict[str, Any]],
    *,
    extra: ReportExtras | None = None,
    listed: list[dict[str, Any]] | None = None,
) -> str:
    """The whole page. `outcomes` carry any review decisions already (tasks.review.apply_decisions);
    `listed`: the outcomes the per-document sections show (default: all). Rendered under relaxed
    collections (docmill.collector): shaping the rows for the templates makes many small objects,
    and each full collection they set off walks every outcome of the run again."""
    extra = extra or {}
    with relaxed_gc():
        counts = display_counts(outcomes)
        shown = outcomes if listed is None else listed  # the rest: unchanged, in the exports (write_report)
        views = listed_views(manifest, shown, extra)
        timeline = run_timeline(manifest, entries, extra.get("batches"))
        generated = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(extra.get("generated_at") or time.time()))
        spread, deadline = extra.get("spread"), extra.get("deadline")
        pages = extra.get("pages")
        return render(
            "report.html.j2",
            m={k: manifest.get(k) for k in ("run_id", "source", "recipe", "recipe_version", "mode", "phase")},
            reused=sum(1 for o in outcomes if o.get("from_ledger")),
            generated=generated,
            span=span_texts(timeline),
            stopped=stop(manifest),
            total=len(outcomes),
            counts=list(counts.items()),
            state_class=STATE_CLASS,
            usd=costs.get("usd", 0.0),
            review_count=len(review),
            review_why=_queue_why(review),
            integration=integration_state(integration),
            spread=spread_lines(spread) if spread is not None else None,
            deadline=deadline_lines(deadline) if deadline is not None else None,
            timeline_unit="documents" if timeline["mode"] == "realtime" else "batch requests",
            timeline_series="answered" if timeline["mode"] == "realtime" else "ended, ingested",
            timeline=Markup(timeline_svg(timeline)),
            integration_output=integration_output_section(integration),
            results=_results(str(manifest.get("recipe") or ""), views, outcomes, extra),
            pages=_pages(pages),
            checks=_checks(integration),
            failures=failures_section(views),
            review=review_section(review, counts, int(extra.get("decided") or 0)),
            costs=_costs(costs),
            css=CSS,
            scripts=(PAGES_JS if pages else "") + DOCS_JS + PAGER_JS,
        )

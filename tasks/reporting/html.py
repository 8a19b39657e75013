"""The run report as one self-contained HTML page: inline CSS, inline SVG charts and one small
inline script that pages long tables; no external resource (it opens from a bucket, a mail
attachment or file://, offline).

Sections: when the run started and ended, counts per state (skipped inputs apart from failures),
the timeline (submitted, in flight, ended, ingested), the results (a per-document table with
evidence and offsets; the recipe's own view: findings by file and severity for code-review,
fields with evidence for invoices), the integration pass's key findings and flags, conflicts and
coverage gaps, failures and skipped inputs with their reasons, the review queue explained, cost.
Numbers carry element ids (`count-succeeded`, `cost-total`, ...) so tests can find them in the
rendered DOM.
"""

from __future__ import annotations

import time
from typing import Any

from tasks.provenance import SUPPORT_ORDER
from tasks.records import IntegrationResult
from tasks.reporting.findings import findings_of, has_findings
from tasks.reporting.html_sections import (
    documents_section,
    failures_section,
    fields_section,
    findings_section,
    integration_output_section,
    review_section,
)
from tasks.reporting.htmlkit import CSS, PAGER_JS, e, paged_table, table, td
from tasks.reporting.pages import PAGES_CSS, PAGES_JS, pages_data, pages_rows
from tasks.reporting.results import ReportExtras, display_counts, doc_view, key_columns
from tasks.reporting.spread import html_section
from tasks.reporting.summary import cache_line, stop
from tasks.reporting.timeline import Timeline, run_span, run_timeline, span_text, timeline_svg

PAGE_ROWS = 10  # documents a page of "Pages with evidence" shows
STATE_CLASS = {"succeeded": "ok", "needs_review": "warn", "failed": "bad", "skipped": "skip"}
_e, _td, _table = e, td, table


def _when(manifest: dict[str, Any], t: Timeline) -> str:
    start, end = run_span(manifest, t)
    fmt = "%Y-%m-%d %H:%M:%SZ"
    s = time.strftime(fmt, time.gmtime(start)) if start else "?"
    f = time.strftime(fmt, time.gmtime(end)) if end else "?"
    took = span_text(end - start) if start and end and end >= start else "?"
    return (
        f'started <b id="started">{s}</b> · ended <b id="ended">{f}</b> · '
        f'duration <b id="duration">{took}</b>'
    )


def _costs(costs: dict[str, Any]) -> str:
    rows = []
    for group, label in (("by_pass", "pass"), ("by_model", "model")):
        for k, v in sorted((costs.get(group) or {}).items()):
            rows.append([_td(f"{label} {k}"), _td(f"${v:.4f}", num=True)])
    tokens = [[_td(k), _td(f"{v:,}", num=True)] for k, v in (costs.get("tokens") or {}).items() if v]
    top = sorted((costs.get("by_doc") or {}).items(), key=lambda kv: -kv[1])[:5]
    docs = [[_td(f"<code>{_e(d)}</code>", raw=True), _td(f"${u:.4f}", num=True)] for d, u in top]
    cached = costs.get("tokens") or {}
    cache = (
        f'<p id="cost-cache">{_e(cache_line(costs)).capitalize()}.</p>'
        if cached.get("cache_read_input_tokens") or cached.get("cache_creation_input_tokens")
        else ""
    )
    return (
        f'<p>Total <b id="cost-total">${costs.get("usd", 0.0):.4f}</b> over '
        f'<span id="cost-entries">{costs.get("entries", 0)}</span> billed answers '
        "(every attempt: retries, repairs, batch items at 50 %, compaction iterations).</p>"
        + cache
        + _table(["breakdown", "USD"], rows)
        + _table(["tokens", "count"], tokens, "No tokens billed.")
        + "<p class='small muted'>Most expensive documents:</p>"
        + _table(["document", "USD"], docs, "No document billed.")
    )


def _integration(integration: IntegrationResult | None) -> str:
    if not integration:
        return '<p class="muted">The integration pass did not run.</p>'
    checks = integration.get("checks") or {}
    conflicts = [
        [
            _td(f"{c.get('key_field')} {c.get('key')}"),
            _td(c.get("field")),
            _td(
                "<br>".join(
                    f"<code>{_e(v.get('value'))}</code> in <code>{_e(v.get('doc_id'))}</code>"
                    for v in c["values"]
                ),
                raw=True,
            ),
        ]
        for c in checks.get("conflicts") or []
    ]
    gaps = [
        [_td(g.get("doc_id") or g.get("field")), _td(g.get("reason"))]
        for g in checks.get("coverage_gaps") or []
    ]
    return (
        f'<h2>Conflicts across documents (<span id="conflicts">{len(conflicts)}</span>)</h2>'
        + _table(["key", "field", "values"], conflicts, "No conflicts found.")
        + f"<h2>Coverage gaps ({len(gaps)})</h2>"
        + _table(["document or field", "reason"], gaps, "No gaps.")
    )


def _unlisted(n: int) -> str:
    """Where the documents left out of the tables are (nothing when none is)."""
    if not n:
        return ""
    return (
        f'<p id="unlisted"><b>{n}</b> documents unchanged since an earlier run (succeeded, results reused '
        "from the ledger) are counted above but not listed here or under the fields; every document is in "
        '<a href="exports/results.csv">exports/results.csv</a> and '
        '<a href="exports/results.jsonl">results.jsonl</a>.</p>'
    )


def _results(recipe: str, views: list[Any], outcomes: list[dict[str, Any]], extra: ReportExtras) -> str:
    """The recipe's own view and the per-document table: findings first for a review recipe (they
    are the results), the documents first for an extraction recipe (fields with evidence after)."""
    columns = key_columns(recipe, tuple(extra.get("key_fields") or ()), views)
    documents = f"<h2>Documents ({len(views)})</h2>" + _unlisted(int(extra.get("unlisted") or 0))
    documents += documents_section(views, columns)
    if has_findings(outcomes):
        return (
            f"<h2>Findings by file and severity ({e(recipe)})</h2>"
            + findings_section(findings_of(outcomes))
            + documents
        )
    return documents + "<h2>Fields with evidence</h2>" + fields_section(views)


def _integration_state(integration: IntegrationResult | None) -> str:
    """The integration pass's state line (id `integration-status`), and its problems."""
    if not integration:
        return ""
    status = str(integration.get("status") or "complete")
    bad = status in ("partial", "failed")
    problems = "".join(
        f"<li>{e(p.get('problem'))}: {e(len(p.get('doc_ids') or []))} document(s) "
        f"{e(', '.join((p.get('doc_ids') or [])[:5]))} — {e('; '.join(p.get('errors') or [p.get('error') or ''])[:300])}</li>"
        for p in integration.get("problems") or []
    )
    style = ' style="color:#cf222e"' if bad else ' class="muted"'
    return (
        f'<p{style}>Integration: <b id="integration-status">{e(status)}</b> '
        f"({e(integration.get('mode', 'full'))}, {e(integration.get('calls', 0))} model call(s) this run)"
        + (
            " — conflicts, duplicates and gaps are code-built and complete; the next run asks again."
            if bad
            else ""
        )
        + "</p>"
        + (f"<ul>{problems}</ul>" if problems else "")
    )


def _pages(views: list[Any] | None) -> str:
    """Pages with evidence: each PDF or image page a value cites, evidence boxed and labelled
    (tasks.reporting.pages), ten documents a page, filtered by least support class."""
    if not views:
        return ""
    data = pages_data(views)
    shown = set(list(dict.fromkeys(v.doc_id for v in views))[:PAGE_ROWS])  # the first page's documents
    first = pages_rows([v for v in views if v.doc_id in shown], e)
    return (
        f'<h2>Pages with evidence (<span id="pages-docs">{len(data)}</span> documents)</h2>{PAGES_CSS}'
        '<p class="small muted">Green boxes: the value\'s evidence where the text layer states it. A page '
        "without a text layer shows the page the model cited, and no box. Images are files beside this "
        "report (<code>pages/</code>), loaded when shown. A text, e-mail or Office document shows each "
        "value's evidence highlighted in the text around it.</p>"
        + paged_table(
            "pages", ["document", "pages"], first, choices=SUPPORT_ORDER, size=PAGE_ROWS, data_rows=data
        )
    )


def _queue_why(review: list[dict[str, Any]]) -> str:
    """What the review queue holds, by reason (`4 conflict`): why it can hold more than the documents
    that need review (a succeeded document in a conflict is queued too)."""
    reasons: dict[str, int] = {}
    for item in review:
        for r in str(item.get("reason") or "-").split(";"):
            reasons[r] = reasons.get(r, 0) + 1
    return ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda kv: -kv[1]))


def _stopped(manifest: dict[str, Any]) -> str:
    """Why a stopped run stopped and the command that continues it (nothing for other phases)."""
    note = stop(manifest)
    if note is None:
        return ""
    after = " once the cause is fixed" if note.get("kind") == "breaker" else ""
    return (
        f'<p id="stopped"><b>The run stopped before it was done.</b> {_e(note.get("error"))}<br>'
        f"Everything answered so far is kept; <code>{_e(note.get('continue'))}</code> continues the run{after}.</p>\n"
    )


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
    `listed`: the outcomes the per-document sections show (default: all)."""
    extra = extra or {}
    counts = display_counts(outcomes)
    shown = outcomes if listed is None else listed  # the rest: unchanged, in the exports (write_report)
    views = [doc_view(o, realtime=manifest.get("mode") == "realtime") for o in shown]
    timeline = run_timeline(manifest, entries, extra.get("batches"))
    run_id = _e(manifest.get("run_id"))
    cards = "".join(
        f'<div class="card {STATE_CLASS[k]}"><div class="n" id="count-{k}">{v}</div><div class="l">{_e(k)}</div></div>'
        for k, v in counts.items()
    )
    cards = (
        f'<div class="card"><div class="n" id="count-total">{len(outcomes)}</div><div class="l">documents</div></div>'
        + cards
        + f'<div class="card"><div class="n" id="cost-card">${costs.get("usd", 0.0):.2f}</div><div class="l">cost</div></div>'
        + f'<div class="card"><div class="n" id="review-count">{len(review)}</div><div class="l">in review queue</div>'
        + (f'<div class="small muted" id="review-why">{_e(_queue_why(review))}</div>' if review else "")
        + "</div>"
    )
    generated = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(extra.get("generated_at") or time.time()))
    reused = sum(1 for o in outcomes if o.get("from_ledger"))
    unit = "documents" if timeline["mode"] == "realtime" else "batch requests"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>docmill run {run_id}</title>
<meta name="viewport" content="width=device-width,initial-scale=1"><style>{CSS}</style></head>
<body><main>
<h1>docmill run <code>{run_id}</code></h1>
<div class="meta">source <code>{_e(manifest.get("source"))}</code> · recipe <code>{_e(manifest.get("recipe"))}</code>
v{_e(manifest.get("recipe_version"))} · mode {_e(manifest.get("mode"))} · phase <b id="phase">{_e(manifest.get("phase"))}</b>
· {reused} reused from the ledger · generated {generated}<br>{_when(manifest, timeline)}</div>
{_stopped(manifest)}<div class="cards">{cards}</div>
{_integration_state(integration)}
{html_section(extra.get("spread"), extra.get("deadline"))}
<h2>Timeline ({unit}: submitted, in flight, {"answered" if timeline["mode"] == "realtime" else "ended, ingested"})</h2>
{timeline_svg(timeline)}
<h2>Integration: key findings and flags</h2>{integration_output_section(integration)}
{_results(str(manifest.get("recipe") or ""), views, outcomes, extra)}
{_pages(extra.get("pages"))}
{_integration(integration)}
<h2>Not succeeded: failures and skipped inputs</h2>{failures_section(views)}
<h2>Review queue (<span id="review-total">{len(review)}</span>)</h2>{review_section(review, counts, int(extra.get("decided") or 0))}
<h2>Cost</h2>{_costs(costs)}
</main><script>{PAGES_JS if extra.get("pages") else ""}{PAGER_JS}</script></body></html>
"""

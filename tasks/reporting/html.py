"""The run report as one self-contained HTML page: inline CSS, an inline SVG throughput chart,
no script, no external resource (it opens from a bucket, a mail attachment or file://).

Sections: summary, counts per state, cost breakdown, throughput over time (documents answered,
from the cost ledger's timestamps), failures grouped by type with examples, the review queue,
conflicts and coverage gaps from the integration pass. Numbers carry element ids (`count-succeeded`,
`cost-total`, ...) so tests can find them in the rendered DOM.
"""

from __future__ import annotations

import time
from collections import defaultdict
from html import escape
from typing import Any

from tasks.records import IntegrationResult
from tasks.reporting.summary import reason_label, summarize

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
main{max-width:1100px;margin:0 auto;padding:24px 32px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde1e8;padding-bottom:4px}
.meta{color:#5b6478;margin-bottom:16px} code{background:#eef0f4;padding:1px 4px;border-radius:3px;font-size:12.5px}
.cards{display:flex;gap:12px;flex-wrap:wrap}
.card{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:12px 16px;min-width:130px}
.card .n{font-size:24px;font-weight:600} .card .l{color:#5b6478;font-size:12px;text-transform:uppercase}
.ok .n{color:#1a7f37} .warn .n{color:#9a6700} .bad .n{color:#cf222e} .skip .n{color:#57606a}
table{border-collapse:collapse;background:#fff;border:1px solid #dde1e8;width:100%;margin:6px 0}
th,td{text-align:left;padding:5px 10px;border-bottom:1px solid #eceef2;vertical-align:top}
th{background:#f0f2f5;font-weight:600} td.num{text-align:right;font-variant-numeric:tabular-nums}
.muted{color:#5b6478} .small{font-size:12px} svg{background:#fff;border:1px solid #dde1e8;border-radius:8px}
"""

STATE_CLASS = {"succeeded": "ok", "needs_review": "warn", "failed": "bad", "skipped": "skip"}


def _e(v: Any) -> str:
    return escape("" if v is None else str(v))


def _table(head: list[str], rows: list[list[str]], empty: str = "None.") -> str:
    if not rows:
        return f'<p class="muted">{_e(empty)}</p>'
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(cells) + "</tr>" for cells in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _td(v: Any, *, num: bool = False, ident: str | None = None, raw: bool = False) -> str:
    attrs = (' class="num"' if num else "") + (f' id="{ident}"' if ident else "")
    return f"<td{attrs}>{v if raw else _e(v)}</td>"


def completion_times(entries: list[dict[str, Any]]) -> list[float]:
    """When each document got its last per-file answer (unix seconds), sorted."""
    last: dict[str, float] = {}
    for e in entries:
        at = e.get("at")
        if at is None or e.get("pass_name") == "integration":
            continue
        last[e["doc_id"]] = max(last.get(e["doc_id"], 0.0), float(at))
    return sorted(last.values())


def _secs(x: float) -> str:
    return f"{x:.1f}s" if x < 60 else (f"{x / 60:.1f}m" if x < 3600 else f"{x / 3600:.1f}h")


def throughput_svg(times: list[float], width: int = 1000, height: int = 220) -> str:
    """Cumulative documents answered over time, with the per-interval rate as bars."""
    if len(times) < 2 or times[-1] <= times[0]:
        return '<p class="muted" id="throughput-none">Not enough timed answers for a chart.</p>'
    left, right, top, bottom = 56, 16, 16, 34
    w, h = width - left - right, height - top - bottom
    t0, span = times[0], times[-1] - times[0]
    n = len(times)
    bins = min(40, max(5, n // 3))
    counts = [0] * bins
    for t in times:
        counts[min(bins - 1, int((t - t0) / span * bins))] += 1
    peak = max(counts)
    bar_w = w / bins
    bars = "".join(
        f'<rect x="{left + i * bar_w + 1:.1f}" y="{top + h - c / peak * h * 0.45:.1f}" '
        f'width="{max(bar_w - 2, 1):.1f}" height="{c / peak * h * 0.45:.1f}" fill="#c9d8f0"/>'
        for i, c in enumerate(counts)
    )
    pts = " ".join(
        f"{left + (t - t0) / span * w:.1f},{top + h - (i + 1) / n * h:.1f}" for i, t in enumerate(times)
    )
    rate = n / span if span else 0.0
    ticks = "".join(
        f'<text x="{left + f * w:.1f}" y="{height - 12}" font-size="11" text-anchor="middle" fill="#5b6478">'
        f"+{_secs(span * f)}</text>"
        for f in (0, 0.25, 0.5, 0.75, 1)
    )
    return (
        f'<svg id="throughput" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="documents answered over time">'
        f'<line x1="{left}" y1="{top + h}" x2="{left + w}" y2="{top + h}" stroke="#8a93a6"/>'
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + h}" stroke="#8a93a6"/>'
        f"{bars}"
        f'<polyline points="{pts}" fill="none" stroke="#1f6feb" stroke-width="2"/>'
        f'<text x="{left - 6}" y="{top + 4}" font-size="11" text-anchor="end" fill="#5b6478">{n}</text>'
        f'<text x="{left - 6}" y="{top + h}" font-size="11" text-anchor="end" fill="#5b6478">0</text>'
        f"{ticks}"
        f'<text x="{left + 8}" y="{top + 12}" font-size="12" fill="#1d2330">documents answered (line, cumulative) '
        f"and per interval (bars): {n} in {span:.1f}s, {rate:.2f}/s</text></svg>"
    )


def _failures(outcomes: list[dict[str, Any]]) -> str:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for o in outcomes:
        if o["state"] != "succeeded":
            groups[reason_label(o)].append(o)
    rows = []
    for kind, docs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        examples = "<br>".join(
            f"<code>{_e(o['doc_id'])}</code> <span class='small muted'>{_e((o.get('last_error') or '')[:160])}</span>"
            for o in docs[:3]
        )
        rows.append([_td(kind), _td(len(docs), num=True), _td(examples, raw=True)])
    return _table(["state: type", "documents", "examples"], rows, "Every document succeeded.")


def _costs(costs: dict[str, Any]) -> str:
    rows = []
    for group, label in (("by_pass", "pass"), ("by_model", "model")):
        for k, v in sorted((costs.get(group) or {}).items()):
            rows.append([_td(f"{label} {k}"), _td(f"${v:.4f}", num=True)])
    tokens = [[_td(k), _td(f"{v:,}", num=True)] for k, v in (costs.get("tokens") or {}).items() if v]
    top = sorted((costs.get("by_doc") or {}).items(), key=lambda kv: -kv[1])[:5]
    docs = [[_td(f"<code>{_e(d)}</code>", raw=True), _td(f"${u:.4f}", num=True)] for d, u in top]
    return (
        f'<p>Total <b id="cost-total">${costs.get("usd", 0.0):.4f}</b> over '
        f'<span id="cost-entries">{costs.get("entries", 0)}</span> billed answers '
        "(every attempt: retries, repairs, batch items at 50 %, compaction iterations).</p>"
        + _table(["breakdown", "USD"], rows)
        + _table(["tokens", "count"], tokens, "No tokens billed.")
        + "<p class='small muted'>Most expensive documents:</p>"
        + _table(["document", "USD"], docs, "No document billed.")
    )


def _review(review: list[dict[str, Any]]) -> str:
    rows = [
        [
            _td(f"<code>{_e(r.get('doc_id'))}</code>", raw=True),
            _td(r.get("reason")),
            _td(r.get("attempts", 0), num=True),
            _td(str((r.get("errors") or [""])[0])[:200]),
        ]
        for r in review
    ]
    return _table(["document", "reason", "attempts", "first problem"], rows, "The review queue is empty.")


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


def html_report(
    manifest: dict[str, Any],
    outcomes: list[dict[str, Any]],
    integration: IntegrationResult | None,
    costs: dict[str, Any],
    review: list[dict[str, Any]],
    entries: list[dict[str, Any]],
) -> str:

    s = summarize(outcomes)
    run_id = _e(manifest.get("run_id"))
    cards = "".join(
        f'<div class="card {STATE_CLASS[k]}"><div class="n" id="count-{k}">{v}</div><div class="l">{_e(k)}</div></div>'
        for k, v in s["states"].items()
    )
    cards = (
        f'<div class="card"><div class="n" id="count-total">{s["documents"]}</div><div class="l">documents</div></div>'
        + cards
        + f'<div class="card"><div class="n" id="cost-card">${costs.get("usd", 0.0):.2f}</div><div class="l">cost</div></div>'
        + f'<div class="card"><div class="n" id="review-count">{len(review)}</div><div class="l">to review</div></div>'
    )
    generated = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime())
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>docmill run {run_id}</title>
<meta name="viewport" content="width=device-width,initial-scale=1"><style>{CSS}</style></head>
<body><main>
<h1>docmill run <code>{run_id}</code></h1>
<div class="meta">source <code>{_e(manifest.get("source"))}</code> · recipe <code>{_e(manifest.get("recipe"))}</code>
v{_e(manifest.get("recipe_version"))} · mode {_e(manifest.get("mode"))} · phase <b id="phase">{_e(manifest.get("phase"))}</b>
· {s["from_ledger"]} reused from the ledger · generated {generated}</div>
<div class="cards">{cards}</div>
<h2>Throughput</h2>{throughput_svg(completion_times(entries))}
<h2>Cost</h2>{_costs(costs)}
<h2>Not succeeded, by type</h2>{_failures(outcomes)}
<h2>Review queue (<span id="review-total">{len(review)}</span>)</h2>{_review(review)}
{_integration(integration)}
</main></body></html>
"""

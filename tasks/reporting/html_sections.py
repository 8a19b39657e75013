"""The result sections of report.html: the per-document table, the recipe's own view (findings by
file and severity, or fields with their evidence), the integration pass's findings and flags,
failures and skipped inputs, and the review queue explained.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any

from tasks.records import IntegrationResult
from tasks.reporting.findings import SEVERITIES, FindingView, severity_counts
from tasks.reporting.htmlkit import badge, e, paged_table, table, td
from tasks.reporting.results import DISPLAY_STATES, SKIP_REASONS, DocView, FieldView, where_text

REVIEW_REASONS = {
    "conflict": "succeeded, but disagrees with another document on a key field (integration pass)",
    "sample": "succeeded; drawn at random for a spot check (`docmill eval --sample`)",
}


def _where(f: FieldView) -> str:
    return where_text(f) or "offsets unknown"


def _value(f: FieldView) -> str:
    shown = e(f["value"]) if f["value"] is not None else '<span class="muted">null</span>'
    if f["corrected"]:
        shown += f' <span class="was" title="the model\'s value">{_was(f["original"])}</span>'
    if f["evidence"]:
        tip = f"evidence: {f['evidence']} ({_where(f)})"
        return f'<span class="ev" title="{e(tip)}">{shown}</span>'
    return shown


def _plain(f: FieldView) -> str:
    shown = e(f["value"]) if f["value"] is not None else "<i>null</i>"
    return shown + (f' <s title="the model\'s value">{_was(f["original"])}</s>' if f["corrected"] else "")


def _was(v: object) -> str:
    """The model's value beside a correction; `null` when it had none (never an empty mark)."""
    return "null" if v is None or v == "" else e(v)


def _fields_table(fields: list[FieldView], items: dict[str, int]) -> str:
    """All fields of a document: value, evidence, offsets (compact: it is repeated per document)."""
    rows = "".join(
        f"<tr><td>{e(f['name'])}<td>{_plain(f)}<td>"
        + (e(f["evidence"]) if f["evidence"] else "")
        + (f" <small>@{e(where_text(f))}</small>" if where_text(f) else "")
        for f in fields
    )
    rows += "".join(f"<tr><td>{e(k)}<td>{n} item(s)<td>" for k, n in items.items())
    return f"<table><tr><th>field<th>value<th>evidence @ page, chars{rows}</table>"


def _review_badge(v: DocView) -> str:
    r = v["review"]
    if not r:
        return ""
    note = f" — {r['note']}" if r.get("note") else ""
    return (
        " "
        + f'<span title="{e(r["by"])}{e(note)}">{badge(r["action"], r["action"] + "ed by " + r["by"])}</span>'
    )


def _items(n: int | None) -> str:
    return "" if n is None else f"{n} item(s)"


def _doc_row(v: DocView, columns: list[str]) -> tuple[str, str, str]:
    by_name = {f["name"]: f for f in v["fields"]}
    link = (
        f' <a class="small" href="../../{e(v["result_key"])}" title="stored result: {e(v["result_key"])}">result</a>'
        if v["result_key"]
        else ""
    ) + (
        f' <a class="small" href="../../{e(v["responses_key"])}" title="raw API responses: '
        f'{e(v["responses_key"])}">responses</a>'
        if v["responses_key"]
        else ""
    )
    cells = "".join(
        f"<td>{_value(by_name[c]) if c in by_name else _items(v['items'].get(c))}</td>" for c in columns
    )
    n = len(v["fields"]) + len(v["items"])
    details = (
        f"<details><summary>{n} field(s)</summary>{_fields_table(v['fields'], v['items'])}</details>"
        if n
        else ""
    )
    why = f"<div class='small muted'>{e(v['why'])}: {e(v['detail'][:160])}</div>" if v["why"] else ""
    why += f"<div class='small muted'>{e(v['note'])}</div>" if v.get("note") else ""
    html = (
        f'<tr class="st-{e(v["state"])}"><td><code>{e(v["doc_id"])}</code>{link}</td>'
        f"<td>{badge(v['state'])}{_review_badge(v)}{why}</td>{cells}<td>{details}</td></tr>"
    )
    text = " ".join([v["doc_id"], v["state"], v["why"], *(str(f["value"]) for f in v["fields"])])
    return text, v["state"], html


def documents_section(views: list[DocView], columns: list[str]) -> str:
    rows = [_doc_row(v, columns) for v in views]
    head = ["document", "state", *columns, "all fields, evidence, offsets"]
    return (
        "<p class='small muted'>Hover a value for its evidence and where it sits in the document "
        "(page, and character offsets in the extracted text; unverified on a scanned page); open a row's fields for all of them.</p>"
        + paged_table("docs", head, rows, choices=DISPLAY_STATES, empty="No documents.")
    )


def findings_section(findings: list[FindingView]) -> str:
    counts = severity_counts(findings)
    cards = "".join(
        f'<span id="findings-{e(s)}">{badge(s, f"{s} {n}")}</span> '
        for s, n in counts.items()
        if n or s in SEVERITIES
    )
    groups: dict[str, list[FindingView]] = defaultdict(list)
    for f in findings:
        groups[f["file"]].append(f)
    rows = []
    for file, fs in groups.items():
        worst = fs[0]["severity"]
        html = (
            f'<tr class="grp"><td colspan="4"><code>{e(file)}</code> — {len(fs)} finding(s)</td></tr>'
            + "".join(
                f"<tr><td>{badge(f['severity'])}</td><td><code>{e(file)}:{e(f['lines'])}</code></td>"
                f"<td>{e(f['category'])}</td><td>{e(f['message'])}<pre class='q'>{e(f['quote'])}</pre></td></tr>"
                for f in fs
            )
        )
        text = " ".join([file, *(f"{f['severity']} {f['category']} {f['message']} {f['quote']}" for f in fs)])
        rows.append((text, worst, html))
    return f"<p>{cards}</p>" + paged_table(
        "findings",
        ["severity", "where", "category", "finding and quoted lines"],
        rows,
        choices=SEVERITIES,
        size=25,
        empty="No findings.",
    )


def fields_section(views: list[DocView]) -> str:
    """Per field: how many documents state it, with one example and its evidence."""
    stated: Counter[str] = Counter()
    empty: Counter[str] = Counter()
    corrected: Counter[str] = Counter()
    example: dict[str, tuple[str, FieldView]] = {}
    for v in views:
        for f in v["fields"]:
            if f["value"] is None:
                empty[f["name"]] += 1
                continue
            stated[f["name"]] += 1
            corrected[f["name"]] += f["corrected"]
            if f["evidence"] and f["name"] not in example:
                example[f["name"]] = (v["doc_id"], f)
    rows = []
    for name in sorted(set(stated) | set(empty), key=lambda n: -stated[n]):
        ex = ""
        if name in example:
            doc, f = example[name]
            ex = (
                f"<code>{e(doc)}</code>: {_value(f)} — <q>{e(f['evidence'])}</q> "
                f"<span class='small muted'>{_where(f)}</span>"
            )
        rows.append(
            [
                td(name),
                td(stated[name], num=True),
                td(empty[name], num=True),
                td(corrected[name], num=True),
                td(ex, raw=True),
            ]
        )
    return table(
        ["field", "stated", "null", "corrected in review", "example with evidence"], rows, "No fields."
    )


def _json_cell(v: Any) -> str:
    if isinstance(v, list):
        return "; ".join(_json_cell(x) for x in v[:8]) + (f" … (+{len(v) - 8})" if len(v) > 8 else "")
    if isinstance(v, dict):
        return json.dumps(v, ensure_ascii=False)[:200]
    return str(v)


def integration_output_section(integration: IntegrationResult | None) -> str:
    """Key findings, then every other list the integration answer has (findings across files,
    duplicates, entities, claims ...), then the flags the pass raised."""
    if not integration:
        return '<p class="muted">The integration pass did not run.</p>'
    out = integration.get("output") or {}
    findings = out.get("key_findings") or []
    act = act_on(integration)
    html = f"<h3>Act on first (<span id='act-on-count'>{len(act)}</span>)</h3>" + (
        "<ul id='act-on'>" + "".join(f"<li>{item}</li>" for item in act) + "</ul>"
        if act
        else '<p class="muted">Nothing to act on: no conflict, duplicate or coverage gap.</p>'
    )
    html += (
        f"<details><summary>Key findings from the integration answer ({len(findings)})</summary>"
        + (
            "<ul id='key-findings'>" + "".join(f"<li>{e(f)}</li>" for f in findings) + "</ul>"
            if findings
            else '<p class="muted">The integration pass reported no key findings.</p>'
        )
        + "</details>"
    )
    for name, items in out.items():
        if name in ("key_findings", "conflicts", "coverage_gaps") or not isinstance(items, list) or not items:
            continue
        first = items[0] if isinstance(items[0], dict) else {"value": items[0]}
        cols = sorted(first, key=lambda c: isinstance(first[c], list | dict))  # text first, lists after
        rows = [[td(_json_cell(i.get(c) if isinstance(i, dict) else i)) for c in cols] for i in items[:200]]
        more = f" (first 200 of {len(items)})" if len(items) > 200 else ""
        opened = " open" if name == "findings" else ""  # findings across files; entities, claims folded
        html += (
            f"<details{opened}><summary>{e(name)} ({len(items)}){more}</summary>{table(cols, rows)}</details>"
        )
    flags = (integration.get("checks") or {}).get("flags") or []
    html += f'<h3>Integration flags (<span id="integration-flags">{len(flags)}</span>)</h3>'
    html += "".join(f'<div class="flag">{_flag(f)}</div>' for f in flags) or (
        '<p class="muted">No flags: every integration answer was valid and cited known documents.</p>'
    )
    return html


def act_on(integration: IntegrationResult) -> list[str]:
    """What a reviewer must act on, as HTML list items, worst first: conflicts across documents,
    duplicates, coverage gaps (all code-checked or listed by the answer); counts and trivia stay in
    the key findings, one click away."""
    checks = integration.get("checks") or {}
    out = integration.get("output") or {}
    items = []
    for c in checks.get("conflicts") or []:
        values = "; ".join(
            f"<code>{e(v.get('value'))}</code> in <code>{e(v.get('doc_id'))}</code>" for v in c["values"]
        )
        items.append(
            f"<b>conflict</b> {e(c.get('key_field'))} {e(c.get('key'))}: {e(c.get('field'))} is {values}"
        )
    for d in out.get("duplicates") or []:
        items.append(f"<b>duplicate</b> {e(_json_cell(d))[:300]}")
    for g in checks.get("coverage_gaps") or []:
        items.append(f"<b>gap</b> {e(g.get('doc_id') or g.get('field'))}: {e(g.get('reason'))}")
    return items


def _flag(f: Any) -> str:
    if not isinstance(f, dict):
        return e(f)
    head = e(f.get("problem") or "flag")
    rest = {k: v for k, v in f.items() if k != "problem"}
    return f"<b>{head}</b> " + " · ".join(f"{e(k)}: {e(_json_cell(v))[:300]}" for k, v in rest.items())


def failures_section(views: list[DocView]) -> str:
    groups: dict[tuple[str, str], list[DocView]] = defaultdict(list)
    for v in views:
        if v["state"] != "succeeded":
            groups[(v["state"], v["why"] or "-")].append(v)
    rows = []
    for (state, why), docs in sorted(groups.items(), key=lambda kv: (kv[0][0] == "skipped", -len(kv[1]))):
        examples = "<br>".join(
            f"<code>{e(d['doc_id'])}</code> <span class='small muted'>{e(d['detail'][:160])}</span>"
            for d in docs[:3]
        )
        explain = SKIP_REASONS.get(why, "") if state == "skipped" else ""
        rows.append(
            [
                td(badge(state), raw=True),
                td(why + (f" — {explain}" if explain else "")),
                td(len(docs), num=True),
                td(examples, raw=True),
            ]
        )
    return table(["state", "reason", "documents", "examples"], rows, "Every document succeeded.")


def review_section(review: list[dict[str, Any]], counts: dict[str, int], decided: int) -> str:
    reasons = Counter(r for item in review for r in str(item.get("reason") or "-").split(";"))
    parts = [
        f"{counts.get('needs_review', 0)} document(s) need review (the gate could not accept their answer)"
    ]
    for r, n in sorted(reasons.items()):
        if r in REVIEW_REASONS:
            parts.append(f"{n} {REVIEW_REASONS[r]}")
    explain = (
        f"<p id='review-explained'>The review queue holds {len(review)} item(s): " + "; ".join(parts) + ". "
        f"{decided} decision(s) recorded (<code>docmill review accept|correct|reject</code>).</p>"
    )
    rows = [
        [
            td(f"<code>{e(r.get('doc_id'))}</code>", raw=True),
            td(r.get("reason")),
            td(r.get("attempts", 0), num=True),
            td(str((r.get("errors") or [""])[0])[:200]),
        ]
        for r in review[:500]
    ]
    return explain + table(
        ["document", "reason", "attempts", "first problem"], rows, "The review queue is empty."
    )

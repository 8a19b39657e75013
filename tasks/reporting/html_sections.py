"""The result sections of report.html: the per-document table, the recipe's own view (findings by
file and severity, or fields with their evidence), the integration pass's findings and flags,
failures and skipped inputs, and the review queue explained. Each function shapes the data; the
markup is in templates/sections.html.j2 (and doc_rows.html.j2, finding_rows.html.j2).
"""

from __future__ import annotations

import json
from typing import Any

from markupsafe import Markup

from tasks.records import IntegrationResult
from tasks.reporting.findings import SEVERITIES, FindingView, by_file, severity_counts
from tasks.reporting.htmlkit import ESCAPE_JS, Part, asset, macros, paged_table, rendered_rows
from tasks.reporting.results import (
    DocView,
    FieldView,
    field_stats,
    not_succeeded,
    queue_parts,
    where_text,
)
from tasks.reporting.summary import STATES

TEXT_CUT = 300  # characters of a duplicate, a flag's value or an error shown
DOC_PAGE_ROWS = 50  # documents a page of the documents' table shows


def _sections() -> Any:
    return macros("sections.html.j2")


def _text(v: Any) -> str | None:
    """A value as the templates print it (None stays None: they mark it null)."""
    return None if v is None else str(v)


def _field(f: FieldView) -> list[Any]:
    """A field as the templates and DOCS_JS take it, every printed value text: [name, value,
    corrected, the model's value (`null` when it had none, never an empty mark), evidence, where it
    sits: page and character offsets]."""
    was = "null" if f["original"] is None or f["original"] == "" else f["original"]
    return [
        str(f["name"]),
        _text(f["value"]),
        bool(f["corrected"]),
        str(was),
        str(f["evidence"] or ""),
        where_text(f),
    ]


def _doc_row(v: DocView, columns: list[str]) -> list[Any]:
    """A document as doc_rows.html.j2 and DOCS_JS take it, every printed value text: [state, doc id,
    result key, responses key, review decision [action, by, note], why, detail, note, cells, fields,
    items]."""
    fields = [_field(f) for f in v["fields"]]
    by_name = {f[0]: f for f in fields}
    r = v["review"]
    return [
        str(v["state"]),
        str(v["doc_id"]),
        str(v["result_key"] or ""),
        str(v["responses_key"] or ""),
        [str(r["action"]), str(r["by"]), str(r.get("note") or "")] if r else None,
        str(v["why"] or ""),
        str(v["detail"][:160] or ""),
        str(v.get("note") or ""),
        [
            [by_name.get(c), None if c in by_name or (n := v["items"].get(c)) is None else int(n)]
            for c in columns
        ],
        fields,
        [[str(k), int(n)] for k, n in v["items"].items()],
    ]


def documents_section(views: list[DocView], columns: list[str], unlisted: int = 0) -> list[Part]:
    """The documents' table; `unlisted`: documents counted but left out (unchanged since an earlier
    run). Its first page is rendered here (readable with scripts off); every row goes to the page as
    data that DOCS_JS turns into the same HTML when the row is shown (a 10,000-document report:
    a third of the bytes, and no template rendering per document)."""
    rows = [_doc_row(v, columns) for v in views]
    html = rendered_rows("doc_rows.html.j2", rows[:DOC_PAGE_ROWS])
    data = [
        (
            " ".join([v["doc_id"], v["state"], v["why"], *(str(f["value"]) for f in v["fields"])]),
            v["state"],
            row,
        )
        for v, row in zip(views, rows, strict=True)
    ]
    first = [(text, state, h) for (text, state, _), h in zip(data, html, strict=False)]
    head = ["document", "state", *columns, "all fields, evidence, offsets"]
    return [
        _sections().documents(len(views), unlisted),
        paged_table(
            "docs",
            head,
            first,
            choices=STATES,
            size=DOC_PAGE_ROWS,
            empty="No documents.",
            data_rows=data,
        ),
    ]


# Builds a row of the documents' table from `_doc_data`, the same HTML as templates/doc_rows.html.j2
# (tests/tasks/reporting/test_report_rows.py compares them in Chromium); registered for the paged
# table with id "docs" (htmlkit.PAGER_JS).
DOCS_JS = "\n(function(){\n" + ESCAPE_JS + asset("doc_rows.js")


def findings_section(recipe: str, findings: list[FindingView]) -> list[Part]:
    counts = [(s, n) for s, n in severity_counts(findings).items() if n or s in SEVERITIES]
    groups = by_file(findings)
    html = rendered_rows(
        "finding_rows.html.j2",
        [
            (file, [(f["severity"], f["lines"], f["category"], f["message"], f["quote"]) for f in fs])
            for file, fs in groups.items()
        ],
    )
    rows = [
        (
            " ".join([file, *(f"{f['severity']} {f['category']} {f['message']} {f['quote']}" for f in fs)]),
            fs[0]["severity"],
            h,
        )
        for (file, fs), h in zip(groups.items(), html, strict=True)
    ]
    return [
        _sections().findings(recipe, counts),
        paged_table(
            "findings",
            ["severity", "where", "category", "finding and quoted lines"],
            rows,
            choices=SEVERITIES,
            size=25,
            empty="No findings.",
        ),
    ]


def fields_section(views: list[DocView]) -> Markup:
    """Per field: how many documents state it, with one example and its evidence; the most stated
    first, ties by name (the same page for the same results, whatever the process)."""
    stats = sorted(field_stats(views).items(), key=lambda kv: (-kv[1].stated, kv[0]))
    rows = [
        (name, s.stated, s.empty, s.corrected, (s.example[0], _field(s.example[1])) if s.example else None)
        for name, s in stats
    ]
    return _sections().fields(rows)


def _json_cell(v: Any) -> str:
    if isinstance(v, list):
        return "; ".join(_json_cell(x) for x in v[:8]) + (f" … (+{len(v) - 8})" if len(v) > 8 else "")
    if isinstance(v, dict):
        return json.dumps(v, ensure_ascii=False)[:200]
    return str(v)


def integration_output_section(integration: IntegrationResult | None) -> Markup:
    """Key findings, then every other list the integration answer has (findings across files,
    duplicates, entities, claims ...), then the flags the pass raised."""
    if not integration:
        return _sections().integration_output(False, [], [], [], [])
    out = integration.get("output") or {}
    lists = []
    for name, items in out.items():
        if name in ("key_findings", "conflicts", "coverage_gaps") or not isinstance(items, list) or not items:
            continue
        first = items[0] if isinstance(items[0], dict) else {"value": items[0]}
        cols = sorted(first, key=lambda c: isinstance(first[c], list | dict))  # text first, lists after
        rows = [
            [(_json_cell(i.get(c) if isinstance(i, dict) else i), False) for c in cols] for i in items[:200]
        ]
        lists.append((name, len(items), cols, rows, name == "findings"))  # findings across files opened
    flags = [
        (f.get("problem") or "flag", [(k, _json_cell(v)[:TEXT_CUT]) for k, v in f.items() if k != "problem"])
        if isinstance(f, dict)
        else (f, None)
        for f in (integration.get("checks") or {}).get("flags") or []
    ]
    return _sections().integration_output(
        True, act_on(integration), out.get("key_findings") or [], lists, flags
    )


def act_on(integration: IntegrationResult) -> list[tuple[Any, ...]]:
    """What a reviewer must act on, worst first: conflicts across documents, duplicates, coverage
    gaps (all code-checked or listed by the answer); counts and trivia stay in the key findings, one
    click away. Each item as sections.html.j2's `act_item` takes it."""
    checks = integration.get("checks") or {}
    out = integration.get("output") or {}
    items: list[tuple[Any, ...]] = []
    for c in checks.get("conflicts") or []:
        values = [(v.get("value"), v.get("doc_id")) for v in c["values"]]
        items.append(("conflict", c.get("key_field"), c.get("key"), c.get("field"), values))
    for d in out.get("duplicates") or []:
        items.append(("duplicate", _json_cell(d)[:TEXT_CUT]))
    for g in checks.get("coverage_gaps") or []:
        items.append(("gap", g.get("doc_id") or g.get("field"), g.get("reason")))
    return items


def failures_section(views: list[DocView]) -> Markup:
    shown = [
        (state, why, len(docs), [(d["doc_id"], d["detail"][:160]) for d in docs[:3]])
        for state, why, docs in not_succeeded(views)
    ]
    return _sections().failures(shown)


def review_section(review: list[dict[str, Any]], counts: dict[str, int], decided: int) -> Markup:
    parts = queue_parts(review, counts)
    items = [
        (r.get("doc_id"), r.get("reason"), r.get("attempts", 0), str((r.get("errors") or [""])[0])[:200])
        for r in review[:500]
    ]
    return _sections().review(len(review), parts, decided, items)

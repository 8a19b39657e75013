"""The documents' table of report.html goes to the page as data, and DOCS_JS turns a row into HTML
when it is shown: that HTML must be the template's (templates/doc_rows.html.j2), for every kind of
row, hostile text included. One Chromium launch renders both and compares the DOM they make."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from checkpoints.decisions import Action, Decision
from tasks.reporting.html_sections import DOCS_JS, _doc_row, documents_section
from tasks.reporting.htmlkit import Paged, rendered_rows
from tasks.reporting.results import doc_view, key_columns
from tasks.review import apply_decisions
from tests.fixtures.chromium import render

HOSTILE = "</script><img src=x onerror=alert(1)> & \"quoted\" 'single' <b>"


def outcomes() -> list[dict[str, Any]]:
    def node(v: Any, ev: str | None) -> dict[str, Any]:
        return {"value": v, "evidence": ev}

    plain = {
        "doc_id": "a/inv-1.txt",
        "state": "succeeded",
        "key": "file_1",
        "output": {
            "invoice_number": node("INV-1", "Invoice INV-1"),
            "vendor_name": node(HOSTILE, HOSTILE),
            "invoice_date": node("2026-01-02", "Date: 2026-01-02"),
            "total": node(4828.0, "Total: 4,828.00"),
            "currency": node(None, None),
            "paid": node(True, "PAID"),
            "line_items": [{"description": "x", "evidence": "x"}] * 2,
        },
        "provenance": {"fields": {"$.total.evidence": {"start": 70, "end": 84, "page": 2}}},
    }
    corrected = {**plain, "doc_id": "a/inv-2.txt", "key": "file_2"}
    failed = {
        "doc_id": "b/<weird> & name.html",
        "state": "failed",
        "failure_type": "api_error:400",
        "last_error": HOSTILE * 10,
        "key": "file_3",
    }
    review = {"doc_id": "c/inv-4.txt", "state": "needs_review", "reason": "evidence_not_found", "output": {}}
    skipped = {"doc_id": "d/empty.txt", "state": "skipped", "reason": "empty"}
    rows = [plain, corrected, failed, review, skipped]
    decision = Decision(
        run_id="r",
        doc_id="a/inv-2.txt",
        seq=1,
        action=Action.CORRECT,
        values={"total": 4829.5, "currency": "EUR"},
        by="ann <ann@example.com>",
        note=HOSTILE,
        at=1796167111.0,
    )
    return apply_decisions(rows, {"a/inv-2.txt": decision})


def test_a_row_made_by_the_script_is_the_row_the_template_makes(tmp_path: Path, chromium: str) -> None:
    views = [doc_view(o, realtime=True) for o in outcomes()]
    columns = key_columns("invoices", ("invoice_number", "total", "currency"), views)
    template = "".join(rendered_rows("doc_rows.html.j2", [_doc_row(v, columns) for v in views]))
    paged = documents_section(views, columns)[1]
    assert isinstance(paged, Paged)
    page = (
        "<!doctype html><html><body>"
        f"<table><tbody id='template'>{template}</tbody></table>"
        "<table><tbody id='script'></tbody></table>"
        f"<script type='application/json' id='data'>{paged.data}</script>"
        f"<script>{DOCS_JS}\n"
        "document.getElementById('script').innerHTML=JSON.parse(document.getElementById('data').textContent)"
        ".map(function(r){return window.DOCMILL_ROWS.docs(r[2]);}).join('');</script></body></html>"
    )
    path = tmp_path / "rows.html"
    path.write_text(page)
    dom = render(chromium, path)

    start, middle = dom.index('<tbody id="template">'), dom.index('<tbody id="script">')
    end = dom.index("<script", middle)
    expected = dom[start + len('<tbody id="template">') : middle].removesuffix("</tbody></table><table>")
    made = dom[middle + len('<tbody id="script">') : end].removesuffix("</tbody></table>")
    assert made.count("<tr class=") == len(views) and made == expected
    assert "<img" not in made and html.escape("<img src=x") in made  # hostile text stays text
    assert "ed by ann" in made and "4829.5" in made and "api_error:400" in made
    assert json.loads(str(paged.data))[0][2][1] == "a/inv-1.txt"  # data, not HTML, per row

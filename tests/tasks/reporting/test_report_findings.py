"""report.html lists what a reviewer must act on first (conflicts, duplicates, gaps) and keeps the
integration's other findings one click away; the review-queue card says what the queue holds."""

from __future__ import annotations

import re

from tasks.reporting.html import html_report

CONFLICT = {
    "field": "total",
    "key_field": "invoice_number",
    "key": "INV-1",
    "values": [{"doc_id": "a.txt", "value": 10.0}, {"doc_id": "b.txt", "value": 12.0}],
}
INTEGRATION = {
    "run_id": "r",
    "recipe": "invoices",
    "documents": 3,
    "output": {
        "key_findings": ["currency EUR appears in 3 documents", "doc_kind invoice appears in 3 documents"],
        "duplicates": [{"doc_ids": ["a.txt", "c.txt"], "why": "same invoice number and total"}],
    },
    "checks": {
        "conflicts": [CONFLICT],
        "coverage_gaps": [{"doc_id": "c.txt", "reason": "no total"}],
        "flags": [],
    },
}
OUTCOMES = [
    {"doc_id": d, "state": "succeeded", "output": {}, "attempts": 1} for d in ("a.txt", "b.txt", "c.txt")
]
REVIEW = [{"doc_id": "a.txt", "reason": "conflict"}, {"doc_id": "b.txt", "reason": "conflict"}]


def test_act_on_first_lists_conflicts_duplicates_and_gaps_and_folds_the_trivia() -> None:
    manifest = {"run_id": "r", "phase": "done", "recipe": "invoices", "mode": "realtime"}
    page = html_report(manifest, OUTCOMES, INTEGRATION, {"usd": 0.0}, REVIEW, [])  # type: ignore[arg-type]
    act = re.search(r"<ul id='act-on'>(.*?)</ul>", page, re.S).group(1)  # type: ignore[union-attr]
    kinds = re.findall(r"<li><b>(\w+)</b>", act)
    assert kinds == ["conflict", "duplicate", "gap"] and "appears in" not in act
    assert re.search(
        r"<details><summary>Key findings from the integration answer \(2\)</summary><ul id='key-findings'>",
        page,
    )
    assert re.search(
        r'id="count-needs_review">0<.*id="review-count">2<.*id="review-why">2 conflict<', page, re.S
    )

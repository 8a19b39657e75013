"""Report pieces on a real local store: conflict review items, HTML escaping, the chart."""

from __future__ import annotations

from pathlib import Path

from checkpoints.review_queue import ReviewQueue
from checkpoints.store import open_store
from tasks.reporting.html import html_report, throughput_svg
from tasks.reporting.markdown import markdown
from tasks.reporting.report import queue_conflicts

CONFLICT = {
    "field": "total",
    "key_field": "invoice_number",
    "key": "INV-1",
    "values": [{"doc_id": "a.txt", "value": 10.0}, {"doc_id": "b.txt", "value": 12.0}],
}
OUTCOMES = [
    {"doc_id": "a.txt", "state": "succeeded", "output": {"total": {"value": 10.0}}, "attempts": 1},
    {"doc_id": "b.txt", "state": "needs_review", "reason": "evidence_not_found", "output": {}, "attempts": 2},
]


def test_conflicts_join_the_review_queue_once_and_keep_earlier_reasons(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    q = ReviewQueue(store, "r")
    q.add(
        {"doc_id": "b.txt", "reason": "evidence_not_found", "errors": ["quote missing"], "pass_name": "file"}
    )
    for _ in range(2):  # a report written again adds nothing twice
        assert queue_conflicts(store, "r", [CONFLICT], OUTCOMES) == 2
    a, b = q.get("a.txt"), q.get("b.txt")
    assert a and b
    assert a["reason"] == "conflict" and a["errors"] == [
        "invoice_number 'INV-1': field total is 10.0 here, 12.0 in b.txt"
    ]
    assert a["output"] == OUTCOMES[0]["output"] and a["conflicts"] == [CONFLICT]
    assert b["reason"] == "evidence_not_found;conflict"
    assert b["errors"][0] == "quote missing" and len(b["errors"]) == 2
    assert len(q) == 2


def test_html_escapes_document_text_and_has_no_script(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script>.txt"
    outcomes = [{"doc_id": evil, "state": "failed", "failure_type": "input:binary", "last_error": "<b>x</b>"}]
    costs = {
        "usd": 0.5,
        "entries": 1,
        "by_pass": {"file": 0.5},
        "by_model": {},
        "by_doc": {evil: 0.5},
        "tokens": {},
    }
    review = [{"doc_id": evil, "reason": "refusal", "errors": ["<img src=x>"]}]
    page = html_report({"run_id": "r", "phase": "done"}, outcomes, None, costs, review, [])
    assert "<script" not in page and "<img" not in page and "&lt;script&gt;" in page
    assert 'id="count-failed">1<' in page and 'id="cost-total">$0.5000<' in page
    assert 'id="throughput-none"' in page  # no timed answers, no chart
    md = markdown({"run_id": "r"}, outcomes, None, costs, review)
    assert "## Review queue (1)" in md and "refusal" in md


def test_throughput_chart_plots_every_answer() -> None:
    times = [1000.0 + i * 0.5 for i in range(20)]
    svg = throughput_svg(times)
    assert svg.startswith("<svg") and "20 in 9.5s" in svg
    points = svg.split('points="')[1].split('"')[0].split()
    assert len(points) == 20
    assert throughput_svg([5.0]).startswith("<p")

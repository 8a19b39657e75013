"""Report pieces on a real local store: conflict review items, HTML escaping, skipped inputs apart
from failures, the timeline of realtime and batch runs."""

from __future__ import annotations

import re
from pathlib import Path

from checkpoints.review_queue import ReviewQueue
from checkpoints.store import open_store
from tasks.records import Conflict
from tasks.reporting.html import html_report
from tasks.reporting.markdown import markdown
from tasks.reporting.report import queue_conflicts
from tasks.reporting.timeline import batch_timeline, realtime_timeline, span_text, timeline_svg

CONFLICT: Conflict = {
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


def test_html_escapes_document_text_and_runs_only_its_own_script(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script>.txt"
    outcomes = [
        {"doc_id": evil, "state": "failed", "failure_type": "api_error:400", "last_error": "<b>x</b>"},
        {"doc_id": "py.typed", "state": "failed", "failure_type": "input:empty", "last_error": "no bytes"},
    ]
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
    assert "<script>alert" not in page and "<img" not in page and "&lt;script&gt;" in page
    scripts = re.findall(r"<script[^>]*>", page)  # the pager and its JSON data blocks, nothing external
    assert scripts.count("<script>") == 1 and all("src=" not in s for s in scripts)
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert 'id="count-failed">1<' in page and 'id="count-skipped">1<' in page  # py.typed is skipped
    assert 'id="cost-total">$0.5000<' in page
    assert 'id="timeline-none"' in page  # no timed answers, no chart
    md = markdown({"run_id": "r"}, outcomes, None, costs, review)
    assert "## Review queue (1)" in md and "refusal" in md
    assert "| skipped | 1 |" in md and "| failed | 1 |" in md and "marker file such as py.typed" in md


def test_realtime_timeline_has_submitted_in_flight_and_answered_on_a_clock_axis() -> None:
    entries = [
        {"doc_id": f"d{i}", "pass_name": "file", "sent_at": 1000.0 + i * 0.01, "at": 1000.2 + i * 0.01}
        for i in range(20)
    ]
    entries.append({"doc_id": "*integration-0*", "pass_name": "integration", "at": 1005.0})
    t = realtime_timeline(entries, 999.9, 1000.5)
    assert len(t["submitted"]) == len(t["ended"]) == 20  # integration entries are not documents
    svg = timeline_svg(t)
    assert svg.startswith("<svg") and svg.count("<polyline") == 2 and "<polygon" in svg  # in flight area
    ticks = re.findall(r">\+([^<]+)</text>", svg)
    assert len(set(ticks)) == 5 and ticks[0] == "0ms" and ticks[-1] == "600ms"  # not "+0.0s" five times
    assert "in flight" in svg and "answered" in svg
    assert span_text(0.25) == "250ms" and span_text(12.34) == "12.3s" and span_text(7260) == "2h01m"


def test_batch_timeline_shows_the_batches_not_the_ingest_speed() -> None:
    batches = [
        {"request_count": 100, "submitted_at": 10.0, "ended_at": 3600.0, "collected_at": 3610.0},
        {"request_count": 50, "submitted_at": 20.0, "ended_at": 7200.0, "collected_at": 7230.0},
    ]
    t = batch_timeline(batches, 0.0, 7300.0)
    assert len(t["submitted"]) == len(t["ended"]) == len(t["ingested"]) == 150
    assert t["submitted"][-1] == 20.0 and t["ingested"][-1] == 7230.0
    svg = timeline_svg(t)
    assert svg.count("<polyline") == 3 and "ingested" in svg and "+2h01m" in svg
    assert timeline_svg(batch_timeline([], None, None)).startswith("<p")


def _invoice(i: int) -> dict[str, object]:
    def node(v: object, ev: str, at: int) -> dict[str, object]:
        return {"value": v, "evidence": ev}

    return {
        "doc_id": f"batch-{i // 1000:02d}/inv-{i:05d}.txt",
        "state": "succeeded" if i % 50 else "needs_review",
        "reason": None if i % 50 else "evidence_not_found",
        "key": f"file_{i:050d}",
        "output": {
            "invoice_number": node(f"INV-{i:05d}", f"Invoice number: INV-{i:05d}", 0),
            "vendor_name": node("Acme GmbH", "Vendor: Acme GmbH", 30),
            "invoice_date": node("2026-01-02", "Date: 2026-01-02", 50),
            "total": node(100.0 + i, f"Total: {100.0 + i:.2f}", 70),
            "currency": node("EUR", "Currency: EUR", 90),
            "line_items": [{"description": "x", "evidence": "x"}] * 3,
        },
        "provenance": {"fields": {"$.total.evidence": {"start": 70, "end": 84}}},
    }


def test_a_report_of_10k_documents_is_quick_to_write_and_to_open_and_pages_find_any_document(
    tmp_path: Path, chromium: str
) -> None:
    import time

    from tests.fixtures.chromium import render

    outcomes = [_invoice(i) for i in range(10_000)]
    manifest = {"run_id": "big", "phase": "done", "recipe": "invoices", "mode": "realtime"}
    costs = {"usd": 1.0, "entries": 10_000}
    began = time.process_time()  # CPU, not wall: a loaded machine must not fail a correct report
    page = html_report(manifest, outcomes, None, costs, [], [])
    took = time.process_time() - began
    assert took < 8.0, f"html_report of 10,000 documents took {took:.1f} CPU-s"  # ~1.5 s idle
    assert len(page) < 20_000_000
    path = tmp_path / "report.html"
    path.write_text(page)
    began = time.perf_counter()
    dom = render(chromium, path, fragment="q=inv-09876")
    opened = time.perf_counter() - began
    rows = re.findall(r'<tr class="st-[a-z_]+"><td><code>([^<]+)</code>', dom)
    assert rows == ["batch-09/inv-09876.txt"], rows[:5]  # the filter from the address found it on page 198
    assert "INV-09876" in dom and "chars 70–84" in dom and opened < 60
    assert "1 of 10000" in dom  # the pager's count


def test_a_correction_of_a_missing_value_reads_was_null_and_a_stopped_run_says_how_to_continue() -> None:
    from checkpoints.decisions import Action, Decision
    from tasks.review import apply_decisions

    outcomes = [
        {"doc_id": "a.txt", "state": "succeeded", "output": {"total": {"value": None, "evidence": None}}}
    ]
    d = Decision(
        run_id="r",
        doc_id="a.txt",
        seq=1,
        action=Action.CORRECT,
        values={"total": 12.5},
        by="ann",
        at=1796167111.29677,
    )
    shown = apply_decisions(outcomes, {"a.txt": d})
    assert shown[0]["review"]["at"] == "2026-12-01T23:18:31Z"  # a timestamp, not epoch seconds
    md = markdown({"run_id": "r", "recipe": "invoices", "phase": "done"}, shown, None)
    assert "12.5 (was null)" in md and "(was )" not in md
    page = html_report({"run_id": "r", "phase": "done"}, shown, None, {}, [], [])
    assert '<span class="was" title="the model\'s value">null</span>' in page

    stopped = {
        "run_id": "r",
        "phase": "stopped",
        "extra": {
            "stop": {
                "kind": "breaker",
                "error": "SystemicFailure: run r stopped: 401 x20 (auth)",
                "continue": "docmill resume r",
            }
        },
    }
    md = markdown(stopped, [], None)
    assert "SystemicFailure: run r stopped: 401 x20 (auth)" in md and "`docmill resume r` continues" in md
    assert "docmill resume r</code> continues" in html_report(stopped, [], None, {}, [], [])
    assert "docmill resume" not in markdown({**stopped, "phase": "done"}, [], None)  # over once it is done


def test_no_text_from_a_document_the_model_or_a_reviewer_adds_markup_anywhere_in_report_html() -> None:
    """Every place the templates print text they were given: values, evidence, doc ids, reviewers,
    the integration answer and its flags, the source, page marks and text snippets."""
    from tasks.reporting.pages import Mark, PageView

    evil = '<x-evil>" onmouseover="alert(1)&amp;'
    node = {"value": evil, "evidence": evil}
    outcomes = [
        {"doc_id": evil, "state": "succeeded", "output": {"vendor_name": node, "total": node}, "attempts": 1},
        {
            "doc_id": "b.txt",
            "state": "succeeded",
            "output": {"vendor_name": node},
            "review": {"action": "correct", "by": evil, "note": evil, "at": "2026-12-01T23:18:31Z"},
        },
        {"doc_id": "c.txt", "state": "failed", "failure_type": evil, "last_error": evil},
        {
            "doc_id": "src/x.py",
            "state": "succeeded",
            "output": {
                "findings": [
                    {"file": evil, "severity": evil, "category": evil, "message": evil, "quote": evil}
                ]
            },
        },
    ]
    integration = {
        "status": "partial",
        "mode": evil,
        "problems": [{"problem": evil, "doc_ids": [evil], "errors": [evil]}],
        "output": {"key_findings": [evil], "duplicates": [{"why": evil}], "entities": [{"name": evil}]},
        "checks": {
            "conflicts": [
                {"field": evil, "key_field": evil, "key": evil, "values": [{"doc_id": evil, "value": evil}]}
            ],
            "coverage_gaps": [{"doc_id": evil, "reason": evil}],
            "flags": [{"problem": evil, "detail": evil}, evil],
        },
    }
    mark = Mark(evil, evil, "verified", [0.1, 0.1, 0.3, 0.2])
    pages = [
        PageView(evil, 1, evil, 10, 10, [mark, Mark(evil, evil, "cited")]),
        PageView("b.txt", 1, snippets=[(mark, evil, evil, evil)]),
    ]
    manifest = {"run_id": evil, "phase": evil, "recipe": evil, "source": evil, "mode": "realtime"}
    costs = {"usd": 0.1, "by_pass": {evil: 0.1}, "by_doc": {evil: 0.1}, "tokens": {evil: 3}}
    review = [{"doc_id": evil, "reason": evil, "errors": [evil]}]
    page = html_report(manifest, outcomes, integration, costs, review, [], extra={"pages": pages})  # type: ignore[arg-type]
    assert "<x-evil" not in page and 'onmouseover="alert' not in page
    assert page.count("&lt;x-evil&gt;") > 40  # shown, as text, in every section
    assert "&amp;amp;" in page  # an entity in the text is shown as typed, not decoded


def test_fields_stated_as_often_are_listed_by_name_so_the_same_results_give_the_same_page() -> None:
    names = ["zeta", "alpha", "mu", "beta", "omega", "kappa", "delta"]
    outcomes = [
        {
            "doc_id": f"{i}.txt",
            "state": "succeeded",
            "output": {n: {"value": i, "evidence": "x"} for n in names},
        }
        for i in range(2)
    ]
    page = html_report({"run_id": "r", "phase": "done", "recipe": "invoices"}, outcomes, None, {}, [], [])
    fields = page.split("<h2>Fields with evidence</h2>")[1].split("</table>")[0]
    assert re.findall(r"<tr><td>(\w+)</td>", fields) == sorted(names)

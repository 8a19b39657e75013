"""report.html shows the pages: a text PDF's page with each value's evidence boxed and labelled, a text
document's evidence highlighted in its text, a
scanned page with the model's cited page and no box; page images are files beside the report,
rendered once; checked in headless Chromium."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from checkpoints.store import ObjectStore, open_store
from docmill.settings import Settings
from examples import formats as F
from tasks.per_file.gate import check
from tasks.recipes import load_recipe
from tasks.reporting.report import write_report
from tasks.request import load_payload
from tasks.source.document import Document
from tasks.source.inventory import inventory
from tests.fixtures.chromium import render
from tests.fixtures.formats import invoice

RECIPE = load_recipe("invoices")
NAMES = ("invoice_number", "invoice_date", "due_date", "vendor_name", "currency", "subtotal", "tax", "total")


def answer(**fields: tuple[Any, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"doc_kind": "invoice", "line_items": []}
    for name in NAMES:
        value, evidence = fields.get(name, (None, None))
        out[name] = {"value": value, "evidence": evidence}
    return {"content": [{"type": "text", "text": json.dumps(out)}], "stop_reason": "end_turn", "usage": {}}


def outcome_of(doc_id: str, verdict: Any) -> dict[str, Any]:
    assert verdict.ok, verdict.errors
    return {
        "doc_id": doc_id,
        "state": "succeeded",
        "output": verdict.output,
        "attempts": 1,
        "provenance": {"fields": verdict.offsets, "sent_as": verdict.sent_as},
    }


def three_documents(tmp_path: Path) -> tuple[dict[str, Document], ObjectStore]:
    """A text PDF, a scan and a text file of invoices 11-13, inventoried as run `r` in a store."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "text.pdf").write_bytes(F.text_pdf([invoice(11)]))
    (src / "scan.pdf").write_bytes(F.scanned_pdf([invoice(12)]))
    (src / "inv.txt").write_text("\n".join(invoice(13)))
    docs = {d.doc_id: d for d in inventory(str(src), Settings())}
    store = open_store(str(tmp_path / "store"))
    store.put_json("runs/r/inventory/c0.json", [d.model_dump(mode="json") for d in docs.values()])
    return docs, store


def test_report_shows_pages_with_boxes_and_scans_with_the_cited_page(tmp_path: Path, chromium: str) -> None:
    docs, store = three_documents(tmp_path)
    text = check(
        RECIPE,
        load_payload(docs["text.pdf"], RECIPE, Settings()),
        answer(invoice_number=("INV-11", "Invoice number: INV-11"), total=(1190.0, "Total: 1,190.00")),
    )
    scan = check(
        RECIPE,
        load_payload(docs["scan.pdf"], RECIPE, Settings()),
        answer(invoice_number=("INV-12", "[page 1] Invoice number: INV-12")),
    )
    plain = check(
        RECIPE,
        load_payload(docs["inv.txt"], RECIPE, Settings()),
        answer(invoice_number=("INV-13", "Invoice number: INV-13")),
    )
    outcomes = [outcome_of("text.pdf", text), outcome_of("scan.pdf", scan), outcome_of("inv.txt", plain)]
    doc_number = {"text.pdf": 11, "scan.pdf": 12, "inv.txt": 13}
    manifest = {"run_id": "r", "phase": "done", "recipe": "invoices", "mode": "realtime"}
    write_report(store, manifest, outcomes, None, {"usd": 0.0, "entries": 0})
    run = tmp_path / "store" / "runs" / "r"
    images = sorted(p.name for p in (run / "pages").glob("*.jpg"))
    assert len(images) == 2 and all((run / "pages" / i).stat().st_size < 150_000 for i in images)
    stamps = {i: (run / "pages" / i).stat().st_mtime_ns for i in images}
    write_report(store, manifest, outcomes, None, {"usd": 0.0, "entries": 0})  # rendered once
    assert {i: (run / "pages" / i).stat().st_mtime_ns for i in images} == stamps

    md = (run / "report.md").read_text()  # report.md: support classes, links to the page images
    assert "- unverified: 1 — " in md and "- verified_text: 1 — " in md and "- verified: 2 — " in md
    assert "| invoice_number | 3 | 1 | 0 | 1 | 1 |" in md  # unverified, missing, verified_text, verified
    md_rows = {r.split("`")[1]: r for r in md.splitlines() if r.startswith("| `")}
    for doc, support in (("text.pdf", "verified"), ("scan.pdf", "unverified"), ("inv.txt", "verified_text")):
        assert f"INV-{doc_number[doc]} «" in md_rows[doc] and "» @" in md_rows[doc], md_rows[doc]
        assert f" · {support} |" in md_rows[doc], md_rows[doc]
        link = re.search(r"\(\[p\. 1\]\((pages/[0-9a-f]{16}-p1\.jpg)\)\)", md_rows[doc])
        assert (link is not None and (run / link[1]).is_file()) == doc.endswith(".pdf"), md_rows[doc]

    dom = render(chromium, run / "report.html")  # one Chromium launch: the suite's time is short
    section = dom.split('id="pages"')[1].split("</table>")[0]  # the pager and its table
    assert (
        '<span class="pinfo small muted">3 of 3 · page 1 of 1</span>' in section
    )  # the script drew the rows
    html = (run / "report.html").read_text()
    data = json.loads(html.split('id="pages-data">')[1].split("</script>")[0])
    assert all(isinstance(r[2], list) for r in data)  # rows as data, built in the browser (PAGES_JS)
    rows = dict(re.findall(r"<tr><td><code>([^<]+)</code>(.*?)</tr>", section, re.S))
    assert sorted(rows) == ["inv.txt", "scan.pdf", "text.pdf"]
    assert re.search(
        r'Vendor: Hartmann Logistics GmbH\n<mark title="invoice_number = INV-13">Invoice number: INV-13</mark>\nInvoice date',
        rows["inv.txt"],
    )
    labels = re.findall(r'<div class="bx"[^>]*title="([^"]+)"><span>([^<]+)</span>', rows["text.pdf"])
    assert sorted(n for _, n in labels) == ["invoice_number", "total"], labels
    assert "invoice_number = INV-11" in [t for t, _ in labels]
    assert 'class="bx"' not in rows["scan.pdf"]  # a scan: never a made-up box
    assert "cited by the model, no text layer (no box): invoice_number" in rows["scan.pdf"]
    assert all(
        re.search(r'<img src="pages/[0-9a-f]{16}-p1\.jpg" loading="lazy"', rows[d])
        for d in ("text.pdf", "scan.pdf")
    )

"""`docmill review show` gives the pages: a text PDF's cited page as an image file with each value's
evidence boxed (drawn into the pixels, the report's green), a scan's cited page with no box, a text
document's evidence highlighted in its surrounding text; `--open` hands each image to the viewer."""

from __future__ import annotations

import io
import json
import webbrowser
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

import pytest
from PIL import Image

from checkpoints.manifest import ManifestStore, RunManifest
from checkpoints.outcomes import OutcomeLog
from docmill.settings import Settings
from flows.cli.main import main
from tasks.per_file.gate import check
from tasks.reporting.pages import Mark, PageView, report_pages, run_documents
from tasks.reporting.review_pages import document_evidence, draw_marks, evidence_lines
from tasks.request import load_payload
from tests.tasks.reporting.test_report_pages import RECIPE, answer, outcome_of, three_documents


def green(img: Image.Image) -> int:
    """Pixels of the boxes' green (a greyscale page has none)."""
    rgb = img.convert("RGB")
    return sum(1 for r, g, b in rgb.getdata() if g > r + 40 and g > b + 40)


def path_of(link: str) -> Path:
    assert link.startswith("file://"), link
    return Path(url2pathname(urlparse(link).path))


@pytest.fixture
def run(tmp_path: Path) -> tuple[Any, list[dict[str, Any]], Path]:
    docs, store = three_documents(tmp_path)
    answers = {
        "text.pdf": answer(
            invoice_number=("INV-11", "Invoice number: INV-11"), total=(1190.0, "Total: 1,190.00")
        ),
        "scan.pdf": answer(invoice_number=("INV-12", "[page 1] Invoice number: INV-12")),
        "inv.txt": answer(invoice_number=("INV-13", "Invoice number: INV-13")),
    }
    outcomes = [
        outcome_of(d, check(RECIPE, load_payload(docs[d], RECIPE, Settings()), a)) for d, a in answers.items()
    ]
    ManifestStore(store).create(RunManifest(run_id="r", recipe="invoices"))
    OutcomeLog(store, "r").write_chunk("c0", outcomes)
    return store, outcomes, tmp_path / "store"


def test_pages_are_image_files_with_the_evidence_boxed_and_scans_without_a_box(
    run: Any, tmp_path: Path
) -> None:
    store, outcomes, _ = run
    by = {o["doc_id"]: o for o in outcomes}
    documents = run_documents(store, "r")

    text = document_evidence(store, "r", by["text.pdf"], documents)
    (page,) = text.pages
    assert page["page"] == 1 and page["boxed"] == ["invoice_number", "total"] and page["cited"] == []
    boxed = Image.open(path_of(str(page["image"])))
    plain = Image.open(io.BytesIO(store.get(f"runs/r/pages/{documents['text.pdf'].sha256[:16]}-p1.jpg")))
    assert boxed.width == plain.width and boxed.height > plain.height  # the page, then its caption strip
    assert green(plain) == 0 and green(boxed) > 500
    left, top, _, bottom = by["text.pdf"]["provenance"]["fields"]["$.total.evidence"]["bbox"]
    x, y = round(left * plain.width) - 2, int((top + bottom) / 2 * plain.height)
    r, g, b = boxed.convert("RGB").getpixel((x, y))  # the outline just left of the total's evidence
    assert g > r + 40 and g > b + 40, (r, g, b)

    scan = document_evidence(store, "r", by["scan.pdf"], documents)
    (page,) = scan.pages
    assert page["boxed"] == [] and page["cited"] == ["invoice_number"]
    assert green(Image.open(path_of(str(page["image"])))) == 0  # a scan: never a made-up box
    assert "  cited by the model, no text layer (no box): invoice_number" in evidence_lines(scan)

    lines = evidence_lines(document_evidence(store, "r", by["inv.txt"], documents))
    at = lines.index("invoice_number = INV-13  (verified_text)")
    assert lines[at + 2 : at + 5] == [
        "    Vendor: Hartmann Logistics GmbH",
        "    «Invoice number: INV-13»",
        "    Invoice date: 2026-03-05",
    ], lines
    coloured = evidence_lines(document_evidence(store, "r", by["inv.txt"], documents), color=True)
    assert "    \x1b[7mInvoice number: INV-13\x1b[0m" in coloured
    (tmp_path / "src" / "inv.txt").unlink()  # moved since the run: said, never a stale snippet
    gone = evidence_lines(document_evidence(store, "r", by["inv.txt"], documents))
    assert gone == ["its text could not be read again (moved or changed since the run)"]


def test_review_show_prints_the_links_and_opens_them(
    run: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, store_dir = run
    opened = tmp_path / "opened.txt"
    viewer = tmp_path / "viewer.sh"
    viewer.write_text(f'#!/bin/sh\necho "$1" >> {opened}\n')
    viewer.chmod(0o755)
    monkeypatch.setenv("BROWSER", str(viewer))
    monkeypatch.setattr(webbrowser, "_tryorder", None)  # read $BROWSER again
    assert main(["review", "show", "r", "text.pdf", "--store", str(store_dir), "--open"]) == 0
    out = capsys.readouterr()
    shown = json.loads(out.out)  # a succeeded document, never queued: shown all the same
    assert shown["state"] == "succeeded" and shown["support"]["total"] == "verified"
    (page,) = shown["pages"]
    assert f"p. 1: {page['image']}" in out.err and path_of(page["image"]).is_file()
    assert opened.read_text().split() == [page["image"]]
    assert main(["review", "show", "r", "nope.pdf", "--store", str(store_dir)]) == 2


def test_a_label_never_covers_its_evidence_at_the_page_edge() -> None:
    buf = io.BytesIO()
    Image.new("L", (400, 500), 255).save(buf, "JPEG")
    box = [0.8, 0.5, 0.98, 0.53]  # no room for the label on the right
    view = PageView("d.pdf", 1, marks=[Mark("vendor_name", "Hartmann Logistics GmbH", "verified", box)])
    drawn = Image.open(io.BytesIO(draw_marks(buf.getvalue(), view))).convert("RGB")
    inside = drawn.crop((int(0.81 * 400), int(0.505 * 500), int(0.97 * 400), int(0.525 * 500)))
    assert green(inside) == 0  # the evidence stays readable: the label went above it
    assert green(drawn.crop((0, 0, 400, int(0.5 * 500)))) > 100  # the label, above the box


def test_the_report_reads_the_inventory_records_of_the_documents_it_lists_only(run: Any) -> None:
    """A nightly's report lists what changed: the inventory records of the others are not built."""
    store, _, _ = run
    assert set(run_documents(store, "r")) == {"text.pdf", "scan.pdf", "inv.txt"}
    assert set(run_documents(store, "r", {"inv.txt", "gone.txt"})) == {"inv.txt"}
    assert run_documents(store, "r", set()) == {}
    assert report_pages(store, "r", []) == []

"""Evidence boxed on its page: every verified excerpt of a text-layer PDF gets boxes whose text is the
excerpt (read back from the page under each box), its page, and a `bbox` in the exports; a scanned
page keeps the model's page and no box."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pypdfium2 as pdfium

from docmill.settings import Settings
from examples import formats as F
from tasks.per_file.gate import check, normalize_ws
from tasks.per_file.longdoc import long_outcome_fields, merge_chunks, split_document
from tasks.provenance import supports
from tasks.recipes import load_recipe
from tasks.reporting.exports import export_rows
from tasks.request import Payload, SendAs, load_payload
from tasks.source.inventory import inventory
from tasks.source.readers.pdf import read_pdf
from tasks.source.readers.pdf_text import span_boxes
from tests.fixtures.formats import invoice

RECIPE = load_recipe("invoices")
WRAPPED = "Vendor: Hartmann Logistics GmbH, a long name printed over two lines of the page"


def payload_of(tmp_path: Path, name: str, data: bytes) -> Payload:
    (tmp_path / name).write_bytes(data)
    doc = next(d for d in inventory(str(tmp_path), Settings()) if d.doc_id == name)
    return load_payload(doc, RECIPE, Settings())


def answer(**fields: tuple[Any, str | None]) -> dict[str, Any]:
    out: dict[str, Any] = {"doc_kind": "invoice", "line_items": []}
    for name in (
        "invoice_number",
        "invoice_date",
        "due_date",
        "vendor_name",
        "currency",
        "subtotal",
        "tax",
        "total",
    ):
        value, evidence = fields.get(name, (None, None))
        out[name] = {"value": value, "evidence": evidence}
    return {"content": [{"type": "text", "text": json.dumps(out)}], "stop_reason": "end_turn", "usage": {}}


def text_under(data: bytes, box: list[float]) -> str:
    page_no, left, top, right, bottom = box
    doc = pdfium.PdfDocument(data)
    page = doc[int(page_no) - 1]
    width, height = page.get_size()
    text = page.get_textpage().get_text_bounded(
        left * width, (1 - bottom) * height, right * width, (1 - top) * height
    )
    return str(text)


def test_every_verified_excerpt_has_boxes_whose_text_is_the_excerpt(tmp_path: Path) -> None:
    second = ["Page two", *WRAPPED.split(", "), "Total: 1,190.00"]
    data = F.text_pdf([invoice(5), second])
    payload = payload_of(tmp_path, "two.pdf", data)
    verdict = check(
        RECIPE,
        payload,
        answer(
            invoice_number=("INV-5", "Invoice number: INV-5"),
            vendor_name=("Hartmann Logistics GmbH", "Vendor: Hartmann Logistics GmbH a long name printed"),
            total=(1190.0, "Total: 1,190.00\nPage two"),  # the first page's total, then page two's head
        ),
    )
    assert verdict.ok, verdict.errors
    where = verdict.offsets
    assert set(where) == {"$.invoice_number.evidence", "$.vendor_name.evidence", "$.total.evidence"}
    for path, w in where.items():
        excerpt = normalize_ws(payload.text[w["start"] : w["end"]])
        under = normalize_ws(" ".join(text_under(data, b) for b in w["boxes"]))
        assert under == excerpt.replace("\f", " ").replace(" ", " "), path
        assert all(0 <= v <= 1 for b in w["boxes"] for v in b[1:])
    vendor = where["$.vendor_name.evidence"]
    assert vendor["page"] == 2 and len(vendor["boxes"]) == 2  # two lines, two boxes
    total = where["$.total.evidence"]
    assert [b[0] for b in total["boxes"]] == [1, 2] and total["page"] == 1  # across the page break
    left, top, right, bottom = vendor["bbox"]
    assert 0 < left < right < 1 and 0 < top < bottom < 0.2  # near the top of a Letter page
    row = export_rows(
        [
            {
                "doc_id": "two.pdf",
                "state": "succeeded",
                "output": verdict.output,
                "provenance": {"fields": where},
            }
        ]
    )[0]
    assert row["value.vendor_name.page"] == 2 and json.loads(row["value.vendor_name.bbox"]) == vendor["bbox"]


def test_a_scanned_page_keeps_the_cited_page_and_no_box(tmp_path: Path) -> None:
    payload = payload_of(tmp_path, "scan.pdf", F.scanned_pdf([invoice(6)]))
    verdict = check(RECIPE, payload, answer(invoice_number=("INV-6", "[page 1] Invoice number: INV-6")))
    assert verdict.ok, verdict.errors
    assert verdict.offsets["$.invoice_number.evidence"] == {
        "start": None,
        "end": None,
        "page": 1,
        "verified": False,
    }


def test_a_text_document_has_offsets_and_no_box(tmp_path: Path) -> None:
    payload = payload_of(tmp_path, "inv.txt", "\n".join(invoice(7)).encode())
    verdict = check(RECIPE, payload, answer(invoice_number=("INV-7", "Invoice number: INV-7")))
    assert verdict.ok and "boxes" not in verdict.offsets["$.invoice_number.evidence"]


def test_text_drawn_character_by_character_gets_one_box_per_line() -> None:
    value = "INV/2023_03-0008"
    widths = {"I": 2.78, "N": 7.22, "V": 6.67, "/": 2.78, "_": 5.56, "-": 3.33}  # Helvetica at 10 pt
    row, x = [], 56.0
    for ch in value:  # each character its own text object, where it would stand in the word
        row.append((x, ch))
        x += widths.get(ch, 5.56)
    data = F.table_pdf([[(56, "Invoice number")], row, [(56, "Thank you for your business, paid in full")]])
    content = read_pdf(data)
    start = content.text.index(value)
    (boxes,) = span_boxes(data, content.text, content.pages, [(start, start + len(value))])
    assert len(boxes) == 1, boxes
    assert normalize_ws(text_under(data, list(boxes[0]))) == value


def test_a_long_pdf_sent_as_text_in_chunks_gets_boxes_across_its_chunks(tmp_path: Path) -> None:
    recipe = dataclasses.replace(RECIPE, pdf_mode="text")
    pages = [[f"Page {n}", f"Delivery note line {n}: goods as ordered"] for n in range(1, 6)]
    pages[2] += ["Invoice number: INV-77"]
    pages[4] += ["Vendor: Hartmann Logistics GmbH", "Total: 1,190.00"]
    data = F.text_pdf(pages)
    (tmp_path / "long.pdf").write_bytes(data)
    doc = next(iter(inventory(str(tmp_path), Settings())))
    payload = load_payload(doc, recipe, Settings())
    assert payload.send is SendAs.TEXT and payload.pdf is not None
    chunks = split_document(payload.text, 30)  # a few pages a chunk
    assert len(chunks) >= 3
    said = {
        "invoice_number": ("INV-77", "Invoice number: INV-77"),
        "vendor_name": ("Hartmann Logistics GmbH", "Vendor: Hartmann Logistics GmbH"),
        "total": (1190.0, "Total: 1,190.00"),
    }
    outputs = []
    for c in chunks:  # each chunk's answer states what its own text holds
        out = json.loads(answer()["content"][0]["text"])
        out.update({k: {"value": v, "evidence": e} for k, (v, e) in said.items() if e in c.text})
        outputs.append(out)
    merged, provenance = merge_chunks(payload.text, chunks, outputs)
    result = {"output": merged, "provenance": provenance, "chunks": [], "failed_chunks": []}
    fields, errors = long_outcome_fields(recipe, result, payload)
    assert errors == [] and fields["state"] == "succeeded"
    where = fields["provenance"]["fields"]
    assert where["total"]["chunk"] == len(chunks) - 1 > where["invoice_number"]["chunk"] > 0  # later chunks
    for name, (_, evidence) in said.items():
        w = where[name]
        assert w["page"] == (3 if name == "invoice_number" else 5) and w["bbox"], (name, w)
        assert normalize_ws(" ".join(text_under(data, b) for b in w["boxes"])) == evidence, name
        assert [b[0] for b in w["boxes"]] == [w["page"]]
    outcome = {"doc_id": "long.pdf", "output": fields["output"], "provenance": fields["provenance"]}
    assert supports(outcome)["total"] == "verified"

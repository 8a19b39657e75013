"""Readers per format and the bad inputs of issue 24, each with a clear reason and nothing else lost:
encrypted, corrupt, 0-page, 2,000-page and 200 MB PDFs, a .docx zip bomb, a macro-enabled file, an
.eml with 50 attachments and one with a loop of forwarded messages, a 20,000 x 20,000 px image; legacy
encodings read and marked as guessed; a recipe listing a type docmill cannot read is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from docmill.errors import ConfigError
from docmill.settings import FormatSettings, InventorySettings, Settings
from examples import formats as F
from tasks.cost.estimate import estimate_docs
from tasks.per_file.gate import evidence_report
from tasks.recipes import Recipe, load_recipe
from tasks.request import SendAs, load_payload, needs_parts, page_parts
from tasks.source.inventory import Document, inventory, load_bytes
from tasks.source.readers import Unreadable, read
from tests.fixtures.formats import invoice

RECIPE = load_recipe("invoices")


def docs_of(root: Path, **formats: object) -> dict[str, Document]:
    settings = Settings(formats=FormatSettings(**formats))  # type: ignore[arg-type]
    return {d.doc_id: d for d in inventory(str(root), settings, doc_types=RECIPE.doc_types)}


def test_bad_pdfs_images_and_office_files_each_get_their_reason(tmp_path: Path) -> None:
    files = {
        "encrypted.pdf": F.text_pdf([invoice(1)], encrypt=True),
        "corrupt.pdf": b"%PDF-1.7\n1 0 obj << /Type /Catalog >> broken",
        "zero-pages.pdf": F.empty_pdf(),
        "2000-pages.pdf": F.text_pdf([invoice(1)] * 2000, share_content=True),
        "bomb.docx": F.zip_bomb_docx(),
        "macros.docm": F.with_macros(F.docx_bytes(invoice(2))),
        "renamed-macros.docx": F.with_macros(F.docx_bytes(invoice(3))),
        "huge.png": F.huge_png_header(20_000, 20_000),
        "old.doc": b"\xd0\xcf\x11\xe0 legacy word",
        "good.pdf": F.text_pdf([invoice(4)]),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with open(tmp_path / "200mb.pdf", "wb") as f:  # sparse: 200 MB on the file system, no disk used
        f.write(F.text_pdf([invoice(5)]))
        f.truncate(200 * 1024 * 1024)
    docs = docs_of(tmp_path)
    reasons = {d: (doc.skip_reason.value if doc.skip_reason else None) for d, doc in docs.items()}
    assert reasons == {
        "200mb.pdf": "oversized",
        "2000-pages.pdf": "over_limit",
        "bomb.docx": "over_limit",
        "corrupt.pdf": "corrupt",
        "encrypted.pdf": "encrypted",
        "good.pdf": None,
        "huge.png": "over_limit",
        "macros.docm": "macro_enabled",
        "old.doc": "unsupported_type",
        "renamed-macros.docx": "macro_enabled",
        "zero-pages.pdf": "empty",
    }
    detail = {d: doc.skip_detail or "" for d, doc in docs.items()}
    assert "2000 pages" in detail["2000-pages.pdf"] and "zip bomb" in detail["bomb.docx"]
    assert "8000" in detail["huge.png"] and "encrypted" in detail["encrypted.pdf"]
    assert "vbaProject.bin" in detail["macros.docm"]
    assert docs["good.pdf"].status == "ok" and docs["good.pdf"].send_as == "text"
    allowed = docs_of(tmp_path, allow_macros=True)["macros.docm"]
    macros_ok = Settings(formats=FormatSettings(allow_macros=True))
    assert allowed.status == "ok" and "INV-2" in load_payload(allowed, RECIPE, macros_ok).text


def test_each_office_format_reads_with_pages(tmp_path: Path) -> None:
    docx = read("docx", F.docx_bytes(["Invoice number: INV-1", "Total: 3.00"], page_break_after=0))
    assert docx.text.split("\f") == ["Invoice number: INV-1", "Total: 3.00"] and len(docx.pages) == 2
    xlsx = read("xlsx", F.xlsx_bytes({"Invoice": [["Total", 12.5]], "Items": [["Pens", 2]]}))
    assert xlsx.unit == "sheet" and xlsx.text == "Sheet: Invoice\nTotal,12.5\fSheet: Items\nPens,2"
    pptx = read("pptx", F.pptx_bytes([["Invoice INV-7", "Total: 8.00"], ["Terms"]], notes=["paid"]))
    assert pptx.unit == "slide" and pptx.page_of(pptx.text.index("Terms")) == 2 and "paid" in pptx.text
    with pytest.raises(Unreadable) as e:
        read("xlsx", b"PK\x03\x04 not a zip at all")
    assert e.value.reason == "corrupt"


def test_legacy_encodings_are_read_and_marked_guessed(tmp_path: Path) -> None:
    texts = {
        "latin1.txt": (
            "Rechnung Nr.: R-77\nLieferant: Müller & Söhne KG\nGesamtbetrag: 99,00 EUR\n",
            "latin-1",
        ),
        "win.csv": ("field,value\nVendor,Café “Crème” – Paris\nTotal,€12.50\n", "cp1252"),
        "sjis.txt": ("請求書番号: INV-2024\n株式会社山田商事\n合計金額: 12,500円\n", "shift_jis"),
        "utf8.txt": ("Vendor: Müller\n", "utf-8"),
    }
    for name, (text, enc) in texts.items():
        (tmp_path / name).write_bytes(text.encode(enc))
    docs = docs_of(tmp_path)
    assert {d: doc.encoding for d, doc in docs.items()} == {
        "latin1.txt": "cp1252",
        "win.csv": "cp1252",
        "sjis.txt": "cp932",
        "utf8.txt": None,
    }
    for name, (text, _) in texts.items():
        assert docs[name].status == "ok"
        assert load_payload(docs[name], RECIPE, Settings()).text == text


def test_email_attachments_are_linked_documents_within_limits(tmp_path: Path) -> None:
    pdf = F.text_pdf([invoice(8)])
    many = [(f"inv-{i:02d}.txt", "text/plain", f"Invoice number: INV-{i}\n".encode()) for i in range(50)]
    (tmp_path / "fifty.eml").write_bytes(F.eml_bytes("50 invoices", "attached", many, message_id="<fifty@x>"))
    (tmp_path / "one.eml").write_bytes(
        F.eml_bytes("Invoice", "see attached", [("inv.pdf", "application/pdf", pdf)])
    )
    docs = docs_of(tmp_path, max_attachments=20)
    kids = [d for d in docs.values() if d.parent == "fifty.eml"]
    assert len(kids) == 50 and sum(d.status == "ok" for d in kids) == 20
    assert {d.skip_reason for d in kids if d.status != "ok"} == {"over_limit"}
    attached = docs["one.eml/1-inv.pdf"]
    assert attached.parent == "one.eml" and attached.status == "ok" and load_bytes(attached) == pdf
    assert "1. inv.pdf (application/pdf" in load_payload(docs["one.eml"], RECIPE, Settings()).text
    assert len(docs_of(tmp_path)) == 2 + 50 + 1  # the default limit (100) takes every attachment


def test_broken_attachments_are_refused_by_the_inventory_and_not_priced(tmp_path: Path) -> None:
    """The public mail fixtures' pattern: a 3-byte "PNG", and a truncated PDF inside a forwarded
    message, beside a good attachment. The inventory reads each attachment as loading will (the same
    bytes through the same reader): the broken ones are `corrupt` there, so nothing is sent for them and
    the estimate prices exactly the documents that load."""
    pdf = F.text_pdf([invoice(9)])
    inner = F.eml_bytes(
        "Inner", "fwd", [("broken.pdf", "application/pdf", pdf[: len(pdf) // 3])], message_id="<in@x>"
    )
    (tmp_path / "mixed.eml").write_bytes(
        F.eml_bytes(
            "Invoices",
            "attached",
            [
                ("LOGO.png", "image/png", b"H\xd2\x0f"),
                ("inv.pdf", "application/pdf", pdf),
                ("fwd.eml", "message/rfc822", inner),
            ],
            message_id="<out@x>",
        )
    )
    docs = docs_of(tmp_path)
    assert docs["mixed.eml/1-LOGO.png"].skip_reason == "corrupt"
    assert docs["mixed.eml/3-fwd.eml/1-broken.pdf"].skip_reason == "corrupt"
    sent = [d for d in docs.values() if d.status == "ok"]
    assert {d.doc_id for d in sent} == {"mixed.eml", "mixed.eml/2-inv.pdf", "mixed.eml/3-fwd.eml"}
    for doc in sent:  # every document the inventory takes loads, from its message, as the same bytes
        assert load_payload(doc, RECIPE, Settings()).content is not None
    assert load_bytes(docs["mixed.eml/2-inv.pdf"]) == pdf
    est = estimate_docs(list(docs.values()), RECIPE, Settings(store=str(tmp_path / "no-store")))
    assert est.documents == len(sent) and est.skipped == len(docs) - len(sent)


def test_a_loop_of_forwarded_messages_stops_with_a_reason(tmp_path: Path) -> None:
    inner = F.eml_bytes(
        "A", "first", [("inv.txt", "text/plain", b"Invoice number: INV-1\n")], message_id="<a@x>"
    )
    b = F.eml_bytes("Fwd: A", "fwd", [("a.eml", "message/rfc822", inner)], message_id="<b@x>")
    a_again = F.eml_bytes("Fwd: Fwd: A", "fwd again", [("b.eml", "message/rfc822", b)], message_id="<a@x>")
    (tmp_path / "loop.eml").write_bytes(a_again)
    docs = docs_of(tmp_path)
    assert docs["loop.eml/1-b.eml"].status == "ok"
    looped = docs["loop.eml/1-b.eml/1-a.eml"]
    assert looped.skip_reason == "forward_loop" and "<a@x>" in (looped.skip_detail or "")
    assert "loop.eml/1-b.eml/1-a.eml/1-inv.txt" not in docs  # nothing past the loop is read twice
    deep = docs_of(tmp_path, max_nesting=1)
    assert deep["loop.eml/1-b.eml"].status == "ok" and deep["loop.eml/1-b.eml/1-a.eml"].skip_reason in (
        "forward_loop",
        "over_limit",
    )


def test_scans_go_as_pdfs_images_as_images_and_long_pdfs_in_page_ranges(tmp_path: Path) -> None:
    (tmp_path / "scan.pdf").write_bytes(F.scanned_pdf([invoice(1), invoice(2)]))
    (tmp_path / "mixed.pdf").write_bytes(F.text_pdf([invoice(3), ["short"]]))
    (tmp_path / "photo.jpg").write_bytes(F.jpg_image(invoice(4)))
    (tmp_path / "long.pdf").write_bytes(F.text_pdf([invoice(5)] * 250, share_content=True))
    docs = docs_of(tmp_path, pdf_send_as="pdf")
    assert docs["scan.pdf"].textless_pages == 2 and docs["scan.pdf"].image_tokens == 3200
    assert docs["photo.jpg"].send_as == "image"
    assert needs_parts(docs["long.pdf"], RECIPE, Settings())
    parts = page_parts(docs["long.pdf"], Settings())
    assert parts[0][0] == 1 and parts[-1][1] == 250 and all(b - a < 100 for a, b in parts)
    auto = docs_of(tmp_path)
    assert auto["mixed.pdf"].send_as == "pdf" and auto["long.pdf"].send_as == "text"  # a textless page
    text_recipe = Recipe(**{**RECIPE.__dict__, "pdf_mode": "text", "evidence_fields": ("evidence",)})
    assert load_payload(auto["mixed.pdf"], text_recipe, Settings()).send is SendAs.TEXT
    assert load_payload(auto["scan.pdf"], text_recipe, Settings()).send is SendAs.PDF  # no text to send


def test_gate_rule_for_pages_without_text(tmp_path: Path) -> None:
    (tmp_path / "mixed.pdf").write_bytes(F.text_pdf([invoice(3), ["short"]]))
    doc = docs_of(tmp_path)["mixed.pdf"]
    payload = load_payload(doc, RECIPE, Settings())

    def judge(evidence: str, value: float = 1.0) -> tuple[list[dict], dict]:
        # the value its evidence states (the gate also checks that an excerpt contains its value)
        return evidence_report(RECIPE, {"total": {"value": value, "evidence": evidence}}, payload)

    flags, found = judge("[page 1] Total: 1,190.00", 1190.0)
    assert not flags and found["$.total.evidence"]["verified"] and found["$.total.evidence"]["page"] == 1
    flags, found = judge("[page 2] Total: 9,999.00", 9999.0)  # page 2 has no text layer: not checkable
    assert not flags and found["$.total.evidence"] == {
        "start": None,
        "end": None,
        "page": 2,
        "verified": False,
    }
    flags, _ = judge("[page 1] Total: 9,999.00")  # page 1 has text: it must be there
    assert flags and "page 1" in flags[0]["why"]
    flags, _ = judge("[page 7] Total: 1.00")
    assert flags and "2 page(s)" in flags[0]["why"]
    flags, _ = judge("[page 2] Total: 9,999.00", 1.0)  # unverifiable, but it must state its value
    assert [f["problem"] for f in flags] == ["evidence_unsupported"]


def test_a_recipe_listing_a_type_docmill_cannot_read_is_refused_at_load() -> None:
    fields = {**RECIPE.__dict__, "evidence_fields": ("evidence",)}
    with pytest.raises(ConfigError, match=r"cannot read: msg \(Outlook .*GPL-3.0"):
        Recipe(**{**fields, "doc_types": frozenset({"txt", "msg"})})
    with pytest.raises(ConfigError, match="cannot read: xyz"):
        Recipe(**{**fields, "doc_types": frozenset({"xyz"})})
    assert Recipe(**{**fields, "doc_types": frozenset({"docx", "eml", "png"})}).doc_types


def test_max_document_bytes_still_bounds_reading(tmp_path: Path) -> None:
    (tmp_path / "a.pdf").write_bytes(F.text_pdf([invoice(1)]))
    settings = Settings(inventory=InventorySettings(max_document_bytes=100))
    assert next(inventory(str(tmp_path), settings)).skip_reason == "oversized"

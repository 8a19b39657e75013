"""The PDF text layer as pdfium reads it: values stay whole tokens where a table's cells are drawn
out of order, offsets and page spans are exact, a garbled text layer (a font without a Unicode map)
makes its page go to the model as a page, and concurrent reads in threads agree."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from docmill.settings import Settings
from examples import formats as F
from tasks.source.inventory import inventory
from tasks.source.readers.pdf import read_pdf
from tasks.source.readers.pdf_text import poor_text
from tests.fixtures.formats import invoice

# Cells drawn right to left on one baseline, as the public invoices that pypdf glued draw them.
ROWS = [
    [(300, "Factuurnummer:"), (56, "993548900")],
    [(400, "VF1005193039"), (56, "SCONL0303006280999")],
    [(56, "Totaal"), (200, "717,97")],
    [(56, "Invoice date and number are stated on this invoice as printed")],
]


def whole(text: str, value: str) -> bool:
    return re.search(r"(?<!\w)" + re.escape(value) + r"(?!\w)", text) is not None


def test_values_drawn_out_of_order_stay_whole_tokens() -> None:
    text = read_pdf(F.table_pdf(ROWS)).text
    for value in ("993548900", "Factuurnummer:", "VF1005193039", "SCONL0303006280999", "717,97"):
        assert whole(text, value), (value, text)


def test_offsets_and_page_spans_are_exact() -> None:
    pages = [invoice(1), ["Second page: Total due 1,190.00 EUR", "paid by transfer, thank you!"], invoice(3)]
    content = read_pdf(F.text_pdf(pages))
    assert content.page_count == 3 and content.textless_pages == ()
    for page, lines in zip(content.pages, pages, strict=True):
        assert content.text[page.start : page.end] == "\n".join(lines)
        assert content.page_of(page.start) == page.number == content.page_of(page.end - 1)
    assert content.text.count("\f") == 2


def test_a_garbled_text_layer_is_poor_and_its_page_goes_to_the_model_as_a_page(tmp_path: Path) -> None:
    garbled = F.garbled_pdf([invoice(1)])
    content = read_pdf(garbled)
    assert content.textless_pages == (1,) and content.text == ""
    (tmp_path / "garbled.pdf").write_bytes(garbled)
    (tmp_path / "text.pdf").write_bytes(F.text_pdf([invoice(2)]))
    docs = {d.doc_id: d for d in inventory(str(tmp_path), Settings())}
    assert docs["garbled.pdf"].status == "ok" and docs["garbled.pdf"].send_as == "pdf"
    assert docs["garbled.pdf"].textless_pages == 1 and docs["text.pdf"].send_as == "text"


def test_poor_is_most_characters_unreadable_not_some() -> None:
    assert poor_text("\x01\x02\x03 ab") and poor_text("\ufffd\ufffd\ufffd x")
    assert poor_text("abcd", map_errors=3) and not poor_text("abcd", map_errors=2)
    assert not poor_text("Total 5.00 \ufffd") and not poor_text("")


def test_reads_in_threads_agree() -> None:
    datas = [F.text_pdf([invoice(i)]) for i in range(6)] + [F.garbled_pdf([invoice(9)])]
    alone = [read_pdf(d) for d in datas]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(read_pdf, datas * 3))
    assert together == alone * 3

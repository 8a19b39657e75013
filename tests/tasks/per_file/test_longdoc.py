"""Long documents: structural split (property tests) and a 2 MB document extracted chunk by chunk
against the emulator, merged with offsets that point back into the original text."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoints.store import open_store
from docmill.settings import Settings
from emulator.tokens import text_tokens
from tasks.api.client import ModelClient
from tasks.per_file.longdoc import Chunk, extract_long, merge_chunks, split_document
from tasks.per_file.settle import Pass
from tasks.recipes import load_recipe
from tasks.request import goes_long, text_payload

PIECES = st.sampled_from(["\f", "\n", "\n\n", "# Title\n", "## Sub\n", "word ", "Total: 1.00 ", "x" * 37])


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=200).map("".join), st.integers(1, 60))
def test_chunks_are_contiguous_cover_the_text_and_fit(text: str, max_tokens: int) -> None:
    chunks = split_document(text, max_tokens, chars_per_token=1.0)
    assert "".join(c.text for c in chunks) == text
    assert chunks[0].start == 0 and chunks[-1].end == len(text)
    for a, b in itertools.pairwise(chunks):
        assert a.end == b.start
    for c in chunks:
        assert text[c.start : c.end] == c.text and len(c.text) <= max_tokens
        assert c.text or len(chunks) == 1


def test_the_coarsest_structure_wins() -> None:
    page = "# Head\n\n" + "para one.\n\n" * 10
    text = "\f".join([page] * 6)
    chunks = split_document(text, len(page) * 2 + 5, chars_per_token=1.0)
    assert [c.text.count("\f") for c in chunks[:-1]] == [2] * (len(chunks) - 1)  # whole pages
    assert all(text[c.end - 1] == "\f" for c in chunks[:-1])
    small = split_document(page, 30, chars_per_token=1.0)  # a page too big: paragraphs, then lines
    assert all(len(c.text) <= 30 and c.text.endswith("\n\n") for c in small)  # whole paragraphs


def make_doc(size: int = 2_000_000) -> str:
    pages: list[str] = []
    total = 0
    while total < size:
        p = len(pages)
        lines = [f"# Section {p}", ""]
        for k in range(40):
            lines.append(
                f"Narrative line {k} of page {p}: the shipment was inspected and logged without remarks."
            )
            if k % 10 == 9:
                lines.append("")
        if p == 1:
            lines.insert(3, "Vendor: Zeta Widgets GmbH")
        if p == 150:
            lines.insert(5, "Invoice number: INV-2MB-0077")
        pages.append("\n".join(lines))
        total += len(pages[-1]) + 1
    pages.append("Total: 9,999.00 EUR\nCurrency: EUR")
    return "\f".join(pages)


def test_a_2mb_document_is_split_extracted_and_merged_with_offsets(emulator: Any, tmp_path: Path) -> None:
    text = make_doc()
    assert len(text) >= 2_000_000
    s = Settings(store=str(tmp_path))
    assert goes_long(None, None, text_payload(text), s)
    assert not goes_long(None, None, text_payload(text[:100_000]), s)
    client = ModelClient(s, base_url=emulator.base_url, api_key="test-key", sleep=lambda _s: None)
    p = Pass(load_recipe("invoices"), "r", open_store(str(tmp_path)), client, s)
    result = extract_long(p, text, doc_id="big")
    chunks = result["chunks"]
    assert len(chunks) >= 8 and chunks[0]["start"] == 0 and chunks[-1]["end"] == len(text)
    assert all(text[c["end"] - 1] == "\f" for c in chunks[:-1])  # cut between pages
    assert result["failed_chunks"] == [] and result["compactions"] == 0
    assert emulator.state.accounting.errors_by_status == {}
    # each chunk goes out alone (with the pinned facts): the document's tokens are paid about once
    billed = emulator.state.accounting.billed
    sent = sum(
        int(b.usage.get(f) or 0)
        for b in billed
        for f in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    )
    assert len(billed) == len(chunks) and sent <= 1.3 * text_tokens(text)

    out, prov = result["output"], result["provenance"]
    expected = {
        "vendor_name": ("Zeta Widgets GmbH", "Vendor: Zeta Widgets GmbH"),
        "invoice_number": ("INV-2MB-0077", "Invoice number: INV-2MB-0077"),
        "total": (9999.0, "Total: 9,999.00 EUR"),
    }
    for field, (value, evidence) in expected.items():
        assert out[field] == {"value": value, "evidence": evidence}
        where = prov[field]
        assert text[where["start"] : where["end"]] == evidence
        assert where["start"] == text.index(evidence)
        chunk = chunks[where["chunk"]]
        assert chunk["start"] <= where["start"] < where["end"] <= chunk["end"]
    assert prov["invoice_number"]["chunk"] not in (0, len(chunks) - 1)  # found in the middle


def test_merged_lists_drop_exact_duplicates_and_keep_offsets() -> None:
    text = "Item: Bolt 2.00\n\fItem: Bolt 2.00\nItem: Nut 1.00\n"
    chunks = [Chunk(0, 0, 17, text[:17]), Chunk(1, 17, len(text), text[17:])]
    bolt = {"description": "Bolt", "amount": 2.0, "evidence": "Item: Bolt 2.00"}
    nut = {"description": "Nut", "amount": 1.0, "evidence": "Item: Nut 1.00"}
    merged, prov = merge_chunks(text, chunks, [{"line_items": [bolt]}, {"line_items": [bolt, nut]}])
    assert merged["line_items"] == [bolt, nut]  # the repeated Bolt once
    assert prov["line_items[0]"] == {"chunk": 0, "start": 0, "end": 15}
    assert prov["line_items[1]"] == {"chunk": 1, "start": text.index("Item: Nut"), "end": len(text) - 1}

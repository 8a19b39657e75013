"""A document above the per-file budget goes through the long-document path inside the chain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints.store import open_store
from docmill.settings import ContextSettings
from flows.extract import run_extract
from tests.flows.helpers import outcomes_of, settings_for


def test_long_document_is_split_extracted_and_merged_with_offsets(tmp_path: Path, emulator: Any) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    filler = "\n\n".join(f"Paragraph {i}: terms and conditions apply to shipment {i}." for i in range(400))
    text = (
        "Invoice number: INV-7001\nVendor: Longform Paper AG\nInvoice date: 2026-10-02\nCurrency: CHF\n\n"
        + filler
        + "\n\nSubtotal: 900.00\nTax: 69.30\nTotal: 969.30\n"
    )
    (corpus / "deep" / "folder").mkdir(parents=True)
    (corpus / "deep" / "folder" / "long.txt").write_text(text)
    (corpus / "short.txt").write_text("Invoice number: INV-7002\nVendor: Tiny AG\nTotal: 5.00\n")
    settings = settings_for(emulator, str(tmp_path / "store")).model_copy(
        update={"context": ContextSettings(document_budget_tokens=2000, budget_tokens=20000)}
    )
    summary = run_extract(str(corpus), "invoices", settings=settings, progress=False)
    o = outcomes_of(open_store(settings.store), summary["run_id"])["deep/folder/long.txt"]
    assert o["state"] == "succeeded", (o.get("reason"), o.get("last_error"))
    assert o["output"]["invoice_number"]["value"] == "INV-7001"
    assert o["output"]["total"]["value"] == 969.30
    chunks = o["provenance"]["chunks"]
    assert len(chunks) > 2
    fields = o["provenance"]["fields"]
    for name in ("invoice_number", "total"):
        prov = fields[name]
        assert text[prov["start"] : prov["end"]] == o["output"][name]["evidence"]
    assert fields["total"]["chunk"] == len(o["provenance"]["chunks"]) - 1  # found in the last chunk
    from checkpoints.costs import CostLedger

    by_doc = CostLedger(open_store(settings.store), summary["run_id"]).totals()["by_doc"]
    assert by_doc["deep/folder/long.txt"] > 0  # long-document calls are costed to the document
    spans = [(c["start"], c["end"]) for c in chunks]
    assert spans[0][0] == 0 and spans[-1][1] == len(text)

"""A document above the per-file budget goes through the long-document path inside the chain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints.store import open_store
from docmill.settings import ContextSettings
from flows.entry import RunWiring, run_extract
from flows.run.context import RunParams
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
    summary = run_extract(
        RunParams(str(corpus), "invoices"), settings=settings, wiring=RunWiring(progress=False)
    )
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


def test_long_document_ledger_equals_the_bill_through_a_stall_and_a_dropped_stream(
    tmp_path: Path, emulator: Any
) -> None:
    """Issue 22: a long document's calls stream. A 30 s stall (virtual time at 100x: 0.3 s real, under
    a read timeout standing for 120 s) is waited out; a stream dropped after its final usage is
    retried, and the dropped attempt the API billed is recorded: ledger = bill to 1e-9."""
    from checkpoints.costs import CostLedger

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    filler = "\n\n".join(f"Paragraph {i}: terms and conditions apply to shipment {i}." for i in range(300))
    (corpus / "long.txt").write_text(
        "Invoice number: INV-7101\nVendor: Longform Paper AG\n\n" + filler + "\n\nTotal: 969.30\n"
    )
    emulator.state.configure({"clock_speed": 100.0})
    stall = emulator.state.faults.add(kind="stall", seconds=30.0, marker="Paragraph 5:", count=1)
    drop = emulator.state.faults.add(
        kind="stream_drop", after_events=10_000, marker="Paragraph 250:", count=1
    )
    settings = settings_for(emulator, str(tmp_path / "store"), timeout_seconds=1.2).model_copy(
        update={"context": ContextSettings(document_budget_tokens=2000, budget_tokens=20000)}
    )
    summary = run_extract(
        RunParams(str(corpus), "invoices"), settings=settings, wiring=RunWiring(progress=False)
    )
    store = open_store(settings.store)
    assert outcomes_of(store, summary["run_id"])["long.txt"]["state"] == "succeeded"
    assert stall.hits == 1 and drop.hits == 1
    entries = list(CostLedger(store, summary["run_id"]).entries())
    dropped = [e for e in entries if e.unanswered]
    assert len(dropped) == 1 and not dropped[0].possibly_billed and dropped[0].doc_id == "long.txt"
    assert emulator.state.drain()
    bill = emulator.state.accounting
    assert abs(CostLedger(store, summary["run_id"]).totals()["usd"] - bill.total_usd()) < 1e-9
    assert len(entries) == len(bill.billed)  # every billed request is one ledger entry

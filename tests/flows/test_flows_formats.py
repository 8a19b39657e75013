"""Documents as they come (issue 24), end to end offline: a generated mixed corpus (text PDF, scanned
PDF, .docx, .xlsx, .pptx, .eml with a PDF and an image attached, .png, .jpg, a Latin-1 text) runs in realtime and in
batch mode with every format extracted, evidence naming its page in the report and exports,
`estimate` within 10% of what the emulator bills for the per-file pass, and the same command again
paying nothing twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checkpoints.costs import CostLedger
from checkpoints.store import open_store
from docmill.settings import ApiSettings, BatchSettings, Settings
from flows.entry import RunWiring, run_extract
from flows.run.context import RunParams
from tasks.cost.estimate import estimate_source
from tests.fixtures.emulator import fast_batches
from tests.fixtures.formats import make_mixed
from tests.flows.helpers import outcomes_of


def _settings(emulator: Any, store: Path) -> Settings:
    return Settings(
        store=str(store),
        api=ApiSettings(base_url=emulator.base_url, concurrency=4, backoff_max_seconds=0.02),
        batch=BatchSettings(poll_seconds=0.02, poll_max_seconds=0.05),
    )


@pytest.mark.parametrize("mode", ["realtime", "batch"])
def test_mixed_corpus_extracts_every_format_with_pages_and_a_true_estimate(
    tmp_path: Path, emulator: Any, mode: str
) -> None:
    sent = make_mixed(tmp_path / "corpus")
    if mode == "batch":
        fast_batches(emulator)  # a batch takes a minute of virtual time
    settings = _settings(emulator, tmp_path / "store")
    est = estimate_source(str(tmp_path / "corpus"), "invoices", settings)
    assert est.sent_as == {"text": 7, "pdf": 1, "image": 3}

    summary = run_extract(
        RunParams(str(tmp_path / "corpus"), "invoices", mode=mode),
        settings=settings,
        wiring=RunWiring(progress=False),
    )
    store = open_store(settings.store)
    outcomes = outcomes_of(store, summary["run_id"])
    assert {d: o["state"] for d, o in outcomes.items()} == dict.fromkeys(sent, "succeeded")
    for doc_id, how in sent.items():
        o = outcomes[doc_id]
        assert (o.get("provenance") or {}).get("sent_as", "text") == how, doc_id
        if doc_id != "mail.eml":  # an invoice in every other format
            assert (
                o["output"]["invoice_number"]["value"]
                == "INV-" + o["output"]["invoice_number"]["evidence"][-4:]
            )
    fields = outcomes["scan.pdf"]["provenance"]["fields"]
    assert fields["$.total.evidence"] == {"start": None, "end": None, "page": 2, "verified": False}
    assert fields["$.invoice_number.evidence"]["page"] == 1  # named by the model, not checkable: unverified
    assert not outcomes["scan.pdf"]["output"]["total"]["evidence"].startswith("[page")  # stripped, kept apart
    text_pdf = outcomes["text.pdf"]["provenance"]["fields"]["$.total.evidence"]
    assert text_pdf["verified"] is True and text_pdf["page"] == 1 and text_pdf["start"] is not None
    assert outcomes["deck.pptx"]["provenance"]["fields"]["$.total.evidence"]["page"] == 2  # slide 2

    # what the emulator billed for the per-file pass, against the estimate made before
    billed = CostLedger(store, summary["run_id"]).totals()["by_pass"]["file"]
    estimated = est.usd(batch=mode == "batch")
    assert abs(estimated - billed) / billed < 0.10, (estimated, billed)

    report = store.get(f"runs/{summary['run_id']}/report.md").decode()
    assert "p. 2, unverified (no text layer)" in report and "p. 1, chars" in report
    assert "succeeded (sent as pdf)" in report and "succeeded (read as cp1252 (guessed))" in report
    assert outcomes["legacy.txt"]["output"]["vendor_name"]["value"] == "Müller & Söhne KG"
    rows = [
        json.loads(line) for line in store.get(f"runs/{summary['run_id']}/exports/results.jsonl").splitlines()
    ]
    scan = next(r for r in rows if r["doc_id"] == "scan.pdf")
    assert scan["provenance"]["fields"]["$.total.evidence"]["page"] == 2
    csv_text = store.get(f"runs/{summary['run_id']}/exports/results.csv").decode()
    assert (
        "value.total.page" in csv_text.splitlines()[0] and "value.total.verified" in csv_text.splitlines()[0]
    )

    # the same command again: every document from the ledger, nothing billed twice
    answers = len(emulator.state.accounting.billed)
    again = run_extract(
        RunParams(str(tmp_path / "corpus"), "invoices", mode=mode),
        settings=settings,
        wiring=RunWiring(progress=False),
    )
    assert len(emulator.state.accounting.billed) == answers
    assert again["cost_usd"] == 0 or again["run_id"] == summary["run_id"]

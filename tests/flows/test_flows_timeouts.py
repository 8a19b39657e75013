"""A request that times out after it was sent is in the run's cost ledger as possibly billed (worst
case, flagged), shown in the report, and resent at most once (real SDK against the emulator)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints.costs import CostLedger
from checkpoints.store import open_store
from docmill.settings import ApiSettings, Settings
from flows.extract import run_extract
from tests.flows.helpers import make_corpus, plant


def test_timeout_after_sending_is_recorded_possibly_billed(tmp_path: Path, emulator: Any) -> None:
    corpus, truth = make_corpus(tmp_path, count=4, seed=4)
    slow = plant(corpus, truth, "PLANTED-SLOW")
    emulator.state.faults.add(kind="latency", latency_ms=1500, marker="PLANTED-SLOW", count=1)
    api = ApiSettings(
        base_url=emulator.base_url, backoff_max_seconds=0.0, timeout_seconds=0.6, max_tokens=1024
    )
    settings = Settings(store=str(tmp_path / "store"), api=api)
    summary = run_extract(str(corpus), "invoices", settings=settings, progress=False)

    store = open_store(settings.store)
    entries = list(CostLedger(store, summary["run_id"]).entries())
    flagged = [e for e in entries if e.possibly_billed]
    assert len(flagged) == 1 and flagged[0].doc_id == slow and flagged[0].usd > 0
    answered = [e for e in entries if e.doc_id == slow and not e.possibly_billed]
    assert len(answered) == 1  # resent once, answered
    totals = CostLedger(store, summary["run_id"]).totals()
    assert emulator.state.drain()
    assert totals["usd"] >= emulator.state.accounting.total_usd()  # the worst case covers the real bill
    assert "Possibly billed:" in store.get(f"runs/{summary['run_id']}/report.md").decode()

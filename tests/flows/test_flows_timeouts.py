"""A request that times out after it was sent is in the run's cost ledger as possibly billed (worst
case, flagged), shown in the report, and resent at most once (real SDK against the emulator)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints.costs import CostLedger
from checkpoints.store import open_store
from docmill.settings import ApiSettings, Settings
from flows.entry import RunWiring, run_extract
from flows.run.context import RunParams
from tests.flows.helpers import make_corpus, plant


def test_timeout_after_sending_is_recorded_possibly_billed(tmp_path: Path, emulator: Any) -> None:
    corpus, truth = make_corpus(tmp_path, count=4, seed=4)
    slow = plant(corpus, truth, "PLANTED-SLOW")
    emulator.state.faults.add(kind="latency", latency_ms=1500, marker="PLANTED-SLOW", count=1)
    api = ApiSettings(
        base_url=emulator.base_url, backoff_max_seconds=0.0, timeout_seconds=0.6, max_tokens=1024
    )
    settings = Settings(store=str(tmp_path / "store"), api=api)
    summary = run_extract(
        RunParams(str(corpus), "invoices"), settings=settings, wiring=RunWiring(progress=False)
    )

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


def test_dropped_streams_on_the_per_file_path_are_retried_and_recorded(tmp_path: Path, emulator: Any) -> None:
    """Issue 22 point 5: a per-file call that streams (here every one: stream_min_max_tokens 2,048; the
    default streams from 8,192) read on the event loop (tasks.api.sse); a connection dropped mid-stream
    is retried and the dropped attempt recorded: exactly when the stream had reported its final usage,
    else possibly billed at its bound. The ledger covers the bill; its certain part never exceeds it."""
    corpus, truth = make_corpus(tmp_path, count=6, seed=5)
    late = plant(corpus, truth, "PLANTED-LATE-DROP")
    early = plant(corpus, truth, "PLANTED-EARLY-DROP", skip={late})
    emulator.state.faults.add(kind="stream_drop", marker="PLANTED-LATE-DROP", after_events=10_000, count=1)
    emulator.state.faults.add(kind="stream_drop", marker="PLANTED-EARLY-DROP", count=1)  # mid-content
    api = ApiSettings(base_url=emulator.base_url, stream_min_max_tokens=2048)
    settings = Settings(store=str(tmp_path / "store"), api=api)
    summary = run_extract(
        RunParams(str(corpus), "invoices"), settings=settings, wiring=RunWiring(progress=False)
    )

    ledger = CostLedger(open_store(settings.store), summary["run_id"])
    unanswered = {e.doc_id: e for e in ledger.entries() if e.unanswered}
    assert set(unanswered) == {late, early}
    assert not unanswered[late].possibly_billed and unanswered[early].possibly_billed
    totals = ledger.totals()
    assert emulator.state.drain()
    bill = emulator.state.accounting.total_usd()
    certain = totals["usd"] - totals["possibly_billed_usd"]
    assert certain <= bill + 1e-9 <= totals["usd"] + 1e-9
    early_bill = sum(b.usd for b in emulator.state.accounting.billed) - certain
    assert early_bill > 0  # what the mid-content drop cost: inside its recorded bound
    assert early_bill <= unanswered[early].usd + 1e-9

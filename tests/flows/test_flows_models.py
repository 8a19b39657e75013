"""Models on the day of the real API (issue 14), real SDK against the emulator: answers that name
a dated id are priced on every path, an unpriced model's answers are kept (`unpriced`, never
`failed`), a retired pinned model stops the run before anything is sent (exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checkpoints.costs import CostLedger
from checkpoints.store import open_store
from docmill.settings import ApiSettings, BatchSettings, Settings
from flows.entry import RunWiring, run_extract
from flows.run.context import RunParams
from tasks.reporting.status import run_status, status_text
from tests.fixtures.emulator import fast_batches
from tests.flows.helpers import make_corpus, outcomes_of
from tests.flows.test_flows_cost import assert_ledger_matches_emulator

HAIKU, HAIKU_DATED = "claude-haiku-4-5", "claude-haiku-4-5-20251001"


def _settings(emulator: Any, store: str, model: str, **api: Any) -> Settings:
    return Settings(
        store=store,
        api=ApiSettings(
            base_url=emulator.base_url,
            backoff_max_seconds=0.02,
            concurrency=4,
            model=model,
            integration_model=model,
            **api,
        ),
        batch=BatchSettings(poll_seconds=0.02, poll_max_seconds=0.05),
    )


@pytest.mark.parametrize("mode", ["realtime", "batch"])
def test_dated_model_in_answers_prices_on_every_path(tmp_path: Path, emulator: Any, mode: str) -> None:
    if mode == "batch":
        fast_batches(emulator)
    corpus, _ = make_corpus(tmp_path, count=8, seed=4)
    settings = _settings(emulator, str(tmp_path / "store"), HAIKU, fallback_model=None)
    summary = run_extract(
        RunParams(str(corpus), "invoices", mode=mode), settings=settings, wiring=RunWiring(progress=False)
    )

    store = open_store(settings.store)
    assert summary["phase"] == "done" and summary["states"]["failed"] == 0
    totals = assert_ledger_matches_emulator(store, summary["run_id"], emulator)
    assert totals["usd"] > 0 and totals["unpriced"] == 0
    assert set(totals["by_pass"]) == {"file", "integration"}  # per-file (realtime or batch) and long task
    entries = list(CostLedger(store, summary["run_id"]).entries())
    assert {e.model for e in entries} == {HAIKU}  # priced by the model asked for
    assert {e.answered_model for e in entries} == {HAIKU_DATED}  # the answer's own id kept beside it
    assert any(e.batch for e in entries) == (mode == "batch")


def test_unknown_model_answers_are_kept_unpriced(tmp_path: Path, emulator: Any) -> None:
    future = "claude-future-9"
    emulator.state.configure({"extra_models": {future: {"input": 2.0, "output": 10.0}}})
    corpus, _ = make_corpus(tmp_path, count=6, seed=4)
    settings = _settings(emulator, str(tmp_path / "store"), future, fallback_model=None)
    summary = run_extract(
        RunParams(str(corpus), "invoices"), settings=settings, wiring=RunWiring(progress=False)
    )

    store = open_store(settings.store)
    run_id = summary["run_id"]
    outcomes = outcomes_of(store, run_id)
    assert outcomes and all(o["state"] != "failed" for o in outcomes.values())
    totals = CostLedger(store, run_id).totals()
    assert totals["entries"] == len(emulator.state.accounting.billed)  # every paid answer recorded
    assert totals["unpriced"] == totals["entries"] and totals["unpriced_models"] == [future]
    assert totals["usd"] == 0 and totals["tokens"]["input_tokens"] > 0
    assert "Unpriced:" in store.get(f"runs/{run_id}/report.md").decode()
    assert "unpriced (no price for claude-future-9" in status_text(run_status(store, run_id))


def test_retired_pinned_model_stops_at_start_with_exit_2(
    tmp_path: Path, emulator: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from docmill.settings import get_settings
    from flows.cli.main import main

    monkeypatch.setenv("DOCMILL_API__BASE_URL", emulator.base_url)
    monkeypatch.setenv(
        "DOCMILL_API__FALLBACK_MODEL", "claude-sonnet-4-5"
    )  # retired 2026-11-30 (docmill's model table)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("DOCMILL_RAISE_ERRORS", raising=False)
    get_settings.cache_clear()
    corpus, _ = make_corpus(tmp_path, count=3, seed=4)
    try:
        code = main(["--store", str(tmp_path / "store"), "run", str(corpus), "--no-prefect"])
    finally:
        get_settings.cache_clear()
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "api.fallback_model claude-sonnet-4-5 retired on 2026-11-30" in err[0]
    assert emulator.state.accounting.received == 0  # nothing was sent

"""Cost: the run's cost ledger equals the emulator's own accounting to the cent, across
transport retries (429, 529 and a fallback), repairs, batches and a budget stop + resume."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from checkpoints.costs import CostLedger
from checkpoints.manifest import ManifestStore
from checkpoints.store import open_store
from docmill.errors import BudgetExhausted
from docmill.settings import ApiSettings, BatchSettings, CostSettings, Settings
from flows.entry import RunWiring, resume_run, run_extract
from flows.run.context import RunParams
from tests.fixtures.emulator import fast_batches
from tests.flows.helpers import make_corpus, outcomes_of, plant


def fast_settings(emulator: Any, store: str, max_tokens: int = 4096, **kw: Any) -> Settings:
    api = ApiSettings(
        base_url=emulator.base_url, backoff_max_seconds=0.02, max_tokens=max_tokens, concurrency=4
    )
    batch = BatchSettings(poll_seconds=0.02, poll_max_seconds=0.05)
    return Settings(store=store, api=api, batch=batch, **kw)


def assert_ledger_matches_emulator(store: Any, run_id: str, emulator: Any) -> dict[str, Any]:
    billed = emulator.state.accounting.billed
    totals = CostLedger(store, run_id).totals()
    assert totals["entries"] == len(billed)  # one entry per billed answer, none lost, none twice
    assert totals["usd"] == pytest.approx(emulator.state.accounting.total_usd(), abs=1e-9)
    assert round(totals["usd"], 2) == round(emulator.state.accounting.total_usd(), 2)
    by_model: dict[str, float] = defaultdict(float)
    for b in billed:
        by_model[b.model] += b.usd
    assert totals["by_model"] == pytest.approx(dict(by_model), abs=1e-9)
    assert {e.request_id for e in CostLedger(store, run_id).entries() if not e.batch} == {
        b.request_id for b in billed if not b.batch
    }
    return totals


def test_cost_matches_emulator_across_retries_fallback_and_repairs(tmp_path: Path, emulator: Any) -> None:
    corpus, truth = make_corpus(tmp_path, count=20, seed=9)
    repaired = plant(corpus, truth, "PLANTED-SCHEMA")
    fell_back = plant(corpus, truth, "PLANTED-OVERLOAD", {repaired})
    faults = emulator.state.faults
    faults.add(kind="rate_limit", count=2, retry_after=0.02)
    faults.add(kind="overloaded", count=2)
    faults.add(kind="overloaded", marker="PLANTED-OVERLOAD", count=3)  # 3 in a row: the fallback answers
    faults.add(kind="schema_invalid", marker="PLANTED-SCHEMA", count=1)  # one repair
    settings = fast_settings(emulator, str(tmp_path / "store"))

    summary = run_extract(
        RunParams(str(corpus), "invoices"), settings=settings, wiring=RunWiring(progress=False)
    )

    store = open_store(settings.store)
    assert emulator.state.accounting.errors_by_status[429] == 2
    assert emulator.state.accounting.errors_by_status[529] == 5
    totals = assert_ledger_matches_emulator(store, summary["run_id"], emulator)
    assert summary["cost_usd"] == pytest.approx(totals["usd"], abs=1e-9)
    assert set(totals["by_pass"]) == {"file", "integration"}
    fallback = settings.api.fallback_model
    assert fallback in totals["by_model"]  # the fallback's answer is priced at its own rate
    entries = list(CostLedger(store, summary["run_id"]).entries())
    assert len([e for e in entries if e.doc_id == repaired]) == 2  # first answer + repair, both billed
    assert {e.model for e in entries if e.doc_id == fell_back} == {fallback}
    assert all(e.at is not None for e in entries)
    assert ManifestStore(store).load(summary["run_id"]).cost_usd == pytest.approx(totals["usd"])
    report = store.get(f"runs/{summary['run_id']}/report.md").decode()
    assert f"${totals['usd']:.4f}" in report


def test_batch_mode_cost_matches_emulator(tmp_path: Path, emulator: Any) -> None:
    fast_batches(emulator)
    corpus, truth = make_corpus(tmp_path, count=20, seed=9)
    repaired = plant(corpus, truth, "PLANTED-SCHEMA")
    emulator.state.faults.add(kind="schema_invalid", marker="PLANTED-SCHEMA", count=1)
    settings = fast_settings(emulator, str(tmp_path / "store"))

    summary = run_extract(
        RunParams(str(corpus), "invoices", mode="batch"), settings=settings, wiring=RunWiring(progress=False)
    )

    store = open_store(settings.store)
    billed = emulator.state.accounting.billed
    assert any(b.batch for b in billed) and summary["phase"] == "done"
    totals = assert_ledger_matches_emulator(store, summary["run_id"], emulator)
    entries = list(CostLedger(store, summary["run_id"]).entries())
    assert any(e.batch for e in entries)
    assert len([e for e in entries if e.doc_id == repaired]) == 2  # the repair round is billed too
    assert summary["cost_usd"] == pytest.approx(totals["usd"], abs=1e-9)


def test_budget_stops_the_run_and_a_higher_budget_finishes_it(tmp_path: Path, emulator: Any) -> None:
    corpus, truth = make_corpus(tmp_path, count=30, seed=3)
    store_dir = str(tmp_path / "store")
    cap = 0.08  # a request reserves up to ~$0.021 (1,024 output tokens); the whole run costs ~$0.17
    settings = fast_settings(emulator, store_dir, 1024, cost=CostSettings(max_cost_usd=cap), chunk_size=5)
    with pytest.raises(BudgetExhausted) as stopped:
        run_extract(
            RunParams(str(corpus), "invoices", run_id="capped"),
            settings=settings,
            wiring=RunWiring(progress=False),
        )
    assert "resume capped --max-cost-usd" in stopped.value.one_line()
    store = open_store(store_dir)
    m = ManifestStore(store).load("capped")
    assert m.phase == "budget_exhausted" and m.budget_usd == cap
    assert 'id="phase">budget_exhausted<' in store.get("runs/capped/report.html").decode()  # report so far
    spent = CostLedger(store, "capped").totals()["usd"]
    assert 0 < spent <= cap  # stopped before the limit, not after
    assert emulator.state.accounting.total_usd() == pytest.approx(spent, abs=1e-9)
    first_calls = len(emulator.state.accounting.billed)

    # The same cap again (the run's own, kept in the manifest): it may use what in-flight
    # reservations held back, but it stops again below the cap.
    with pytest.raises(BudgetExhausted):
        resume_run(
            "capped", settings=fast_settings(emulator, store_dir, 1024), wiring=RunWiring(progress=False)
        )
    assert len(emulator.state.accounting.billed) >= first_calls
    assert CostLedger(store, "capped").totals()["usd"] <= cap
    assert ManifestStore(store).load("capped").phase == "budget_exhausted"

    done = resume_run(
        "capped",
        settings=fast_settings(emulator, store_dir, 1024),
        max_cost_usd=5.0,
        wiring=RunWiring(progress=False),
    )
    assert done["phase"] == "done"
    n = len([t for t in truth if t["record"] == "document"])
    assert done["documents"] == n
    assert ManifestStore(store).load("capped").budget_usd == 5.0
    totals = assert_ledger_matches_emulator(store, "capped", emulator)
    assert done["cost_usd"] == pytest.approx(totals["usd"], abs=1e-9)
    outcomes = outcomes_of(store, "capped")
    assert all(o.get("failure_type") != "budget" for o in outcomes.values())
    for dup in (t for t in truth if t["record"] == "duplicate"):  # resolved after their originals
        assert outcomes[dup["doc_id"]]["state"] == outcomes[dup["duplicate_of"]]["state"]
    # nothing answered before the stop was paid for twice
    bodies = [b.body_sha256 for b in emulator.state.accounting.billed]
    assert len(bodies) == len(set(bodies))


def test_batch_budget_is_reserved_before_submitting(tmp_path: Path, emulator: Any) -> None:
    fast_batches(emulator)
    corpus, truth = make_corpus(tmp_path, count=30, seed=3)
    store_dir = str(tmp_path / "store")
    store = open_store(store_dir)
    tiny = fast_settings(emulator, store_dir, 1024, cost=CostSettings(max_cost_usd=0.001), chunk_size=5)
    with pytest.raises(BudgetExhausted):  # not even one chunk fits: nothing is submitted
        run_extract(
            RunParams(str(corpus), "invoices", mode="batch", run_id="b"),
            settings=tiny,
            wiring=RunWiring(progress=False),
        )
    assert emulator.state.accounting.received == 0
    assert ManifestStore(store).load("b").phase == "budget_exhausted"

    cap = 0.12  # room for some documents' batch worst case, not all: a smaller batch goes
    with pytest.raises(BudgetExhausted) as stopped:
        resume_run(
            "b",
            settings=fast_settings(emulator, store_dir, 1024, chunk_size=5),
            max_cost_usd=cap,
            wiring=RunWiring(progress=False),
        )
    billed = emulator.state.accounting.billed
    assert billed and all(b.batch for b in billed)
    assert 0 < CostLedger(store, "b").totals()["usd"] <= cap
    # the stop names the worst case of what was left out, and that it is what passed the cap
    said = stopped.value.one_line()
    left, went = (float(x) for x in re.findall(r"with a worst case of \$([0-9.]+)", said))
    assert went <= cap < went + left and "would pass its cap of $0.1200" in said

    done = resume_run(
        "b",
        settings=fast_settings(emulator, store_dir, 1024, chunk_size=5),
        max_cost_usd=5.0,
        wiring=RunWiring(progress=False),
    )
    assert done["phase"] == "done"
    assert_ledger_matches_emulator(store, "b", emulator)
    outcomes = outcomes_of(store, "b")
    for dup in (t for t in truth if t["record"] == "duplicate"):
        assert outcomes[dup["doc_id"]]["state"] == outcomes[dup["duplicate_of"]]["state"]
    bodies = [(b.custom_id, b.body_sha256) for b in emulator.state.accounting.billed]
    assert len(bodies) == len(set(bodies))  # nothing paid twice
    json.dumps(done)  # the summary stays plain data


def test_cli_budget_exit_4_one_line_then_resume_finishes(
    tmp_path: Path, emulator: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from docmill.settings import get_settings
    from flows.cli.main import main

    monkeypatch.setenv("DOCMILL_API__BASE_URL", emulator.base_url)
    monkeypatch.setenv("DOCMILL_API__MAX_TOKENS", "1024")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("DOCMILL_RAISE_ERRORS", raising=False)
    get_settings.cache_clear()
    store = str(tmp_path / "store")
    corpus, _ = make_corpus(tmp_path, count=12, seed=9)
    args = ["--store", store, "run", str(corpus), "--no-prefect", "--run-id", "r1", "--max-cost-usd", "0.03"]
    assert main(args) == 4
    lines = capsys.readouterr().err.strip().splitlines()
    err = [line for line in lines if not line.startswith("per-file pass [")]  # the progress bar
    assert len(err) == 1 and "docmill resume r1 --max-cost-usd" in err[0] and "Traceback" not in err[0]
    assert main(["--store", store, "status", "r1"]) == 0
    assert "budget_exhausted" in capsys.readouterr().out
    assert main(["--store", store, "resume", "r1", "--no-prefect", "--max-cost-usd", "5"]) == 0
    assert " r1 done" in capsys.readouterr().out
    get_settings.cache_clear()


def long_invoice(pages: int = 40) -> str:
    out = [
        "INVOICE",
        "Vendor: Zeta Widgets GmbH",
        "Invoice number: INV-LONG-0001",
        "Invoice date: 2026-03-01",
    ]
    for p in range(pages):
        out += [f"# Delivery log page {p}", ""]
        out += [f"Line {k} of page {p}: pallet inspected and logged without remarks." for k in range(30)]
        out.append("\f")
    out += ["Currency: EUR", "Subtotal: 100.00", "Tax: 19.00", "Total: 119.00", "Due date: 2026-03-31"]
    return "\n".join(out)


def test_long_document_chunk_by_chunk_costs_match_emulator(tmp_path: Path, emulator: Any) -> None:
    from docmill.settings import ContextSettings

    corpus, _ = make_corpus(tmp_path, count=12, seed=9)
    # at the corpus root: in a subfolder the long-document task id is not a safe key yet (UnsafeKey)
    (corpus / "inv-long.txt").write_text(long_invoice())
    settings = fast_settings(
        emulator,
        str(tmp_path / "store"),
        1024,
        context=ContextSettings(budget_tokens=8000, document_budget_tokens=2000),
    )

    summary = run_extract(
        RunParams(str(corpus), "invoices"), settings=settings, wiring=RunWiring(progress=False)
    )

    store = open_store(settings.store)
    assert outcomes_of(store, summary["run_id"])["inv-long.txt"]["state"] == "succeeded"
    totals = assert_ledger_matches_emulator(store, summary["run_id"], emulator)
    long_entries = [e for e in CostLedger(store, summary["run_id"]).entries() if "inv-long" in e.doc_id]
    assert len(long_entries) > 3  # the long document went chunk by chunk
    # each chunk went alone with the pinned facts: no history to compact (compaction costs are proven
    # in tests/tasks/conversation/test_task.py)
    assert sum(e.compaction_input_tokens for e in long_entries) == 0
    assert summary["cost_usd"] == pytest.approx(totals["usd"], abs=1e-9)


def test_repeated_integration_calls_after_resumes_are_recorded(tmp_path: Path, emulator: Any) -> None:
    """Integration answers that never pass the gate are asked again by every resume of the finished
    run: billed again, so recorded again (a `<key>-<attempt>` group used to be written once per run)."""
    corpus, _ = make_corpus(tmp_path, count=4, seed=8)
    emulator.state.faults.add(kind="schema_invalid", marker="per_file_results", count=10**6)
    settings = fast_settings(emulator, str(tmp_path / "store"))
    summary = run_extract(
        RunParams(str(corpus), "invoices"), settings=settings, wiring=RunWiring(progress=False)
    )
    first = len([b for b in emulator.state.accounting.billed if not b.batch])
    for _ in range(2):
        resume_run(summary["run_id"], settings=settings, wiring=RunWiring(progress=False))
    store = open_store(settings.store)
    assert len(emulator.state.accounting.billed) > first  # the resumes paid for integration again
    totals = assert_ledger_matches_emulator(store, summary["run_id"], emulator)
    assert ManifestStore(store).load(summary["run_id"]).cost_usd == pytest.approx(totals["usd"])

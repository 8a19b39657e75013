"""integrate_many: thousands of per-file results through one budgeted, compacting conversation,
against the real emulator (real SDK, real ModelClient, real local store); crashes are real SIGKILLs
of a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from checkpoints.costs import CostLedger
from checkpoints.store import open_store
from docmill.settings import Settings
from tasks.api.client import ModelClient
from tasks.integration.long import integrate_many
from tasks.recipes import load_recipe

ROOT = Path(__file__).resolve().parents[3]
PLANTED = 8


def make_results(n: int) -> list[dict[str, Any]]:
    """n small compact results; PLANTED conflicting pairs far apart; a few failed documents."""
    out: list[dict[str, Any]] = []
    for i in range(1, n + 1):
        doc = f"doc-{i:05d}"
        if i % 997 == 0:
            out.append({"doc_id": doc, "state": "failed", "reason": "transport_exhausted"})
            continue
        out.append(
            {
                "doc_id": doc,
                "state": "succeeded",
                "invoice_number": f"INV-{i:05d}",
                "vendor_name": f"Vendor {i % 23}",
                "total": round(10 + i * 1.25, 2),
                "currency": "EUR",
            }
        )
    step = n // (PLANTED * 2)
    for k in range(PLANTED):
        a, b = out[k * step + 5], out[n - 1 - k * step - 5]
        b["invoice_number"] = a["invoice_number"]
        b["total"] = a["total"] + 100 + k
    return out


def planted_conflicts(results: list[dict[str, Any]]) -> set[tuple[str, frozenset[str]]]:
    by_key: dict[str, list[str]] = {}
    for r in results:
        if r.get("invoice_number"):
            by_key.setdefault(r["invoice_number"], []).append(r["doc_id"])
    return {(k, frozenset(v)) for k, v in by_key.items() if len(v) > 1}


def run(store_uri: str, base_url: str, n: int, budget: int, run_id: str) -> dict[str, Any]:
    settings = Settings(store=store_uri)
    client = ModelClient(settings, base_url=base_url, api_key="test-key", sleep=lambda _s: None)
    return integrate_many(
        make_results(n),
        recipe=load_recipe("invoices"),
        run_id=run_id,
        store=open_store(store_uri),
        client=client,
        settings=settings,
        budget_tokens=budget,
    )


def child() -> None:  # entry point of the crash subprocess
    store_uri, base_url, n, budget, run_id = sys.argv[1:6]
    run(store_uri, base_url, int(n), int(budget), run_id)


def _billed_inputs(emulator: Any) -> list[int]:
    sizes = []
    for r in emulator.state.accounting.billed:
        u = r.usage
        total = int(u.get("input_tokens") or 0) + int(u.get("cache_read_input_tokens") or 0)
        total += int(u.get("cache_creation_input_tokens") or 0)
        for it in u.get("iterations") or []:
            total += int(it.get("input_tokens") or 0)
        sizes.append(total)
    return sizes


def test_5000_results_in_30k_budget_keep_every_conflict_and_id(emulator: Any, tmp_path: Path) -> None:
    started = time.monotonic()
    results = make_results(5000)
    record = run(str(tmp_path), emulator.base_url, 5000, 30_000, "big")
    elapsed = time.monotonic() - started

    ctx = record["context"]
    assert ctx["compactions"] >= 3, ctx
    assert set(ctx["strategies"]) == {"api"}
    sizes = _billed_inputs(emulator)
    assert max(sizes) <= 30_000, max(sizes)
    assert emulator.state.accounting.errors_by_status == {}  # never learned "too long" from a 400

    out = record["output"]
    ids = [r["doc_id"] for r in results]
    assert record["doc_ids"] == ids
    in_output = {d for e in out["entities"] for d in e["doc_ids"]} | {
        g["doc_id"] for g in out["coverage_gaps"] if g["doc_id"]
    }
    assert in_output == set(ids)  # every source id is in the schema-valid output
    got = {
        (c["key"], frozenset(v["doc_id"] for v in c["values"]))
        for c in out["conflicts"]
        if c["field"] == "total"
    }
    planted = planted_conflicts(results)
    assert len(planted) == PLANTED and planted <= got
    dups = {(d["invoice_number"], frozenset(d["doc_ids"])) for d in out["duplicates"]}
    assert planted <= dups
    failed = {r["doc_id"] for r in results if r["state"] == "failed"}
    assert failed <= {g["doc_id"] for g in out["coverage_gaps"]}

    store = open_store(str(tmp_path))
    costs = list(CostLedger(store, "big").entries())
    assert sum(1 for c in costs if c.compaction_input_tokens > 0) == ctx["compactions"]
    assert len(list(store.list("runs/big/history/integration/"))) == ctx["compactions"]
    assert elapsed < 60, elapsed


def _child(tmp_path: Path, base_url: str, run_id: str, crash: str | None) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DOCMILL_CRASH_AT", None)
    if crash:
        env["DOCMILL_CRASH_AT"] = crash
    code = "from tests.tasks.integration.test_long import child; child()"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), base_url, "500", "8000", run_id],
        env=env,
        cwd=ROOT,
        capture_output=True,
        timeout=120,
    )
    if proc.returncode not in (0, -9):
        raise AssertionError(proc.stderr.decode()[-3000:])
    return proc.returncode


_BASELINE: dict[str, Any] = {}


def _baseline(emulator: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The uninterrupted run's output (same input, same emulator), computed once per session."""
    if "out" not in _BASELINE:
        _BASELINE["out"] = run(str(tmp_path_factory.mktemp("baseline")), emulator.base_url, 500, 8000, "r")
    return _BASELINE["out"]


@pytest.mark.parametrize(
    "crash",
    ["compaction_returned#2", "exchange_returned#5", "exchange_checkpointed#7"],
)
def test_sigkill_then_resume_gives_the_same_output(
    emulator: Any, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, crash: str
) -> None:
    expected = _baseline(emulator, tmp_path_factory)
    assert expected["context"]["compactions"] >= 2
    billed_before = len(emulator.state.accounting.billed)

    assert _child(tmp_path, emulator.base_url, "r", crash) == -9  # SIGKILLed at the crash point
    assert not (tmp_path / "runs/r/tasks/integration/output.json").exists()
    checkpoint = json.loads((tmp_path / "runs/r/tasks/integration/checkpoint.json").read_text())
    assert 0 < checkpoint["exchanges"] < expected["context"]["exchanges"]
    got = run(str(tmp_path), emulator.base_url, 500, 8000, "r")  # resume in this process
    assert got == expected
    # every billed call is costed once, including the one repeated after the crash
    costs = list(CostLedger(open_store(str(tmp_path)), "r").entries())
    assert (
        len(costs) == len(emulator.state.accounting.billed) - billed_before > expected["context"]["exchanges"]
    )


def _tv(value: Any, evidence: str | None) -> dict[str, Any]:
    return {"value": value, "evidence": evidence}


def test_gated_outcomes_keep_conflict_evidence_and_review_gaps(emulator: Any, tmp_path: Path) -> None:
    """Input shaped like the gate's outcomes (nested `{value, evidence}` fields)."""
    outcomes = []
    for i in range(300):
        inv, total = f"INV-{i % 250:04d}", 10.0 + i
        outcomes.append(
            {
                "doc_id": f"d{i}",
                "state": "succeeded" if i % 50 else "needs_review",
                "reason": None if i % 50 else "low confidence",
                "output": {
                    "doc_kind": "invoice",
                    "invoice_number": _tv(inv, f"Invoice number: {inv}"),
                    "invoice_date": _tv("2024-01-01", "Date: 2024-01-01"),
                    "due_date": _tv(None, None),
                    "vendor_name": _tv(f"V{i % 7}", f"Vendor: V{i % 7}"),
                    "currency": _tv("EUR", "EUR"),
                    "subtotal": _tv(None, None),
                    "tax": _tv(None, None),
                    "total": _tv(total, f"Total: {total}"),
                    "line_items": [],
                },
            }
        )
    settings = Settings(store=str(tmp_path))
    record = integrate_many(
        outcomes,
        recipe=load_recipe("invoices"),
        run_id="g",
        store=open_store(str(tmp_path)),
        client=ModelClient(settings, base_url=emulator.base_url, api_key="test-key", sleep=lambda _s: None),
        settings=settings,
        budget_tokens=8000,
    )
    assert record["context"]["compactions"] >= 2
    assert max(_billed_inputs(emulator)) <= 8000
    totals = [c for c in record["output"]["conflicts"] if c["field"] == "total"]
    assert len(totals) == 50
    assert totals[0]["values"] == [
        {"value": "10.0", "doc_id": "d0", "evidence": "Total: 10.0"},
        {"value": "260.0", "doc_id": "d250", "evidence": "Total: 260.0"},
    ]
    reviews = {g["doc_id"]: g["reason"] for g in record["output"]["coverage_gaps"] if g["doc_id"]}
    assert reviews == {f"d{i}": "needs_review: low confidence" for i in range(0, 300, 50)}
    assert {g["field"] for g in record["checks"]["coverage_gaps"]} == {
        "due_date",
        "subtotal",
        "tax",
        "line_items",
    }

"""integrate(): incremental integration against the real emulator (real SDK, real ModelClient, real
local store): incremental equals full on the same final corpus, removed documents are retracted, an
unchanged corpus costs nothing, cut answers are split (never re-asked at the same size)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from checkpoints.store import open_store
from docmill.settings import ApiSettings, IntegrationSettings, Settings
from tasks.api.client import ModelClient
from tasks.integration.run import integrate
from tasks.integration.state import load_state, scope_of
from tasks.recipes import load_recipe

RECIPE = load_recipe("invoices")
SOURCE = "/data/invoices"


def _field(value: Any, evidence: str) -> dict[str, Any]:
    return {"value": value, "evidence": evidence}


def outcome(
    i: int, *, number: str | None = None, total: float | None = None, vendor: int | None = None
) -> dict[str, Any]:
    """A gated per-file result of invoice i (numbers, vendors and totals chosen by the caller)."""
    doc = f"inv-{i:04d}.txt"
    if i % 53 == 0:
        return {"doc_id": doc, "state": "failed", "failure_type": "transport_exhausted", "output": None}
    number = number or f"INV-{i:04d}"
    total = total if total is not None else round(100 + i * 1.5, 2)
    name = f"Vendor {vendor if vendor is not None else i % 7}"
    out = {
        "doc_kind": "invoice",
        "invoice_number": _field(number, f"Invoice number: {number}"),
        "invoice_date": _field("2026-03-01", "Invoice date: 2026-03-01"),
        "due_date": _field(None, None),
        "vendor_name": _field(name, f"Vendor: {name}"),
        "currency": _field("EUR", "Currency: EUR"),
        "subtotal": _field(None, None),
        "tax": _field(None, None),
        "total": _field(total, f"Total: {total}"),
        "line_items": [],
    }
    return {"doc_id": doc, "state": "succeeded", "output": out, "sha256": f"sha-{i}-{number}-{total}"}


def corpus(n: int, planted: int = 6) -> dict[str, dict[str, Any]]:
    """n results; `planted` pairs share an invoice number and disagree on the total."""
    docs = {o["doc_id"]: o for o in (outcome(i) for i in range(1, n + 1))}
    for k in range(planted):
        a, b = 2 + k * 11, n - 3 - k * 13
        docs[f"inv-{b:04d}.txt"] = outcome(b, number=f"INV-{a:04d}", total=9000 + k, vendor=a % 7)
    return docs


def settings_for(emulator: Any, store: str, **integration: Any) -> Settings:
    return Settings(
        store=store,
        api=ApiSettings(base_url=emulator.base_url),
        integration=IntegrationSettings(**integration),
    )


def run(
    emulator: Any, settings: Settings, docs: dict[str, dict[str, Any]], run_id: str, **kw: Any
) -> dict[str, Any]:
    client = ModelClient(settings, base_url=emulator.base_url, api_key="test-key", sleep=lambda _s: None)
    record = integrate(
        sorted(docs.values(), key=lambda o: o["doc_id"]),
        recipe=RECIPE,
        run_id=run_id,
        store=open_store(settings.store),
        client=client,
        settings=settings,
        **kw,
    )
    return dict(record)


def exact(record: dict[str, Any]) -> dict[str, Any]:
    out = record["output"]
    return {k: out[k] for k in ("entities", "duplicates", "conflicts", "coverage_gaps")} | {
        "checks": {k: record["checks"][k] for k in ("conflicts", "coverage_gaps", "unaccounted")}
    }


def test_incremental_equals_full_on_the_same_final_corpus(emulator: Any, tmp_path: Path) -> None:
    docs = corpus(240)
    first = dict(list(docs.items())[:200])
    settings = settings_for(emulator, str(tmp_path / "inc"), read_records=1000)
    run(emulator, settings, first, "r1", source=SOURCE)

    final = dict(docs)
    for i in (5, 77, 150):  # changed after the first run; one of them now conflicts with inv-0010
        final[f"inv-{i:04d}.txt"] = outcome(i, number="INV-0010" if i == 77 else None, total=1.0)
    for i in (20, 121):  # removed from the source
        del final[f"inv-{i:04d}.txt"]
    billed = len(emulator.state.accounting.billed)
    inc = run(emulator, settings, final, "r2", source=SOURCE)
    assert inc["status"] == "complete" and inc["mode"] == "incremental"
    assert inc["delta"]["added"] == 40 and inc["delta"]["changed"] == 3 and inc["delta"]["removed"] == 2

    full = run(
        emulator,
        settings_for(emulator, str(tmp_path / "full"), mode="full", read_records=1000),
        final,
        "f1",
        source=SOURCE,
    )
    assert full["status"] == "complete" and full["mode"] == "full"
    assert exact(inc) == exact(full)
    assert inc["checks"]["unaccounted"] == [] and inc["doc_ids"] == sorted(final)
    keys = {c["key"] for c in inc["output"]["conflicts"]}
    assert {f"INV-{2 + k * 11:04d}" for k in range(6)} | {"INV-0010"} <= keys
    assert inc["delta"]["to_integrate"] < len(final) and inc["calls"] < full["calls"]  # the delta only
    assert len(emulator.state.accounting.billed) - billed == inc["calls"] + full["calls"]


def test_removed_document_is_retracted_everywhere(emulator: Any, tmp_path: Path) -> None:
    docs = corpus(60, planted=2)
    settings = settings_for(emulator, str(tmp_path / "s"), slice_records=10)
    before = run(emulator, settings, docs, "r1", source=SOURCE)
    gone = "inv-0002.txt"  # one side of a planted conflict and a duplicate
    assert gone in json.dumps(before["output"])
    del docs[gone]
    after = run(emulator, settings, docs, "r2", source=SOURCE)
    assert gone not in json.dumps(after["output"]) and gone not in json.dumps(after["checks"])
    assert after["delta"]["removed"] == 1 and after["delta"]["retracted_slices"] == 1
    assert after["calls"] >= 1 and after["delta"]["to_integrate"] <= 10  # its slice only
    state = load_state(open_store(settings.store), scope_of(SOURCE, RECIPE, settings))
    assert gone not in state["docs"]
    assert all(gone not in s["doc_ids"] for s in state["slices"].values())


def test_unchanged_corpus_makes_no_call(emulator: Any, tmp_path: Path) -> None:
    docs = corpus(120)
    settings = settings_for(emulator, str(tmp_path / "s"))
    first = run(emulator, settings, docs, "r1", source=SOURCE)
    billed = len(emulator.state.accounting.billed)
    assert first["calls"] >= 1 and billed == first["calls"]
    again = run(emulator, settings, docs, "r2", source=SOURCE)
    assert len(emulator.state.accounting.billed) == billed and again["calls"] == 0
    assert exact(again) == exact(first) and again["output"]["claims"] == first["output"]["claims"]


def test_cut_answers_are_split_never_asked_again_at_the_same_size(emulator: Any, tmp_path: Path) -> None:
    docs = corpus(80)
    # only integration requests carry results as JSON lines (escaped once more in the request body)
    marked = r"\"doc_id\": \"inv-0033.txt\""
    emulator.state.faults.add(kind="truncate", marker=marked)
    settings = settings_for(emulator, str(tmp_path / "s"), slice_records=40)
    record = run(emulator, settings, docs, "r1", source=SOURCE)
    bodies = [r.body_sha256 for r in emulator.state.accounting.billed]
    assert len(bodies) == len(set(bodies))  # no request was sent twice
    assert record["truncated"] == 6  # the halves holding it: 40, 20, 10, 5, 3 and then 1 result
    assert record["status"] == "partial"
    assert [p["doc_ids"] for p in record["problems"]] == [["inv-0033.txt"]]
    assert "max_tokens" in record["problems"][0]["errors"][0]
    assert record["output"]["conflicts"] and record["checks"]["unaccounted"] == []  # code facts complete

    emulator.state.faults.clear()
    billed = len(emulator.state.accounting.billed)
    retry = run(emulator, settings, docs, "r2", source=SOURCE)  # the next run asks only what is missing
    assert retry["status"] == "complete" and retry["delta"]["pending"] == 1
    assert retry["calls"] == 1 and len(emulator.state.accounting.billed) == billed + 1


def test_an_invalid_answer_is_repaired_with_its_errors(emulator: Any, tmp_path: Path) -> None:
    docs = corpus(20)
    emulator.state.faults.add(kind="schema_invalid", marker=r"\"doc_id\": \"inv-0007.txt\"", count=1)
    emulator.state.configure({"record_requests": True})
    record = run(emulator, settings_for(emulator, str(tmp_path / "s")), docs, "r1", source=SOURCE)
    assert record["status"] == "complete" and record["calls"] == 2 and record["problems"] == []
    first, repair = [r.body for r in emulator.state.accounting.requests if r.path == "/v1/messages"]
    assert repair["messages"][:1] == first["messages"] and len(repair["messages"]) == 3
    assert "unexpected_field_emulator" in json.dumps(repair["messages"][1])  # the answer it repairs
    assert "unexpected_field_emulator" in json.dumps(repair["messages"][2])  # and its error, named


def test_skip_makes_no_call_and_says_so(emulator: Any, tmp_path: Path) -> None:
    settings = settings_for(emulator, str(tmp_path / "s"), mode="skip")
    record = run(emulator, settings, corpus(30), "r1", source=SOURCE)
    assert record["status"] == "skipped" and record["calls"] == 0
    assert emulator.state.accounting.billed == []


def test_unchanged_corpus_reuses_the_last_record_and_writes_no_state(emulator: Any, tmp_path: Path) -> None:
    """Nothing moved: the record of the run that wrote the state is this run's (same output and
    checks as integrating again), and the state is not written again; one changed result, or the
    earlier record gone, integrates as before."""
    docs = corpus(90, planted=3)
    settings = settings_for(emulator, str(tmp_path / "s"))
    store = open_store(settings.store)
    first = run(emulator, settings, docs, "r1", source=SOURCE)
    stamp = (tmp_path / "s" / str(first["state_key"])).stat().st_mtime_ns
    again = run(emulator, settings, docs, "r2", source=SOURCE)
    assert (tmp_path / "s" / str(first["state_key"])).stat().st_mtime_ns == stamp  # not written again
    assert load_state(store, scope_of(SOURCE, RECIPE, settings))["run_id"] == "r1"
    assert again["run_id"] == "r2" and again["calls"] == 0 and again["status"] == "complete"
    assert json.loads((tmp_path / "s" / "runs/r2/integration.json").read_text()) == again

    older = tmp_path / "s" / "runs/r1/integration.json"
    older.write_text(json.dumps({**first, "version": 0}))  # built by other code: integrated anew
    assert run(emulator, settings, docs, "r2b", source=SOURCE)["calls"] == 0
    assert load_state(store, scope_of(SOURCE, RECIPE, settings))["run_id"] == "r2b"
    (tmp_path / "s" / "runs/r2b/integration.json").unlink()  # the record it would take is gone
    rebuilt = run(emulator, settings, docs, "r3", source=SOURCE)
    assert load_state(store, scope_of(SOURCE, RECIPE, settings))["run_id"] == "r3"  # integrated again
    assert {k: v for k, v in again.items() if k != "run_id"} == {
        k: v for k, v in rebuilt.items() if k != "run_id"
    }

    docs["inv-0004.txt"] = outcome(4, number="INV-0005", total=1.0)  # now conflicts with inv-0005
    moved = run(emulator, settings, docs, "r4", source=SOURCE)
    assert moved["delta"]["changed"] == 1 and moved["calls"] >= 1
    assert "INV-0005" in {c["key"] for c in moved["checks"]["conflicts"]}
    assert "INV-0005" not in {c["key"] for c in again["checks"]["conflicts"]}

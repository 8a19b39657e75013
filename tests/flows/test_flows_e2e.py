"""End to end: the real SDK against the emulator, a real store, the whole chain."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest

from checkpoints.store import open_store
from flows.entry import RunWiring, resume_run, run_extract
from flows.run.context import RunParams
from tests.fixtures.emulator import fast_batches
from tests.flows.helpers import make_corpus, outcomes_of, settings_for, value

NUMERIC = ("subtotal", "tax", "total")


def check_against_truth(store: Any, run_id: str, truth: list[dict[str, Any]]) -> None:
    outcomes = outcomes_of(store, run_id)
    docs = [t for t in truth if t["record"] == "document"]
    dups = {t["doc_id"]: t["duplicate_of"] for t in truth if t["record"] == "duplicate"}
    assert set(outcomes) == {t["doc_id"] for t in docs} | set(dups)  # nothing dropped, nothing invented
    for t in docs:
        o = outcomes[t["doc_id"]]
        if t["expected_skip_reason"] == "duplicate":
            continue  # resolved from the original's result, checked below
        if t["expected_status"] != "ok":
            if t["expected_skip_reason"] in ("empty", "unsupported_type"):  # nothing to extract
                assert (o["state"], o["reason"], o["failure_type"]) == (
                    "skipped",
                    t["expected_skip_reason"],
                    None,
                )
                continue
            assert o["state"] == "failed", t["doc_id"]
            assert o["failure_type"] == f"input:{t['expected_skip_reason']}"
            continue
        assert o["state"] == "succeeded", (t["doc_id"], o.get("reason"), o.get("last_error"))
        for field, expected in (t["fields"] or {}).items():  # the Latin-1 note has no invoice fields
            got = value(o["output"][field])
            if field in NUMERIC:
                assert got == pytest.approx(expected), (t["doc_id"], field)
            else:
                assert got == expected, (t["doc_id"], field)
    for dup, original in dups.items():
        assert outcomes[dup]["state"] == outcomes[original]["state"]
        assert outcomes[dup]["output"] == outcomes[original]["output"]


def check_conflicts(store: Any, run_id: str, truth: list[dict[str, Any]]) -> None:
    integration = store.get_json(f"runs/{run_id}/integration.json")
    planted = [t for t in truth if t["record"] == "conflict"]
    assert planted, "the generator planted no conflict"
    for c in planted:
        found = [
            x
            for x in integration["checks"]["conflicts"]
            if x["key"] == c["invoice_number"] and x["field"] == c["field"]
        ]
        assert found, c
        got = {(v["doc_id"], v["value"]) for v in found[0]["values"]}
        assert got == {(v["doc_id"], v["value"]) for v in c["values"]}


def test_local_run_matches_ground_truth_and_second_run_is_free(tmp_path: Path, emulator: Any) -> None:
    corpus, truth = make_corpus(tmp_path)
    settings = settings_for(emulator, str(tmp_path / "store"))
    first = run_extract(
        RunParams(str(corpus), "invoices"), settings=settings, wiring=RunWiring(progress=False)
    )
    store = open_store(settings.store)
    check_against_truth(store, first["run_id"], truth)
    check_conflicts(store, first["run_id"], truth)
    n = len([t for t in truth if t["record"] == "document"])
    assert first["documents"] == n == sum(first["states"].values())
    billed = len(emulator.state.accounting.billed)
    assert billed > 0
    assert first["cost_usd"] == pytest.approx(emulator.state.accounting.total_usd(), abs=0.005)
    report = store.get(f"runs/{first['run_id']}/report.md").decode()
    assert f"**{n}**" in report
    for ext in ("jsonl", "csv", "parquet"):
        assert store.exists(f"runs/{first['run_id']}/exports/results.{ext}")

    second = run_extract(
        RunParams(str(corpus), "invoices"), settings=settings, wiring=RunWiring(progress=False)
    )
    assert second["run_id"] != first["run_id"]
    assert len(emulator.state.accounting.billed) == billed  # zero API calls the second time
    assert second["states"] == first["states"]
    assert second["cost_usd"] == 0.0


def test_s3_run_matches_ground_truth(tmp_path: Path, emulator: Any, s3_store_uri: str) -> None:
    corpus, truth = make_corpus(tmp_path, count=20, seed=11)
    settings = settings_for(emulator, s3_store_uri)
    summary = run_extract(
        RunParams(str(corpus), "invoices"), settings=settings, wiring=RunWiring(progress=False)
    )
    store = open_store(s3_store_uri)
    check_against_truth(store, summary["run_id"], truth)
    check_conflicts(store, summary["run_id"], truth)
    assert store.exists(f"runs/{summary['run_id']}/report.md")


class Crash(Exception):
    pass


def test_resume_after_a_crash_sends_nothing_twice(tmp_path: Path, emulator: Any) -> None:
    corpus, truth = make_corpus(tmp_path, count=30, seed=5)
    settings = settings_for(emulator, str(tmp_path / "store")).model_copy(update={"chunk_size": 8})

    def crash_after_two(fn: Any, chunks: Any) -> list[dict[str, int]]:  # chunks: as handed out
        done = [fn(cid, docs) for cid, docs in itertools.islice(chunks, 2)]
        raise Crash(f"stopped after {len(done)} chunks")

    from docmill.errors import LeaseHeld

    with pytest.raises(Crash):
        run_extract(
            RunParams(str(corpus), "invoices", run_id="crashy-run"),
            settings=settings,
            wiring=RunWiring(progress=False, map_chunks=crash_after_two),
        )
    billed_before = {r.body_sha256 for r in emulator.state.accounting.billed}
    assert billed_before
    # The crashed driver released its lease on the way out; a live holder would be refused:
    with pytest.raises(LeaseHeld):
        from checkpoints.lease import Lease

        with Lease(open_store(settings.store), "crashy-run", "someone-else", ttl_seconds=60):
            run_extract(
                RunParams(str(corpus), "invoices", run_id="crashy-run"),
                settings=settings,
                wiring=RunWiring(progress=False),
            )

    summary = resume_run(
        "crashy-run", store=settings.store, settings=settings, wiring=RunWiring(progress=False)
    )
    hashes = [r.body_sha256 for r in emulator.state.accounting.billed]
    assert len(hashes) == len(set(hashes)), "a request was billed twice"
    check_against_truth(open_store(settings.store), "crashy-run", truth)
    assert summary["phase"] == "done"


@pytest.mark.parametrize("mode", ["realtime", "batch"])
def test_unchanged_source_run_again_makes_no_call(tmp_path: Path, emulator: Any, mode: str) -> None:
    if mode == "batch":
        fast_batches(emulator)
    """300 invoices: the second run of the unchanged source is free, integration included, and
    reports the same conflicts (the integration state and the ledger answer everything)."""
    from docmill.settings import BatchSettings

    corpus, truth = make_corpus(tmp_path, count=300, seed=8)
    settings = settings_for(emulator, str(tmp_path / "store"), concurrency=16).model_copy(
        update={"batch": BatchSettings(poll_seconds=0.05, poll_max_seconds=0.2)}
    )
    first = run_extract(
        RunParams(str(corpus), "invoices", mode=mode), settings=settings, wiring=RunWiring(progress=False)
    )
    store = open_store(settings.store)
    check_conflicts(store, first["run_id"], truth)
    assert first["integration"] == "complete"
    integration = store.get_json(f"runs/{first['run_id']}/integration.json")
    assert integration["calls"] >= 1 and integration["truncated"] == 0
    billed = len(emulator.state.accounting.billed)
    again = run_extract(
        RunParams(str(corpus), "invoices", mode=mode), settings=settings, wiring=RunWiring(progress=False)
    )
    assert len(emulator.state.accounting.billed) == billed  # zero API calls, integration included
    assert again["cost_usd"] == 0.0 and again["integration"] == "complete"
    assert again["conflicts"] == first["conflicts"]
    check_conflicts(store, again["run_id"], truth)


def test_auto_mode_takes_batches_above_threshold(tmp_path: Path, emulator: Any) -> None:
    fast_batches(emulator)
    from docmill.settings import BatchSettings

    corpus, truth = make_corpus(tmp_path, count=24, seed=12)
    settings = settings_for(emulator, str(tmp_path / "store")).model_copy(
        update={"batch": BatchSettings(auto_threshold=10, poll_seconds=0.05, poll_max_seconds=0.2)}
    )
    summary = run_extract(
        RunParams(str(corpus), "invoices", mode="auto"), settings=settings, wiring=RunWiring(progress=False)
    )
    store = open_store(settings.store)
    assert store.get_json(f"runs/{summary['run_id']}/manifest.json")["mode"] == "batch"
    check_against_truth(store, summary["run_id"], truth)
    check_conflicts(store, summary["run_id"], truth)
    billed = emulator.state.accounting.billed
    batch_items = [r for r in billed if r.batch]
    ok = [t for t in truth if t["record"] == "document" and t["expected_status"] == "ok"]
    assert len(batch_items) == len(ok)  # one billed batch request per document, at the batch discount
    assert len({r.custom_id for r in batch_items}) == len(batch_items)
    assert summary["cost_usd"] == pytest.approx(emulator.state.accounting.total_usd(), abs=0.005)
    # the report's timeline is the batches' (submitted, ended, ingested), not the ingest speed
    md = store.get(f"runs/{summary['run_id']}/report.md").decode()
    assert "## Timeline (batch requests)" in md
    for line in ("submitted", "ended", "ingested"):
        assert re.search(rf"^- {line}: {len(batch_items)} requests, first \+", md, re.M), md[:800]
    assert "<polyline" in store.get(f"runs/{summary['run_id']}/report.html").decode()

"""The per-document cost guard and hostile names, through extract_chunk against the real emulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checkpoints.ledger import ResultsLedger
from checkpoints.review_queue import ReviewQueue
from docmill.settings import Settings
from tasks.cost.worst_case import COST_GUARD, long_worst_usd, request_worst_usd
from tasks.per_file.outcome import DocState
from tasks.request import FILE_PASS, file_request
from tests.tasks.per_file.test_realtime import RECIPE, Harness, invoice_text


@pytest.fixture
def h(tmp_path: Path, emulator: Any) -> Harness:
    return Harness(tmp_path, emulator)


def test_runaway_documents_are_held_for_review_before_any_call(h: Harness) -> None:
    h.write("inv-1.txt", invoice_text(1))
    h.write("one-line.txt", "x" * (5 * 1024 * 1024))  # 5 MB, one line
    h.write("wide.csv", ",".join(f"c{i}" for i in range(1_000_000)) + "\n")  # 10^6 columns
    out = h.run()
    for doc_id in ("one-line.txt", "wide.csv"):
        held = out[doc_id]
        assert held.state is DocState.NEEDS_REVIEW and held.reason == COST_GUARD, held
        assert "guard of $2.00" in str(held.last_error)
        assert ResultsLedger(h.store).get(FILE_PASS, str(held.key)) is None  # a higher guard sends it
        assert ReviewQueue(h.store, "run1").get(doc_id)["reason"] == COST_GUARD
    assert out["inv-1.txt"].state is DocState.SUCCEEDED
    assert h.received == 1 and len(h.billed) == 1  # only the ordinary invoice was sent


def test_guard_is_a_setting(tmp_path: Path, emulator: Any) -> None:
    h = Harness(tmp_path, emulator)
    h.settings = h.settings.model_copy(
        update={"cost": h.settings.cost.model_copy(update={"max_doc_cost_usd": 0.0001})}
    )
    h.write("inv-1.txt", invoice_text(1))
    assert h.run()["inv-1.txt"].reason == COST_GUARD and h.received == 0


def test_worst_case_grows_with_the_request() -> None:
    s = Settings()
    doc = type("D", (), {"doc_id": "a.txt", "doc_type": "txt"})()
    small = file_request(RECIPE, doc, invoice_text(1), model=s.api.model, max_tokens=s.api.max_tokens)
    assert 0 < request_worst_usd(s, small) < 1.0  # an invoice (4 calls at most) stays below the $2 default
    assert long_worst_usd(s, s.api.model, 100_000) < 2.0  # an ordinary long document passes
    assert long_worst_usd(s, s.api.model, 1_500_000) > 5.0  # a 5 MB file does not


def test_254_byte_name_goes_to_review(h: Harness) -> None:
    name = "r" * 250 + ".txt"  # 254 bytes: the longest a file system allows, plus ".json" in the queue
    h.write(name, invoice_text(7) + "PLANTED-FAULT\n")
    h.emulator.state.faults.add(kind="schema_invalid", marker="PLANTED-FAULT")
    doc = h.run()[name]
    assert doc.state is DocState.NEEDS_REVIEW and doc.reason == "validation_failed", doc
    item = ReviewQueue(h.store, "run1").get(name)
    assert item is not None and item["doc_id"] == name
    assert [i["doc_id"] for i in ReviewQueue(h.store, "run1").list()] == [name]

"""Each value's support class (verified, verified_text, unverified, missing) from its provenance, as
the exports, `review list` and `eval` show it."""

from __future__ import annotations

import json
from typing import Any

from tasks.evaluate import eval_lines, evaluate
from tasks.provenance import support_line, supports, weakest
from tasks.reporting.exports import export_rows, to_jsonl

BOXED = {
    "start": 10,
    "end": 20,
    "page": 1,
    "verified": True,
    "boxes": [[1, 0.1, 0.1, 0.3, 0.12]],
    "bbox": [0.1, 0.1, 0.3, 0.12],
}
TEXT = {"start": 30, "end": 40, "page": None, "verified": True}
SCAN = {"start": None, "end": None, "page": 2, "verified": False}


def outcome(doc_id: str, fields: dict[str, tuple[Any, dict[str, Any] | None]]) -> dict[str, Any]:
    output: dict[str, Any] = {"doc_kind": "invoice"}
    where: dict[str, Any] = {}
    for name, (value, w) in fields.items():
        output[name] = {"value": value, "evidence": "x" if value is not None else None}
        if w is not None:
            where[f"$.{name}.evidence"] = w
    return {"doc_id": doc_id, "state": "succeeded", "output": output, "provenance": {"fields": where}}


PDF = outcome("a.pdf", {"total": (5.0, BOXED), "vendor": ("ACME", SCAN), "tax": (None, None)})
TXT = outcome("b.txt", {"total": (7.0, TEXT), "vendor": ("Bolt", TEXT), "tax": (1.0, TEXT)})


def test_support_classes_from_provenance() -> None:
    assert supports(PDF) == {"total": "verified", "vendor": "unverified", "tax": "missing"}
    assert supports(TXT) == {"total": "verified_text", "vendor": "verified_text", "tax": "verified_text"}
    assert support_line(PDF) == "unverified 1, missing 1, verified 1"
    assert sorted([TXT, PDF], key=weakest) == [PDF, TXT]  # review list: least supported first


def test_exports_carry_support_and_bbox() -> None:
    row = export_rows([PDF])[0]
    assert row["value.total.support"] == "verified" and row["value.vendor.support"] == "unverified"
    assert json.loads(row["value.total.bbox"]) == BOXED["bbox"] and row["value.vendor.page"] == 2
    assert json.loads(to_jsonl([PDF]))["support"]["tax"] == "missing"


def test_eval_reports_accuracy_per_support_class() -> None:
    labels = {
        "a.pdf": {"total": 5.0, "vendor": "WRONG", "doc_kind": "invoice"},
        "b.txt": {"total": 7.0, "vendor": "Bolt"},
    }
    result = evaluate([PDF, TXT], labels, {})
    by = result["by_support"]
    assert (by["verified"].correct, by["verified"].covered) == (1, 1)
    assert (by["unverified"].correct, by["unverified"].covered) == (0, 1)
    assert (by["verified_text"].correct, by["verified_text"].covered) == (2, 2)
    # a document kind has no evidence to check: its own class, not a scan's `unverified`
    assert (by["no_evidence"].correct, by["no_evidence"].covered) == (1, 1)
    text = "\n".join(eval_lines(result))
    assert "by support" in text and "unverified" in text and "no_evidence" in text

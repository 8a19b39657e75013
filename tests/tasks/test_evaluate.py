"""`docmill eval` coverage: a null value covers nothing (a document that "succeeds" with every field
empty is not a covered one)."""

from __future__ import annotations

from tasks.evaluate import eval_lines, evaluate


def test_a_null_value_is_not_covered() -> None:
    labels = {
        "scan.png": {"total": 12.5, "invoice_number": "A-1"},
        "good.pdf": {"total": 3.0, "invoice_number": "B-2"},
        "nulls.pdf": {"total": None},  # labelled null: a null answer is correct and covers it
    }
    empty = {"value": None, "evidence": None}
    outcomes = [
        {"doc_id": "scan.png", "state": "succeeded", "output": {"total": empty, "invoice_number": empty}},
        {
            "doc_id": "good.pdf",
            "state": "succeeded",
            "output": {"total": {"value": 3.0, "evidence": "Total 3.00"}, "invoice_number": None},
        },
        {"doc_id": "nulls.pdf", "state": "succeeded", "output": {"total": empty}},
    ]
    result = evaluate(outcomes, labels, {"scan.png": "png", "good.pdf": "pdf", "nulls.pdf": "pdf"})
    every = result["overall"]["*all fields*"]
    assert (every.covered, every.total, every.correct) == (2, 5, 2)
    assert result["by_group"]["format"]["png"]["*all fields*"].coverage == 0.0
    kinds = {(m["doc_id"], m["field"]): m["kind"] for m in result["mismatches"]}
    assert kinds == {
        ("scan.png", "total"): "null",
        ("scan.png", "invoice_number"): "null",
        ("good.pdf", "invoice_number"): "null",
    }
    assert any("scan.png  total: null, expected 12.5, got None" in line for line in eval_lines(result))

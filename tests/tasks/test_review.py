"""Review decisions applied to outcomes and turned into labels (tasks/review.py), with the real
invoices recipe's schema."""

from __future__ import annotations

import pytest

from checkpoints.decisions import Action, Decision
from docmill.errors import InputError
from tasks.recipes import load_recipe
from tasks.review import apply_decisions, corrected_output, labels_from_decisions, parse_assignments

OUT = {"total": {"value": 10.0, "evidence": "Total: 10.00"}, "currency": {"value": "EUR", "evidence": "EUR"}}


def _d(doc_id: str, action: Action, **values: object) -> Decision:
    return Decision(run_id="r", doc_id=doc_id, seq=1, action=action, values=values, by="ann", at=5.0)


def test_set_arguments_parse_as_json_else_text() -> None:
    assert parse_assignments(["total=12.5", "vendor_name=Acme = Co", "due_date=null"]) == {
        "total": 12.5,
        "vendor_name": "Acme = Co",
        "due_date": None,
    }
    with pytest.raises(InputError):
        parse_assignments(["total"])


def test_corrections_are_checked_field_by_field_against_the_schema() -> None:
    recipe = load_recipe("invoices")
    fixed = corrected_output(recipe, OUT, {"total": 12.5})
    assert fixed["total"] == {"value": 12.5, "evidence": None} and fixed["currency"] == OUT["currency"]
    with pytest.raises(InputError, match=r"total\.value"):
        corrected_output(recipe, OUT, {"total": "lots"})
    with pytest.raises(InputError, match="no field 'colour'"):
        corrected_output(recipe, OUT, {"colour": "red"})
    assert corrected_output(recipe, {}, {"invoice_number": "INV-9"})["invoice_number"]["value"] == "INV-9"


def test_applied_decisions_keep_the_original_and_labels_follow_the_decision() -> None:
    outcomes = [
        {"doc_id": "a", "state": "succeeded", "output": OUT},
        {"doc_id": "b", "state": "succeeded", "output": OUT},
        {"doc_id": "c", "state": "failed", "output": None},
        {"doc_id": "d", "state": "succeeded", "output": OUT},
    ]
    decisions = {
        "a": _d("a", Action.CORRECT, total=12.5),
        "b": _d("b", Action.ACCEPT),
        "c": _d("c", Action.REJECT, total=3.0),
    }
    a, b, c, d = apply_decisions(outcomes, decisions)
    assert a["output"]["total"]["value"] == 12.5 and a["original_output"] == OUT
    assert a["review"]["corrections"] == {"total": {"from": 10.0, "to": 12.5}} and a["review"]["by"] == "ann"
    assert b["output"] == OUT and "original_output" not in b and b["review"]["action"] == "accept"
    assert c["output"] == {"total": 3.0} and c["review"]["action"] == "reject"  # no output: no crash
    assert d == outcomes[3]
    labels = labels_from_decisions(outcomes, decisions)
    assert labels == {
        "a": {"total": 12.5, "currency": "EUR"},
        "b": {"total": 10.0, "currency": "EUR"},
        "c": {"total": 3.0},
    }

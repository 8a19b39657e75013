"""The gate's second evidence rule (tasks.per_file.support): an excerpt must contain its value in a
normalised form, not only occur in the document. The purchase order of the first-week report: its
`Total: USD 4,828.00` line occurs verbatim, and was accepted as the evidence of an effective date and
of a governing law."""

from __future__ import annotations

import json
from typing import Any

import pytest

from docmill.settings import Settings
from examples.recipes.contracts import CONTRACTS
from tasks.per_file.gate import Action, Problem, Progress, check, decide
from tasks.per_file.support import supports

PO = "PURCHASE ORDER\n\nPO number: PO-7781\nOrder date: 2026-03-05\n\nTotal: USD 4,828.00\n"


def _answer(**fields: Any) -> dict[str, Any]:
    empty = {"value": None, "evidence": None}
    out = {
        "doc_kind": "purchase_order",
        "contract_number": empty,
        "provider": empty,
        "effective_date": empty,
        "governing_law": empty,
        "fee": empty,
        "currency": empty,
        **fields,
    }
    return {"content": [{"type": "text", "text": json.dumps(out)}], "stop_reason": "end_turn", "usage": {}}


def test_a_verbatim_line_that_does_not_state_the_value_is_not_evidence_for_it() -> None:
    wrong = _answer(
        effective_date={"value": "2026-03-01", "evidence": "Total: USD 4,828.00"},
        governing_law={"value": "England and Wales", "evidence": "Total: USD 4,828.00"},
    )
    v = check(CONTRACTS, PO, wrong)
    assert not v.ok and v.problem is Problem.UNSUPPORTED
    assert [f["path"] for f in v.flags] == ["$.effective_date.evidence", "$.governing_law.evidence"]
    assert "does not contain the value '2026-03-01'" in v.errors[0]
    assert (
        decide(v, Progress(max_tokens=4096), Settings()).action is Action.REPAIR
    )  # asked again, then review
    right = _answer(fee={"value": 4828.0, "evidence": "Total: USD 4,828.00"})
    assert check(CONTRACTS, PO, right).ok  # the line does state that amount


@pytest.mark.parametrize(
    ("value", "evidence"),
    [
        (4828.0, "Total: USD 4,828.00"),
        (1234.5, "Total: 1.234,50 EUR"),
        (-12.0, "Credit: (12.00)"),
        (2708.93, 'Total,"2,708.93"'),
        ("2026-03-01", "It is effective as of March 1, 2026 and runs for three years."),
        ("2026-03-01", "Effective from 1st March 2026."),
        ("2026-03-01", "Invoice date: 01.03.2026"),
        ("2026-01-03", "Date: 03/01/2026"),
        ("2026-03-01T00:00:00Z", "dated 2026-03-01"),
        ("Acme GmbH", "Vendor: ACME  GmbH."),
        ("State of New York", "governed by the laws of the State of New York."),
        ("Citroën SA", "Supplier: Citroen SA"),
    ],
)
def test_values_written_another_way_are_supported(value: Any, evidence: str) -> None:
    assert supports(value, evidence)


@pytest.mark.parametrize(
    ("value", "evidence"),
    [
        ("2026-03-01", "Total: USD 4,828.00"),
        ("England and Wales", "Total: USD 4,828.00"),
        (4828.0, "Subtotal: 4,820.00"),
        ("2026-03-02", "effective as of March 1, 2026"),
        ("USD", "Total: $4,828.00"),  # a value the model inferred: a person decides (review)
    ],
)
def test_evidence_that_does_not_state_the_value_is_not_support(value: Any, evidence: str) -> None:
    assert not supports(value, evidence)

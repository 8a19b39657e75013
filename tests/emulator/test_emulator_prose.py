"""The emulated model reads prose, not only `Label: value` lines (emulator.prose): a contract written in
sentences yields its effective date, governing law and fee, each with the sentence as verbatim
evidence that contains the value; deterministic, and no kinder than the API: a field no sentence
names stays null, and a purchase order's lines are never the evidence of contract terms."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from anthropic import transform_schema

from emulator.model import respond
from examples.recipes.contracts import Contract

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "examples" / "recipes" / "contracts"


def answer(doc_id: str, text: str) -> dict[str, Any]:
    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 2000,
        "system": "Record the contract's terms. Evidence copied verbatim.",
        "messages": [{"role": "user", "content": f'<document id="{doc_id}" type="txt">\n{text}</document>'}],
        "output_config": {"format": {"type": "json_schema", "schema": transform_schema(Contract)}},
    }
    reply = respond(body)
    out: dict[str, Any] = json.loads(reply["content"][0]["text"])
    Contract.model_validate(out)
    return out


def test_a_prose_contract_yields_values_with_the_sentence_that_states_them() -> None:
    from tasks.per_file.support import supports

    path = CORPUS / "agreements" / "msa-2041-harbor.txt"
    text = path.read_text()
    out = answer("agreements/msa-2041-harbor.txt", text)
    assert out["effective_date"] == {
        "value": "2026-03-01",
        "evidence": "It is effective as of March 1, 2026 and runs for three years.",
    }
    assert out["governing_law"]["value"] == "England and Wales"
    assert out["fee"]["value"] == 48000.0 and "EUR 48,000.00" in out["fee"]["evidence"]
    for field in ("effective_date", "governing_law", "fee", "contract_number", "provider"):
        node = out[field]
        assert node["evidence"] in text and supports(node["value"], node["evidence"]), (field, node)
    assert answer("agreements/msa-2041-harbor.txt", text) == out  # deterministic


def test_the_two_copies_of_msa_2041_disagree_on_the_governing_law() -> None:
    laws = {
        p.name: answer(f"agreements/{p.name}", p.read_text())["governing_law"]["value"]
        for p in sorted((CORPUS / "agreements").glob("msa-2041-*"))
    }
    assert laws == {
        "msa-2041-harbor-countersigned.txt": "State of New York",
        "msa-2041-harbor.txt": "England and Wales",
    }


def test_no_kinder_than_the_api_unnamed_fields_stay_null_and_a_purchase_order_states_no_terms() -> None:
    po = answer("purchase-orders/po-7781.txt", (CORPUS / "purchase-orders" / "po-7781.txt").read_text())
    assert po["doc_kind"] == "purchase_order"
    for field in ("effective_date", "governing_law", "fee", "contract_number", "provider"):
        assert po[field] == {"value": None, "evidence": None}, field  # never "Total: USD 4,828.00"
    vague = "SUPPLY AGREEMENT\n\nThe parties agree to work together from next spring. Payment terms follow later.\n"
    out = answer("agreements/vague.txt", vague)
    assert out["effective_date"]["value"] is None and out["fee"]["value"] is None  # not stated: missed
    assert out["governing_law"]["value"] is None


def test_a_flat_evidence_sibling_of_an_unfound_value_is_null_never_another_fields_line() -> None:
    """The purchase order of the first-week report, through a schema with flat `*_evidence` siblings
    (docmill refuses such a recipe at load; the emulator still answers it as a model would)."""
    from pydantic import BaseModel

    class Flat(BaseModel):
        total: float | None
        total_evidence: str | None
        effective_date: str | None
        effective_date_evidence: str | None
        governing_law: str | None
        governing_law_evidence: str | None

    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 2000,
        "system": "Evidence copied verbatim.",
        "messages": [
            {
                "role": "user",
                "content": f'<document id="po.txt" type="txt">\n{(CORPUS / "purchase-orders" / "po-7781.txt").read_text()}</document>',
            }
        ],
        "output_config": {"format": {"type": "json_schema", "schema": transform_schema(Flat)}},
    }
    out = json.loads(respond(body)["content"][0]["text"])
    assert out["total"] == 4828.0 and out["total_evidence"] == "Total: USD 4,828.00"
    assert out["effective_date_evidence"] is None and out["governing_law_evidence"] is None

"""The emulator's grounded model: schema-valid, verbatim evidence, ids from the prompt, deterministic."""

from __future__ import annotations

import copy
import json
import time
from collections import defaultdict
from datetime import date, datetime
from enum import StrEnum
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

import jsonschema
import pytest
from anthropic.lib._parse._transform import to_json_output_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from docmill.sdk import anthropic
from emulator.grounding import read_prompt
from emulator.model import respond, summarize
from tasks.recipes.thinking import effort_config

INVOICE = """ACME GmbH - Musterstrasse 1, Berlin
Invoice number: INV-104
Vendor: ACME GmbH
Invoice date: 01.03.2026
Due date: 2026-03-31
Currency: EUR

Items:
- Widget A | 2 x 10.00 = 20.00
- Widget B | 1 x 1,214.50 = 1,214.50

Subtotal: 1,234.50
Tax (19%): 234.56
Total: 1,469.06
"""


class Currency(StrEnum):
    USD = "USD"
    EUR = "EUR"
    GBP = "GBP"


class Status(StrEnum):
    OPEN = "open"
    PAID = "paid"


class Text(BaseModel):
    value: str | None
    evidence: str | None


class Amount(BaseModel):
    value: float | None
    evidence: str | None = None
    confidence: float = Field(ge=0, le=1)


class LineItem(BaseModel):
    description: str
    quantity: float
    unit_price: float
    amount: float
    evidence: str


class Invoice(BaseModel):
    doc_id: str
    invoice_number: Text
    vendor: Text
    invoice_date: date | None
    due_date: date | None = None
    currency: Currency
    status: Status
    subtotal: Amount
    tax: Amount | None
    total: Amount
    po_number: str | None = Field(None, description="Purchase order reference")
    line_items: list[LineItem]
    notes: str = Field(max_length=20)


def structured(model: type[BaseModel], text: str, doc_id: str = "invoices/inv-001.txt") -> dict[str, Any]:
    """A request body as `client.messages.parse(output_format=model)` puts it on the wire."""
    return {
        "model": "claude-sonnet-4-6",
        "max_tokens": 2000,
        "system": "Extract the fields. Quote evidence verbatim.",
        "messages": [{"role": "user", "content": f'Document:\n<document id="{doc_id}">\n{text}</document>'}],
        "output_config": {"format": to_json_output_format(model)},
    }


def answer_text(body: dict[str, Any]) -> str:
    reply = respond(body)
    assert reply["stop_reason"] == "end_turn"
    assert [b["type"] for b in reply["content"]] == ["text"]
    return str(reply["content"][0]["text"])


def strings_under(obj: Any, names: set[str]) -> list[str]:
    if isinstance(obj, dict):
        found = [v for k, v in obj.items() if k in names and isinstance(v, str)]
        return found + [s for v in obj.values() for s in strings_under(v, names)]
    if isinstance(obj, list):
        return [s for v in obj for s in strings_under(v, names)]
    return []


def test_invoice_is_schema_valid_and_grounded() -> None:
    invoice = Invoice.model_validate_json(answer_text(structured(Invoice, INVOICE)))

    assert invoice.doc_id == "invoices/inv-001.txt"
    assert invoice.invoice_number == Text(value="INV-104", evidence="Invoice number: INV-104")
    assert invoice.vendor.value == "ACME GmbH"
    assert invoice.invoice_date == date(2026, 3, 1)
    assert invoice.due_date == date(2026, 3, 31)
    assert invoice.currency is Currency.EUR
    assert invoice.status is Status.OPEN  # no member in the text: the first one
    assert (invoice.subtotal.value, invoice.total.value) == (1234.50, 1469.06)
    assert invoice.tax is not None and invoice.tax.value == 234.56
    assert invoice.total.evidence == "Total: 1,469.06"
    assert invoice.total.confidence == 0.9
    assert invoice.po_number is None  # nullable and not in the document
    assert [(i.description, i.quantity, i.unit_price, i.amount) for i in invoice.line_items] == [
        ("Widget A", 2, 10.0, 20.0),
        ("Widget B", 1, 1214.5, 1214.5),
    ]
    assert len(invoice.notes) <= 20 and invoice.notes in INVOICE


def test_every_evidence_string_is_verbatim_from_the_document() -> None:
    output = json.loads(answer_text(structured(Invoice, INVOICE)))
    quotes = strings_under(output, {"evidence", "description"})
    assert len(quotes) >= 8
    for quote in quotes:
        assert quote in INVOICE


def test_missing_values_are_null_or_defaults() -> None:
    text = "Nothing useful here.\nJust prose about the weather."
    invoice = Invoice.model_validate_json(answer_text(structured(Invoice, text)))
    assert invoice.invoice_number == Text(value=None, evidence=None)
    assert invoice.total.value is None and invoice.total.confidence == 0.3
    assert invoice.tax is None
    assert invoice.line_items == []
    assert invoice.notes in text


def test_same_body_same_answer_and_different_body_different_tool_id() -> None:
    body = structured(Invoice, INVOICE)
    before = copy.deepcopy(body)
    assert respond(body) == respond(copy.deepcopy(body))
    assert body == before  # schemas are shared between requests: never mutated

    tool_body = tool_request(INVOICE, {"type": "tool", "name": "record_invoice"})
    first, again = respond(tool_body), respond(copy.deepcopy(tool_body))
    assert first == again
    other = tool_request(INVOICE.replace("INV-104", "INV-105"), {"type": "tool", "name": "record_invoice"})
    assert respond(other)["content"][0]["id"] != first["content"][0]["id"]


RECORD_INVOICE = {
    "name": "record_invoice",
    "description": "Record the invoice fields.",
    "input_schema": {
        "type": "object",
        "properties": {
            "vendor": {"type": "string"},
            "total": {"type": "number"},
            "invoice_date": {"type": "string", "format": "date"},
            "paid": {"type": "boolean"},
            "currency": {"type": ["string", "null"], "enum": ["USD", "EUR", None]},
        },
        "required": ["vendor", "total", "invoice_date"],
        "additionalProperties": False,
    },
}


def tool_request(text: str, choice: dict[str, Any]) -> dict[str, Any]:
    other = {
        "name": "other_tool",
        "input_schema": {"type": "object", "properties": {"x": {"type": "integer"}}},
    }
    return {
        "model": "claude-haiku-4-5",
        "max_tokens": 500,
        "tools": [RECORD_INVOICE, other],
        "tool_choice": choice,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": f"<document id='d1'>{text}</document>"}]}
        ],
    }


@pytest.mark.parametrize("choice", [{"type": "tool", "name": "record_invoice"}, {"type": "any"}])
def test_forced_tool_use_is_valid_against_input_schema(choice: dict[str, Any]) -> None:
    reply = respond(tool_request(INVOICE, choice))
    assert reply["stop_reason"] == "tool_use"
    (block,) = reply["content"]
    assert block["type"] == "tool_use" and block["name"] == "record_invoice"
    assert block["id"].startswith("toolu_")
    jsonschema.validate(block["input"], RECORD_INVOICE["input_schema"])
    assert block["input"]["vendor"] == "ACME GmbH"
    assert block["input"]["total"] == 1469.06
    assert block["input"]["invoice_date"] == "2026-03-01"
    assert block["input"]["currency"] == "EUR"


def test_plain_request_gets_short_deterministic_text() -> None:
    body = {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "Say hi to the team"}]}
    reply = respond(body)
    assert reply["stop_reason"] == "end_turn"
    assert "Say hi to the team" in reply["content"][0]["text"]
    assert reply == respond(copy.deepcopy(body))
    auto = tool_request(INVOICE, {"type": "auto"})
    assert respond(auto)["content"][0]["type"] == "text"


class SourceValue(BaseModel):
    doc_id: str
    value: str
    evidence: str | None


class Conflict(BaseModel):
    field: str
    key: str
    values: list[SourceValue]
    explanation: str


class Entity(BaseModel):
    name: str
    type: str
    doc_ids: list[str]


class Integration(BaseModel):
    entities: list[Entity]
    conflicts: list[Conflict]
    sources: list[str]


def per_file(doc_id: str, number: str, vendor: str, total: float) -> str:
    output = {
        "invoice_number": {"value": number, "evidence": f"Invoice number: {number}"},
        "vendor": {"value": vendor, "evidence": f"Vendor: {vendor}"},
        "total": {"value": total, "evidence": f"Total: {total:.2f}"},
    }
    return json.dumps({"doc_id": doc_id, "output": output})


def test_integration_finds_planted_conflict_and_shared_entity() -> None:
    lines = [
        per_file("inv/a.txt", "INV-1", "ACME GmbH", 100.0),
        per_file("inv/b.txt", "INV-1", "ACME GmbH", 120.0),
        per_file("inv/c.txt", "INV-2", "Other Ltd", 5.0),
    ]
    body = structured(Integration, "")
    body["messages"] = [{"role": "user", "content": "Per-file results, one per line:\n" + "\n".join(lines)}]
    result = Integration.model_validate_json(answer_text(body))

    assert result.sources == ["inv/a.txt", "inv/b.txt", "inv/c.txt"]
    (conflict,) = result.conflicts
    assert (conflict.field, conflict.key) == ("total", "INV-1")
    assert [(v.doc_id, float(v.value)) for v in conflict.values] == [
        ("inv/a.txt", 100.0),
        ("inv/b.txt", 120.0),
    ]
    assert [v.evidence for v in conflict.values] == ["Total: 100.00", "Total: 120.00"]
    vendors = [e for e in result.entities if e.type == "vendor"]
    assert [(e.name, e.doc_ids) for e in vendors] == [("ACME GmbH", ["inv/a.txt", "inv/b.txt"])]


def test_integration_reads_records_wrapped_in_document_tags() -> None:
    docs = "".join(
        f'<document id="{d}">{json.dumps({"invoice_number": "N-7", "total": t})}</document>\n'
        for d, t in (("x.txt", 10), ("y.txt", 11))
    )
    body = structured(Integration, "")
    body["messages"] = [{"role": "user", "content": docs}]
    result = Integration.model_validate_json(answer_text(body))
    assert [[v.doc_id for v in c.values] for c in result.conflicts] == [["x.txt", "y.txt"]]


class Node(BaseModel):
    name: str
    children: list[Node] = []


class KindA(BaseModel):
    kind: Literal["a"]
    x: int


class KindB(BaseModel):
    kind: Literal["b"]
    y: str


class Unusual(BaseModel):
    tree: Node
    either: KindA | KindB
    when: datetime
    day: date | None
    tags: list[str] = Field(min_length=1)
    nums: list[int] = Field(max_length=2)
    score: float = Field(ge=10, le=20)
    code: str = Field(pattern=r"^[A-Z]{3}-\d+$")
    flag: bool
    level: Literal[1, 2, 3]
    count: int = Field(gt=3)
    below: float = Field(lt=-1)


def test_unusual_schemas_validate_and_constraints_from_descriptions_hold() -> None:
    text = "Flag: yes\nWhen: 2026-01-02\nScore: 99\nRef ABC-12 attached\nnothing else"
    body = structured(Unusual, text)
    schema = body["output_config"]["format"]["schema"]
    output = json.loads(answer_text(body))
    jsonschema.validate(output, schema)
    parsed = Unusual.model_validate(output)
    assert (parsed.flag, parsed.when.isoformat(), parsed.code) == (
        True,
        "2026-01-02T00:00:00+00:00",
        "ABC-12",
    )
    assert 10 <= parsed.score <= 20 and parsed.tags and len(parsed.nums) <= 2
    assert parsed.count > 3 and parsed.below < -1


CODE = """import os
import subprocess


def login(user, password):
    # TODO: hash this
    query = "SELECT * FROM users WHERE name = '" + user + "'"
    try:
        return eval(query)
    except:
        print("failed")
"""


class Finding(BaseModel):
    file: str
    line_start: int
    line_end: int
    severity: Literal["low", "medium", "high"]
    category: Literal["security", "bug", "style", "maintainability"]
    code: str
    message: str


class Review(BaseModel):
    findings: list[Finding]
    summary: str


def test_code_review_findings_quote_real_lines_with_line_numbers() -> None:
    review = Review.model_validate_json(answer_text(structured(Review, CODE, doc_id="src/app.py")))
    lines = CODE.split("\n")
    assert len(review.findings) >= 5
    for finding in review.findings:
        assert finding.file == "src/app.py"
        assert finding.line_start == finding.line_end
        assert finding.code == lines[finding.line_start - 1].strip()
    by_line = {f.line_start: f for f in review.findings}
    assert by_line[9].code == "return eval(query)" and by_line[9].severity == "high"
    assert by_line[6].category == "maintainability" and by_line[6].severity == "low"
    assert 7 in by_line and 10 in by_line and 11 in by_line


CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": "Start the review.\nFACT: budget is 12 USD\nsome chatter"},
    {"role": "assistant", "content": [{"type": "text", "text": "ok\nINV-104 total 99\nmore chatter"}]},
    {"role": "user", "content": "DECISION: skip scanned PDFs\nunrelated\nvendor ACME confirmed"},
]


def test_summarize_keeps_exactly_the_requested_lines() -> None:
    summary = summarize(CONVERSATION, "Be brief.\nKEEP LINES CONTAINING: INV-104 | ACME\n")
    assert summary.split("\n") == [
        "Summary of earlier conversation (3 messages):",
        "FACT: budget is 12 USD",
        "INV-104 total 99",
        "DECISION: skip scanned PDFs",
        "vendor ACME confirmed",
        "[dropped 5 other lines]",
    ]
    assert summarize(CONVERSATION, "KEEP LINES CONTAINING: INV-104 | ACME") == summary.replace(
        "Be brief.", ""
    )


def test_summarize_without_instructions_keeps_first_lines_and_is_capped() -> None:
    summary = summarize(CONVERSATION, None)
    assert "Start the review." in summary and "ok" in summary.split("\n")
    assert "some chatter" not in summary
    huge = [{"role": "user", "content": "\n".join(f"FACT: {i} " + "x" * 200 for i in range(2000))}]
    capped = summarize(huge, None)
    assert len(capped) <= 41_000 and capped.startswith("Summary of earlier conversation")
    assert "FACT: 1999 " in capped and "FACT: 0 " not in capped


LABELS = ["Invoice number", "Vendor", "Total", "Due date", "Reference", "Customer"]
VALUE_TEXT = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FF, blacklist_characters="<>\r\x85"),
    min_size=1,
).filter(lambda s: s.strip() != "")


class Loose(BaseModel):
    invoice_number: Text
    vendor: Text
    customer: Text
    reference_evidence: str | None
    reference: str | None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(st.tuples(st.sampled_from(LABELS), VALUE_TEXT), max_size=12),
    noise=st.lists(st.text(alphabet=st.characters(blacklist_characters=":,<>"), max_size=40), max_size=5),
)
def test_evidence_is_always_a_substring_of_the_document(
    rows: list[tuple[str, str]], noise: list[str]
) -> None:
    text = "\n".join([*noise, *(f"{label}: {value}" for label, value in rows)])
    doc_text = read_prompt(structured(Loose, text)).docs[0].text
    output = Loose.model_validate_json(answer_text(structured(Loose, text)))
    for quote in strings_under(output.model_dump(), {"evidence", "reference_evidence"}):
        assert quote in doc_text
    first = {label: value.strip() for label, value in reversed(rows)}
    if first.get("Vendor") not in (None, "[", "{"):  # `Label: [` opens a block (grounding.labels)
        assert output.vendor.value is not None and output.vendor.evidence is not None
        assert output.vendor.value in output.vendor.evidence
        if first["Vendor"].replace(" ", "").isalnum():
            assert output.vendor.value == first["Vendor"]
    else:
        assert output.vendor == Text(value=None, evidence=None)


def test_per_call_time_for_a_5kb_document() -> None:
    text = (INVOICE * 40)[:5000]
    body = structured(Invoice, text)
    runs = 200
    start = time.process_time()  # CPU time: other processes on a busy machine do not count
    for i in range(runs):
        body["messages"][0]["content"] = f'<document id="d{i}">{text}</document>'
        respond(body)
    per_call_ms = (time.process_time() - start) / runs * 1000
    print(f"respond() on a 5 KB invoice: {per_call_ms:.2f} ms CPU per call")
    assert per_call_ms < 25  # target < 5 ms; loose bound for slow CI machines


def integration_request(
    recipe: Any, records: list[dict[str, Any]], *, model: str, max_tokens: int
) -> dict[str, Any]:
    """One request for the whole integration schema over `records` (static prompt first, cached;
    then the results as labelled data): what the emulator's model must integrate in one answer.
    docmill's runs ask per slice for the model's sections only (`tasks.integration.notes`)."""
    states: dict[str, int] = defaultdict(int)
    for r in records:
        states[r.get("state", "?")] += 1
    shared: dict[str, set[str]] = defaultdict(set)
    for kf in recipe.key_fields:
        for r in records:
            if isinstance(r.get(kf), (str, int, float)):
                shared[f"{kf}={r[kf]}"].add(r["doc_id"])
    repeated = sorted(k for k, ids in shared.items() if len(ids) > 1)[:50]
    findings = [
        f"- {len(records)} per-file results ({', '.join(f'{k}: {v}' for k, v in sorted(states.items()))})"
    ]
    if repeated:
        findings.append("- values shared by several documents: " + "; ".join(repeated))
    body = "\n".join(json.dumps(r, ensure_ascii=False, sort_keys=True) for r in records)
    text = (
        "<per_file_results>\n## Key findings\n"
        + "\n".join(findings)
        + "\n\n## Results (one JSON object per document)\n"
        + body.replace("</per_file_results", "<\\/per_file_results")
        + "\n</per_file_results>"
    )
    return {
        "model": model,
        "max_tokens": max_tokens,
        "system": [
            {"type": "text", "text": recipe.integration_prompt, "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": text},
                    {
                        "type": "text",
                        "text": "Integrate the per-file results above. Cite only doc ids that appear in them. "
                        "Report every conflict with each value and its source doc id.",
                    },
                ],
            }
        ],
        "output_config": {
            "format": {
                "type": "json_schema",
                "schema": anthropic.transform_schema(recipe.integration_schema),
            },
            **effort_config(model, recipe.thinking),  # the recipe's effort: thinking within max_tokens
        },
    }


def test_real_invoice_recipe_on_generated_corpus(tmp_path: Path) -> None:
    """docmill's own request builders, recipe schemas and corpus generator, checked against its truth."""
    from examples.make_invoices import main as make_invoices
    from tasks.integration.records import compact_records
    from tasks.recipes import load_recipe
    from tasks.request import file_request
    from tasks.source.readers import extract_text

    out = tmp_path / "invoices"
    assert make_invoices(["--out", str(out), "--count", "30", "--seed", "3"]) == 0
    truth = [json.loads(line) for line in (tmp_path / "invoices.truth.jsonl").read_text().splitlines()]
    recipe = load_recipe("invoices")
    outcomes = []
    for rec in truth:
        if rec["record"] != "document" or rec["expected_status"] != "ok" or rec["fields"] is None:
            continue
        text = extract_text(rec["format"], (out / rec["doc_id"]).read_bytes())
        doc = SimpleNamespace(doc_id=rec["doc_id"], doc_type=rec["format"])
        body = file_request(recipe, doc, text, model="claude-sonnet-4-6", max_tokens=4000)
        output = recipe.file_schema.model_validate_json(answer_text(body)).model_dump()
        for name, want in rec["fields"].items():
            assert output[name]["value"] == want, (rec["doc_id"], name)
            assert output[name]["evidence"] in text
        items = [
            (i["description"], i["quantity"], i["unit_price"], i["amount"]) for i in output["line_items"]
        ]
        assert items == [
            (i["description"], i["quantity"], i["unit_price"], i["amount"]) for i in rec["line_items"]
        ]
        assert all(i["evidence"] in text for i in output["line_items"])
        outcomes.append({"doc_id": rec["doc_id"], "state": "succeeded", "output": output})
    assert len(outcomes) >= 20

    body = integration_request(recipe, compact_records(outcomes), model="claude-sonnet-4-6", max_tokens=8000)
    result: Any = recipe.integration_schema.model_validate_json(answer_text(body))
    planted = {
        (c["invoice_number"], c["field"], tuple(sorted((v["doc_id"], v["value"]) for v in c["values"])))
        for c in truth
        if c["record"] == "conflict"
    }
    found = {
        (c.key, c.field, tuple(sorted((v.doc_id, float(v.value)) for v in c.values)))
        for c in result.conflicts
    }
    assert planted and planted <= found
    known = {o["doc_id"] for o in outcomes}
    assert all(set(e.doc_ids) <= known for e in result.entities)
    assert {d.invoice_number for d in result.duplicates} >= {p[0] for p in planted}


def test_real_code_review_recipe_quotes_lines_of_example_codebase() -> None:
    from tasks.recipes import load_recipe
    from tasks.request import file_request

    recipe = load_recipe("code-review")
    total = 0
    for path in sorted((Path(__file__).parents[2] / "examples" / "codebase").glob("*.py")):
        text = path.read_text()
        doc = SimpleNamespace(doc_id=path.name, doc_type="py")
        body = file_request(recipe, doc, text, model="claude-sonnet-4-6", max_tokens=4000)
        review: Any = recipe.file_schema.model_validate_json(answer_text(body))
        lines = text.split("\n")
        for finding in review.findings:
            assert finding.file == path.name
            assert finding.quote == lines[finding.line_start - 1].strip()
        total += len(review.findings)
    assert total >= 3


def test_doc_id_from_the_real_wrapper_is_unescaped() -> None:
    from tasks.request import wrap_document

    doc_id = "R&D/it's <new>.txt"
    body = structured(Invoice, "")
    body["messages"] = [{"role": "user", "content": wrap_document(doc_id, "txt", INVOICE)}]
    invoice = Invoice.model_validate_json(answer_text(body))
    assert invoice.doc_id == doc_id
    assert invoice.invoice_number.evidence == "Invoice number: INV-104"

"""Recipes: loading (built-ins, path.py:NAME, errors), hashes, evidence paths, API-ready schemas."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from anthropic import transform_schema
from pydantic import BaseModel

from docmill.errors import ConfigError
from tasks.recipes import Recipe, load_recipe
from tasks.recipes.code_review import CodeReviewFile, CodeReviewIntegration
from tasks.recipes.invoices import InvoiceFile, InvoicesIntegration

USER_RECIPE = """
from pydantic import BaseModel
from tasks.recipes import Recipe

class Text(BaseModel):
    value: str | None
    evidence: str | None

class Out(BaseModel):
    title: Text

class Merged(BaseModel):
    titles: list[str]

MINE = Recipe(
    name="titles", version="3", file_schema=Out, file_prompt="Find the title.",
    integration_schema=Merged, integration_prompt="List the titles.", doc_types=frozenset({"txt"}),
    key_fields=("title",),
)
NOT_A_RECIPE = 42

def build():
    return MINE
"""


def test_builtins_and_aliases() -> None:
    inv = load_recipe("invoices")
    assert inv.name == "invoices" and inv.file_schema is InvoiceFile
    assert inv.integration_schema is InvoicesIntegration
    assert inv.key_fields == ("invoice_number", "vendor_name")
    assert {"txt", "md", "html", "json", "csv", "pdf"} <= inv.doc_types
    cr = load_recipe("code-review")
    assert cr is load_recipe("code_review") and cr.file_schema is CodeReviewFile
    assert cr.integration_schema is CodeReviewIntegration and "py" in cr.doc_types
    assert load_recipe(inv) is inv


def test_unknown_builtin_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown recipe 'invoice'") as ei:
        load_recipe("invoice")
    assert "code-review" in ei.value.one_line() and "\n" not in ei.value.one_line()


def test_user_recipe_from_file(tmp_path: Path) -> None:
    path = tmp_path / "my_recipe.py"
    path.write_text(USER_RECIPE)
    r = load_recipe(f"{path}:MINE")
    assert r.name == "titles" and r.version == "3" and r.key_fields == ("title",)
    assert load_recipe(f"{path}:build") == r  # a factory function works too
    assert r.evidence_fields == ("evidence",)  # the conventional name, found in the schema
    assert r.evidence({"title": {"value": "A", "evidence": "Title: A"}}) == [("$.title.evidence", "Title: A")]


@pytest.mark.parametrize(
    ("suffix", "message"),
    [
        ("missing.py:MINE", "does not exist"),
        ("my_recipe.py:NOPE", "has no attribute 'NOPE'"),
        ("my_recipe.py:NOT_A_RECIPE", "is a int, not a Recipe"),
        ("my_recipe.py:", "names no object"),
        ("broken.py:X", "failed to import: ZeroDivisionError"),
        ("my_recipe.py", r"is a file but names no Recipe in it \(it defines MINE\)"),
        ("missing.py", "recipe file .* does not exist"),
    ],
)
def test_user_recipe_errors(tmp_path: Path, suffix: str, message: str) -> None:
    (tmp_path / "my_recipe.py").write_text(USER_RECIPE)
    (tmp_path / "broken.py").write_text("X = 1 / 0\n")
    with pytest.raises(ConfigError, match=message) as ei:
        load_recipe(f"{tmp_path}/{suffix}")
    assert "\n" not in ei.value.one_line()


def test_recipe_validates_its_parts() -> None:
    inv = load_recipe("invoices")
    with pytest.raises(ConfigError, match="file_schema must be a pydantic BaseModel"):
        dataclasses.replace(inv, file_schema=dict)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="file_prompt is empty"):
        dataclasses.replace(inv, file_prompt="  ")
    with pytest.raises(dataclasses.FrozenInstanceError):
        inv.version = "2"  # type: ignore[misc]


def test_hashes_are_stable_and_move_with_their_inputs() -> None:
    inv = load_recipe("invoices")
    assert inv.prompt_hash() == inv.prompt_hash() and len(inv.prompt_hash()) == 64
    assert dataclasses.replace(inv).prompt_hash() == inv.prompt_hash()
    assert dataclasses.replace(inv, version="2").prompt_hash() != inv.prompt_hash()
    assert dataclasses.replace(inv, file_prompt=inv.file_prompt + ".").prompt_hash() != inv.prompt_hash()
    assert dataclasses.replace(inv, integration_prompt="x").prompt_hash() != inv.prompt_hash()
    assert dataclasses.replace(inv, version="2").schema_hash() == inv.schema_hash()
    assert (
        dataclasses.replace(inv, file_schema=CodeReviewFile, evidence_fields=("quote",)).schema_hash()
        != inv.schema_hash()
    )
    cr = load_recipe("code-review")
    assert cr.prompt_hash() != inv.prompt_hash() and cr.schema_hash() != inv.schema_hash()


def test_evidence_walk_finds_every_excerpt_of_the_declared_fields_with_its_path() -> None:
    output = {
        "invoice_number": {"value": "INV-1", "evidence": "Invoice number: INV-1"},
        "due_date": {"value": None, "evidence": None},
        "line_items": [{"description": "Tape", "evidence": "- Tape | 1 x 2.00 = 2.00"}],
        "findings": [{"quote": "except:", "excerpt": "", "code_quote": ["a", 3, "b"]}],
        "claims": [{"evidence": ["x", "y"]}],
        "evidence_count": "not evidence",
    }
    inv = load_recipe("invoices")
    assert inv.evidence_fields == ("evidence",)
    assert inv.evidence(output) == [
        ("$.invoice_number.evidence", "Invoice number: INV-1"),
        ("$.line_items[0].evidence", "- Tape | 1 x 2.00 = 2.00"),
        ("$.claims[0].evidence[0]", "x"),
        ("$.claims[0].evidence[1]", "y"),
    ]
    assert load_recipe("code-review").evidence(output) == [("$.findings[0].quote", "except:")]


class _Notes(BaseModel):
    class Item(BaseModel):
        task: str
        source_text: str
        lines: list[str]

    items: list[Item]
    size: int
    title_evidence: str | None


def _notes(**kw: Any) -> Recipe:
    return Recipe(
        name="notes",
        version="1",
        file_schema=_Notes,
        file_prompt="p",
        integration_schema=_Notes,
        integration_prompt="q",
        doc_types=frozenset({"txt"}),
        **kw,
    )


def test_declared_evidence_fields_are_checked_whatever_their_name() -> None:
    r = _notes(evidence_fields=("source_text", "lines"))
    out = {
        "items": [{"task": "t", "source_text": "Bo will ship it.", "lines": ["l1", ""]}],
        "title_evidence": "T",
    }
    assert r.evidence(out) == [("$.items[0].source_text", "Bo will ship it."), ("$.items[0].lines[0]", "l1")]
    from tasks.per_file.gate import evidence_report

    flags, _ = evidence_report(r, out, "Notes.\nBo will ship it.\n")
    assert [f["path"] for f in flags] == ["$.items[0].lines[0]"]  # not in the text: flagged


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (("source_txt",), "evidence field 'source_txt' is not in the file schema"),
        (("size",), "evidence field 'size' must hold text"),
        (("items",), "evidence field 'items' must hold text"),
        ("source_text", "evidence_fields must be a tuple"),
    ],
)
def test_a_declared_evidence_field_the_schema_lacks_is_an_error_at_load_time(
    fields: Any, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _notes(evidence_fields=fields)


def test_without_a_declaration_the_conventional_names_are_listed() -> None:
    assert _notes().evidence_fields == ("title_evidence",)


def _property_paths(schema: dict[str, Any], defs: dict[str, Any], prefix: str = "") -> set[str]:
    """Every property path reachable in a JSON schema (through $ref, anyOf, items)."""
    out: set[str] = set()
    if "$ref" in schema:
        return _property_paths(defs[schema["$ref"].split("/")[-1]], defs, prefix)
    for variant in schema.get("anyOf", []) + schema.get("allOf", []):
        out |= _property_paths(variant, defs, prefix)
    if "items" in schema:
        out |= _property_paths(schema["items"], defs, prefix + "[]")
    for name, sub in schema.get("properties", {}).items():
        out.add(f"{prefix}.{name}")
        out |= _property_paths(sub, defs, f"{prefix}.{name}")
    return out


def _objects(schema: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            found.append(schema)
        for v in schema.values():
            found += _objects(v)
    elif isinstance(schema, list):
        for v in schema:
            found += _objects(v)
    return found


@pytest.mark.parametrize("model", [InvoiceFile, InvoicesIntegration, CodeReviewFile, CodeReviewIntegration])
def test_schemas_survive_the_sdk_transform(model: type[BaseModel]) -> None:
    original = model.model_json_schema()
    strict = transform_schema(model)
    assert _property_paths(strict, strict.get("$defs", {})) == _property_paths(
        original, original.get("$defs", {})
    )
    for obj in _objects(strict):
        assert obj["additionalProperties"] is False
        assert set(obj.get("required", [])) == set(obj["properties"]), obj.get("title")
    # nothing was moved into descriptions: there were no unsupported constraints to strip
    assert "{" not in str([o.get("description", "") for o in _objects(strict)])


def test_invoice_schema_accepts_a_grounded_answer() -> None:
    value = {"value": None, "evidence": None}
    answer = {
        "doc_kind": "invoice",
        "invoice_number": {"value": "INV-1", "evidence": "Invoice number: INV-1"},
        "invoice_date": {"value": "2026-03-01", "evidence": "Invoice date: 2026-03-01"},
        "due_date": value,
        "vendor_name": {"value": "Hartmann Logistics GmbH", "evidence": "Vendor: Hartmann Logistics GmbH"},
        "currency": value,
        "subtotal": value,
        "tax": value,
        "total": {"value": 1234.5, "evidence": "Total: 1,234.50"},
        "line_items": [
            {
                "description": "Pallet wrap",
                "quantity": 3,
                "unit_price": 12.5,
                "amount": 37.5,
                "evidence": "- Pallet wrap | 3 x 12.50 = 37.50",
            },
        ],
    }
    parsed = InvoiceFile.model_validate(answer)
    assert parsed.total.value == 1234.5
    with pytest.raises(ValueError, match="extra"):
        InvoiceFile.model_validate({**answer, "surprise": 1})


@pytest.mark.parametrize("name", ["invoices", "code-review"])
def test_prompts_carry_the_rules(name: str) -> None:
    r: Recipe = load_recipe(name)
    assert "<document>" in r.file_prompt and "ignore any instruction" in r.file_prompt.lower()
    assert "verbatim" in r.file_prompt
    assert "<per_file_results>" in r.integration_prompt and "doc id" in r.integration_prompt.lower()
    if name == "invoices":
        assert "null" in r.file_prompt and "never guess" in r.file_prompt.lower()
        assert "every distinct value" in r.integration_prompt.lower()


FLAT = """
from pydantic import BaseModel
from tasks.recipes import Recipe

class Contract(BaseModel):
    effective_date: str | None
    effective_date_evidence: str | None
    governing_law: str | None
    governing_law_evidence: str | None

CONTRACTS = Recipe(
    name="contracts", version="1", file_schema=Contract, file_prompt="p", integration_schema=Contract,
    integration_prompt="q", doc_types=frozenset({"txt"}),
)
"""


def test_a_recipe_that_pairs_values_and_evidence_wrongly_is_refused_at_load_with_the_reason(
    tmp_path: Path,
) -> None:
    """Flat fields with `*_evidence` siblings used to load silently, and the report's "example with
    evidence" column stayed empty; a {value, evidence} field whose evidence is not checked neither."""
    (tmp_path / "my_recipe.py").write_text(USER_RECIPE)
    with pytest.raises(ConfigError) as ei:  # no `:NAME`: the line says which names the file has
        load_recipe(f"{tmp_path}/my_recipe.py")
    assert f"(use --recipe {tmp_path}/my_recipe.py:MINE: " in ei.value.one_line()
    (tmp_path / "contracts.py").write_text(FLAT)
    with pytest.raises(ConfigError) as ei:
        load_recipe(f"{tmp_path}/contracts.py:CONTRACTS")
    line = ei.value.one_line()
    assert "field 'effective_date' keeps its evidence in the sibling 'effective_date_evidence'" in line
    assert "(and 1 more like it)" in line and "{value, evidence}" in line and "docs/recipes.md" in line

    class Text(BaseModel):
        value: str | None
        evidence: str | None

    class Wrong(BaseModel):
        total: Text
        note: str

    with pytest.raises(
        ConfigError, match=r"field 'total' is \{value, evidence\} but 'evidence' is not in evidence_fields"
    ):
        Recipe(
            name="w",
            version="1",
            file_schema=Wrong,
            file_prompt="p",
            integration_schema=Wrong,
            integration_prompt="q",
            doc_types=frozenset({"txt"}),
            evidence_fields=("note",),
        )

"""The shape a recipe's file schema must have for the gate, the report and the exports to pair each
value with its evidence (a leaf; `Recipe` calls it when it is built, so a recipe that gets it wrong is
refused at load with the reason, before anything is sent).

The pattern is `{value, evidence}`: a field the report shows with its evidence is a nested model with
a `value` and an `evidence` string (docs/recipes.md). Two shapes look right and are not:

- a flat field with a sibling `X_evidence` (or `X_quote`): nothing pairs the two, so the gate cannot
  check that the excerpt supports the value, and the report's "example with evidence" stays empty;
- a `{value, evidence}` field whose `evidence` is not among the recipe's evidence fields (another
  name was declared): its excerpts would never be checked against the document.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

SIBLING_SUFFIXES = ("_evidence", "_quote")
PATTERN_HINT = (
    "pair them as {value, evidence}: class Text(BaseModel): value: str | None; evidence: str | None, then "
    "`FIELD: Text` (see 'The {value, evidence} pattern' in docs/recipes.md)"
)


def schema_objects(schema: type[BaseModel]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(path, properties, defs) of every object in the schema (the root, nested models, list items)."""
    root = schema.model_json_schema()
    defs: dict[str, Any] = root.get("$defs") or {}
    found: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    seen: set[str] = set()

    def visit(node: Any, path: str) -> None:
        if not isinstance(node, dict):
            return
        ref = node.get("$ref")
        if isinstance(ref, str):
            name = ref.rsplit("/", 1)[-1]
            if name not in seen:
                seen.add(name)
                visit(defs.get(name), path)
            return
        for alt in node.get("anyOf") or node.get("oneOf") or node.get("allOf") or []:
            visit(alt, path)
        if node.get("type") == "array":
            visit(node.get("items"), f"{path}[]")
        props = node.get("properties")
        if isinstance(props, dict):
            found.append((path, props, defs))
            for key, sub in props.items():
                visit(sub, f"{path}.{key}")

    visit(root, "$")
    return found


def _is_value_node(sub: Any, defs: dict[str, Any]) -> bool:
    """A property whose type is (or may be) an object with `value` and `evidence`."""
    if not isinstance(sub, dict):
        return False
    for alt in [sub, *(sub.get("anyOf") or [])]:
        ref = alt.get("$ref") if isinstance(alt, dict) else None
        target = defs.get(ref.rsplit("/", 1)[-1]) if isinstance(ref, str) else alt
        props = (target or {}).get("properties") if isinstance(target, dict) else None
        if isinstance(props, dict) and {"value", "evidence"} <= set(props):
            return True
    return False


def shape_problems(schema: type[BaseModel], evidence_fields: tuple[str, ...]) -> list[str]:
    """What in the file schema breaks the value-evidence pairing (empty: nothing)."""
    problems: list[str] = []
    for path, props, defs in schema_objects(schema):
        for key in props:
            base = next((key[: -len(s)] for s in SIBLING_SUFFIXES if key.endswith(s)), None)
            if base and base in props:
                where = f"{path}.{base}".removeprefix("$.")
                problems.append(
                    f"field {where!r} keeps its evidence in the sibling {key!r}: the gate, the report and "
                    "the exports pair a value with its evidence only as {value, evidence}"
                )
            elif _is_value_node(props[key], defs) and "evidence" not in evidence_fields:
                where = f"{path}.{key}".removeprefix("$.")
                problems.append(
                    f"field {where!r} is {{value, evidence}} but 'evidence' is not in evidence_fields "
                    f"{evidence_fields!r}: its excerpts would never be checked against the document"
                )
    return list(dict.fromkeys(problems))

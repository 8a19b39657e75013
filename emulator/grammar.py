"""The optional "compiled grammar is too large" rule (reference §00.5, anthropic-sdk-python #1185).

The API compiles a structured-output schema (and every strict tool's input schema) into a grammar
and refuses one that is too large with 400. The real limit is not published, so the emulator
scores a schema by a stand-in measure and refuses it above `grammar_max_complexity` (off when None):

    complexity = schema nodes (with every `$ref` expanded where it is used)
               + UNION_WEIGHT per alternative beyond the first of each anyOf / oneOf / type list

so nullable leaves (`anyOf [X, null]`, `type: [X, "null"]`) and reused `$defs` cost the most, as
in the reported cases.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

UNION_WEIGHT = 10
MAX_REF_DEPTH = 8
TOO_LARGE = (
    "The compiled grammar is too large, which would cause performance issues. Simplify your tool "
    "schemas or reduce the number of strict tools."
)


def _resolve(ref: str, root: Mapping[str, Any]) -> Any:
    node: Any = root
    for part in ref.removeprefix("#/").split("/"):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def complexity(schema: Any, root: Mapping[str, Any] | None = None, depth: int = 0) -> int:
    """The stand-in size of the grammar a JSON schema compiles to."""
    if isinstance(schema, list):
        return sum(complexity(s, root, depth) for s in schema)
    if not isinstance(schema, Mapping):
        return 0
    root = schema if root is None else root
    score = 1
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/") and depth < MAX_REF_DEPTH:
        score += complexity(_resolve(ref, root), root, depth + 1)
    for key in ("anyOf", "oneOf"):
        alternatives = schema.get(key)
        if isinstance(alternatives, list):
            score += UNION_WEIGHT * max(len(alternatives) - 1, 0)
    if isinstance(schema.get("type"), list):
        score += UNION_WEIGHT * max(len(schema["type"]) - 1, 0)
    for key, value in schema.items():
        if key in ("$defs", "definitions", "$ref", "enum", "const", "description", "title"):
            continue
        if key == "properties" and isinstance(value, Mapping):
            score += sum(complexity(v, root, depth) for v in value.values())
        elif isinstance(value, Mapping | list):
            score += complexity(value, root, depth)
    return score


def grammar_schemas(body: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(path, schema) of everything a request compiles into a grammar."""
    out: list[tuple[str, Any]] = []
    config = body.get("output_config")
    fmt = config.get("format") if isinstance(config, Mapping) else None
    if isinstance(fmt, Mapping) and isinstance(fmt.get("schema"), Mapping):
        out.append(("output_config.format.schema", fmt["schema"]))
    for i, tool in enumerate(body.get("tools") or []):
        if isinstance(tool, Mapping) and tool.get("strict") and isinstance(tool.get("input_schema"), Mapping):
            out.append((f"tools.{i}.input_schema", tool["input_schema"]))
    return out


def too_large(body: Mapping[str, Any], limit: int | None) -> str | None:
    """The path of the first schema over `limit`, or None (always None when limit is None)."""
    if limit is None:
        return None
    return next((path for path, schema in grammar_schemas(body) if complexity(schema) > limit), None)

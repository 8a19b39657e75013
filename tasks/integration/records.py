"""The per-file results as the integration pass reads them (a leaf): compact records, evidence of a
field, and merging the answers of several slices.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

PASS = "integration"

ID_KEYS = ("doc_id", "doc_ids", "source_doc_id", "source_doc_ids", "sources", "source", "documents")


def compact_value(value: Any) -> Any:
    """`{value, evidence}` field objects become their value; lists and dicts recurse."""
    if isinstance(value, dict):
        if "value" in value and set(value) <= {"value", "evidence", "confidence", "quote"}:
            return compact_value(value["value"])
        return {k: compact_value(v) for k, v in value.items() if k not in ("evidence", "quote")}
    if isinstance(value, list):
        return [compact_value(v) for v in value]
    return value


def evidence_of(output: dict[str, Any], field: str) -> str | None:
    value = output.get(field)
    if isinstance(value, dict):
        ev = value.get("evidence") or value.get("quote")
        return ev if isinstance(ev, str) else None
    return None


def compact_records(outcomes: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-file results as compact records: doc id, state, field values."""
    records = []
    for o in outcomes:
        if o.get("output") and o.get("state") in ("succeeded", "needs_review"):
            records.append({"doc_id": o["doc_id"], "state": o["state"], **compact_value(o["output"])})
    return sorted(records, key=lambda r: r["doc_id"])


def results_block(records: Iterable[dict[str, Any]]) -> str:
    """Compact records as JSON lines inside `<per_file_results>`, the one tag they are labelled data
    in; a closing tag inside a value is made inert."""
    lines = "\n".join(json.dumps(r, ensure_ascii=False, sort_keys=True) for r in records)
    lines = lines.replace("</per_file_results", "<\\/per_file_results")
    return f"<per_file_results>\n{lines}\n</per_file_results>"


def merge_outputs(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge slice outputs: lists concatenate without duplicates, scalars keep the first."""
    merged: dict[str, Any] = {}
    for part in parts:
        for k, v in part.items():
            if isinstance(v, list):
                seen = {json.dumps(x, sort_keys=True) for x in merged.get(k, [])}
                merged.setdefault(k, []).extend(x for x in v if json.dumps(x, sort_keys=True) not in seen)
            else:
                merged.setdefault(k, v)
    return merged

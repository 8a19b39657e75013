"""Checks the integration pass makes in code and never leaves to the model (a leaf): conflicts on
key fields with every value and source, coverage gaps, cited doc ids and their removal.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from tasks.integration.records import ID_KEYS, compact_value, evidence_of
from tasks.records import Conflict


def find_conflicts(outcomes: list[dict[str, Any]], key_fields: tuple[str, ...]) -> list[Conflict]:
    """Documents sharing the first key field's value but disagreeing on another scalar field."""
    if not key_fields:
        return []
    key_field = key_fields[0]
    groups: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for o in outcomes:
        out = o.get("output") or {}
        key = compact_value(out.get(key_field))
        if key not in (None, "") and not isinstance(key, (dict, list)):
            groups[key].append(o)
    conflicts: list[Conflict] = []
    for key, members in sorted(groups.items(), key=lambda kv: str(kv[0])):
        if len({m.get("sha256") or m["doc_id"] for m in members}) < 2:
            continue
        fields = sorted({f for m in members for f in (m.get("output") or {})} - {key_field})
        for field in fields:
            values = []
            for m in members:
                v = compact_value((m.get("output") or {}).get(field))
                if v is None or isinstance(v, (dict, list)):
                    continue
                values.append(
                    {"value": v, "doc_id": m["doc_id"], "evidence": evidence_of(m["output"], field)}
                )
            if len({json.dumps(v["value"], sort_keys=True) for v in values}) > 1:
                conflicts.append({"field": field, "key_field": key_field, "key": key, "values": values})
    return conflicts


def coverage_gaps(outcomes: list[dict[str, Any]], schema_fields: Iterable[str]) -> list[dict[str, Any]]:
    gaps: list[dict[str, Any]] = []
    for o in outcomes:
        if o.get("state") != "succeeded":
            reason = o.get("reason") or o.get("failure_type") or o.get("state")
            gaps.append({"doc_id": o["doc_id"], "state": o.get("state"), "reason": reason})
    found: set[str] = set()
    for o in outcomes:
        for k, v in (o.get("output") or {}).items():
            if k not in found and (
                bool(v) if isinstance(v, list) else compact_value(v) not in (None, "", [])
            ):
                found.add(k)
    for field in schema_fields:
        if field not in found and any(o.get("output") for o in outcomes):
            gaps.append({"field": field, "reason": "no document provided a value"})
    return gaps


def cited_ids(value: Any) -> Iterator[tuple[str, str]]:
    """(json path, doc id) for every doc id cited anywhere in an integration output."""
    stack: list[tuple[str, Any]] = [("$", value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ID_KEYS:
                    for i, item in enumerate(v if isinstance(v, list) else [v]):
                        if isinstance(item, str):
                            yield (f"{path}.{k}[{i}]" if isinstance(v, list) else f"{path}.{k}", item)
                stack.append((f"{path}.{k}", v))
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(node))


def drop_unknown(value: Any, known: set[str]) -> Any:
    """Remove citations of unknown doc ids (claims left with no source are flagged by the caller)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if k in ID_KEYS and isinstance(v, list):
                out[k] = [i for i in v if not isinstance(i, str) or i in known]
            elif k in ID_KEYS and isinstance(v, str) and v not in known:
                out[k] = None
            else:
                out[k] = drop_unknown(v, known)
        return out
    if isinstance(value, list):
        return [drop_unknown(v, known) for v in value]
    return value

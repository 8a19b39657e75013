"""Per-document JSON results inside a prompt (the integration pass's input), flattened to fields."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from emulator.roles import EVIDENCE_NAMES

ID_KEYS = ("doc_id", "source_doc_id", "document_id", "id")  # the keys that name a record's document


def json_records(docs: Sequence[tuple[str | None, str]], full_text: str) -> list[tuple[str, dict[str, Any]]]:
    """Per-document JSON results in a prompt as (doc_id, flat {field: value}) pairs, from its
    documents as (doc_id, text) and its whole text (plain data: `grounding.Prompt` calls this, so
    this module stays below it).

    A record is a JSON object with a doc id key (`doc_id`, `source_doc_id`, `document_id`, `id`),
    or the JSON body of a `<document id=...>`. Nested `{value, evidence}` objects collapse to value;
    their evidence is kept under `<field>.__evidence`.
    """
    found: list[tuple[str, dict[str, Any]]] = []
    decoder = json.JSONDecoder()
    sources = list(docs) if docs[0][0] else []
    sources.append((None, full_text))
    seen: set[str] = set()
    for default_id, text in sources:
        pos = 0
        while len(found) < 500:
            start = min((i for i in (text.find("{", pos), text.find("[", pos)) if i >= 0), default=-1)
            if start < 0:
                break
            try:
                obj, end = decoder.raw_decode(text, start)
            except ValueError:
                pos = start + 1
                continue
            pos = end
            for doc_id, record in _records_in(obj, default_id):
                key = json.dumps([doc_id, record], sort_keys=True, default=str)
                if key not in seen:
                    seen.add(key)
                    found.append((doc_id, record))
    return found


def _records_in(obj: Any, default_id: str | None) -> list[tuple[str, dict[str, Any]]]:
    if isinstance(obj, list):
        return [r for item in obj[:1000] for r in _records_in(item, default_id)]
    if not isinstance(obj, dict):
        return []
    doc_id = next((obj[k] for k in ID_KEYS if isinstance(obj.get(k), str)), None)
    if doc_id is None:
        nested = [r for value in obj.values() if isinstance(value, list) for r in _records_in(value, None)]
        if nested or default_id is None:
            return nested
        doc_id = default_id
    flat: dict[str, Any] = {}
    flatten(obj, "", flat)
    found = [(doc_id, flat)] if flat else []
    for key, value in obj.items():  # nested lists of objects (findings, line items) as sub-records
        for item in value[:200] if isinstance(value, list) else []:
            if isinstance(item, dict):
                sub: dict[str, Any] = {"__sub": key}
                flatten(item, "", sub)
                found.append((doc_id, sub))
    return found


def flatten(obj: dict[str, Any], prefix: str, out: dict[str, Any]) -> None:
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if key in ID_KEYS:
            continue
        if isinstance(value, dict):
            if "value" in value:
                out[name] = value["value"]
                ev = next(
                    (value[k] for k in ("evidence", "quote", "excerpt", "source_text") if k in value), None
                )
                if isinstance(ev, str):
                    out[name + ".__evidence"] = ev
            else:
                flatten(value, name + ".", out)
        elif isinstance(value, str) and key in EVIDENCE_NAMES:
            out["__evidence"] = value
        elif isinstance(value, str | int | float) and not isinstance(value, bool):
            out[name] = value

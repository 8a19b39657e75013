"""The sections code builds from every current per-file result, exactly, on every run: entities,
duplicates, conflicts (every value with its source and evidence), coverage gaps (through
`FactTracker`), and the check that every document id is accounted for.

A recipe whose integration schema has all of `entities`, `duplicates`, `conflicts` and
`coverage_gaps` gets these sections from code; the model only writes the rest (key findings,
claims). Other recipes keep the model's sections and get code's conflicts and gaps as checks.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tasks.integration.records import compact_value, evidence_of

if TYPE_CHECKING:
    from tasks.recipes import Recipe

CODE_SECTIONS = ("entities", "duplicates", "conflicts", "coverage_gaps")


def _scalar(value: Any) -> bool:
    return value is not None and value != "" and not isinstance(value, (dict, list))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def item_field(schema: Any, name: str) -> str | None:
    """The first field besides `doc_ids` of the items of list field `name` of a pydantic schema."""
    field = getattr(schema, "model_fields", {}).get(name)
    args = getattr(field.annotation, "__args__", ()) if field else ()
    item = args[0] if args else None
    return next((f for f in getattr(item, "model_fields", {}) if f != "doc_ids"), None)


class FactTracker:
    """Exact cross-document facts, taken result by result: every doc id, entities, the values of
    each field per key (conflicts), duplicated keys and gaps."""

    def __init__(self, key_fields: tuple[str, ...], entity_field: str | None) -> None:
        self.key_field = key_fields[0] if key_fields else None
        self.entity_field = entity_field
        self.doc_ids: list[str] = []
        self._seen: set[str] = set()
        # key value -> field -> value text -> [(doc_id, evidence)]
        self.groups: dict[str, dict[str, dict[str, list[tuple[str, str | None]]]]] = defaultdict(
            lambda: defaultdict(dict)
        )
        self.key_docs: dict[str, list[str]] = defaultdict(list)
        self.entities: dict[str, list[str]] = defaultdict(list)
        self.gaps: list[dict[str, Any]] = []
        self.filled: set[str] = set()

    def add(self, outcome: dict[str, Any]) -> None:
        """Take one per-file outcome. Its list fields only count as filled or not (conflicts compare
        scalars), so their items are not walked."""
        output = {
            k: ([True] if v else []) if isinstance(v, list) else v
            for k, v in (outcome.get("output") or {}).items()
        }
        record = {"doc_id": outcome["doc_id"], "state": outcome.get("state"), **compact_value(output)}
        if outcome.get("state") not in (None, "succeeded"):
            record["reason"] = outcome.get("reason") or outcome.get("failure_type")
        doc_id = str(record["doc_id"])
        if doc_id in self._seen:
            return
        self._seen.add(doc_id)
        self.doc_ids.append(doc_id)
        state = record["state"]
        if state != "succeeded":
            self.gaps.append(
                {"doc_id": doc_id, "field": None, "reason": f"{state}: {record.get('reason') or state}"}
            )
        self.filled.update(k for k, v in record.items() if v not in (None, "", []))
        if self.entity_field and _scalar(record.get(self.entity_field)):
            self.entities[str(record[self.entity_field])].append(doc_id)
        key = record.get(self.key_field) if self.key_field else None
        if _scalar(key):
            key = str(key)
            self.key_docs[key].append(doc_id)
            for field, value in record.items():
                if field in ("doc_id", "state", "reason", self.key_field) or not _scalar(value):
                    continue
                self.groups[key][field].setdefault(_text(value), []).append(
                    (doc_id, evidence_of(output, field))
                )

    def conflicts(self) -> list[dict[str, Any]]:
        out = []
        for key in sorted(self.groups):
            if len(self.key_docs[key]) < 2:
                continue
            for field in sorted(self.groups[key]):
                values = self.groups[key][field]
                if len(values) > 1:
                    out.append(
                        {
                            "field": field,
                            "key": key,
                            "values": [
                                {"value": v, "doc_id": d, "evidence": e}
                                for v, docs in values.items()
                                for d, e in docs
                            ],
                        }
                    )
        return out

    def duplicates(self) -> list[dict[str, Any]]:
        return [{"key": k, "doc_ids": ids} for k, ids in sorted(self.key_docs.items()) if len(ids) > 1]

    def field_gaps(self, fields: Iterable[str]) -> list[dict[str, Any]]:
        """Schema fields no document filled (one gap each)."""
        reason = "no document provided a value"
        return [
            {"doc_id": None, "field": f, "reason": reason}
            for f in fields
            if f not in self.filled and self.doc_ids
        ]

    def headline(self) -> str:
        """The code-written first key finding: counts of the whole corpus."""
        return (
            f"{len(self.doc_ids)} documents integrated; {len(self.conflicts())} conflicts, "
            f"{len(self.duplicates())} duplicated {self.key_field or 'keys'}, {len(self.gaps)} documents with gaps."
        )


def code_built(recipe: Recipe) -> bool:
    """True when code builds the entity, duplicate, conflict and gap sections of this recipe."""
    return set(CODE_SECTIONS) <= set(recipe.integration_schema.model_fields)


def model_sections(recipe: Recipe) -> list[str]:
    """The integration schema's sections the model writes."""
    fields = list(recipe.integration_schema.model_fields)
    return [f for f in fields if f not in CODE_SECTIONS] if code_built(recipe) else fields


def tracker_of(outcomes: list[dict[str, Any]], recipe: Recipe) -> FactTracker:
    """Every current result through the fact tracker, in doc id order."""
    tracker = FactTracker(tuple(recipe.key_fields), item_field(recipe.integration_schema, "entities"))
    for o in sorted(outcomes, key=lambda o: o["doc_id"]):
        tracker.add(o)
    return tracker


def sections(tracker: FactTracker, recipe: Recipe) -> dict[str, Any]:
    """entities, duplicates, conflicts and coverage gaps in the recipe's integration schema shape.
    A succeeded document without an entity value gets a gap, so every doc id is accounted for."""
    entity = tracker.entity_field or "name"
    dup = item_field(recipe.integration_schema, "duplicates") or "key"
    gaps = list(tracker.gaps)  # {doc_id, field: None, reason} of each document not succeeded
    in_entities = {d for ids in tracker.entities.values() for d in ids}
    with_gap = {g["doc_id"] for g in gaps}
    gaps += [
        {"doc_id": d, "field": entity, "reason": f"no {entity} stated"}
        for d in tracker.doc_ids
        if d not in in_entities and d not in with_gap
    ]
    gaps += tracker.field_gaps(recipe.file_schema.model_fields)
    return {
        "entities": [{entity: n, "doc_ids": ids} for n, ids in sorted(tracker.entities.items())],
        "duplicates": [{dup: d["key"], "doc_ids": d["doc_ids"]} for d in tracker.duplicates()],
        "conflicts": tracker.conflicts(),
        "coverage_gaps": gaps,
    }


def unaccounted(doc_ids: list[str], output: dict[str, Any]) -> list[str]:
    """Doc ids that appear in no entity and no coverage gap of a code-built output."""
    seen = {d for e in output.get("entities") or [] for d in e.get("doc_ids") or []}
    seen |= {g.get("doc_id") for g in output.get("coverage_gaps") or []}
    return [d for d in doc_ids if d not in seen]

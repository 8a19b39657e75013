"""The sections code builds from every current per-file result, exactly, on every run: entities,
duplicates, conflicts (every value with its source and evidence), coverage gaps (through
`long.FactTracker`), and the check that every document id is accounted for.

A recipe whose integration schema has all of `entities`, `duplicates`, `conflicts` and
`coverage_gaps` gets these sections from code; the model only writes the rest (key findings,
claims). Other recipes keep the model's sections and get code's conflicts and gaps as checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tasks.integration.long import FactTracker, item_field

if TYPE_CHECKING:
    from tasks.recipes import Recipe

CODE_SECTIONS = ("entities", "duplicates", "conflicts", "coverage_gaps")


def code_built(recipe: Recipe) -> bool:
    """True when code builds the entity, duplicate, conflict and gap sections of this recipe."""
    return set(CODE_SECTIONS) <= set(recipe.integration_schema.model_fields)


def model_sections(recipe: Recipe) -> list[str]:
    """The integration schema's sections the model writes."""
    fields = list(recipe.integration_schema.model_fields)
    return [f for f in fields if f not in CODE_SECTIONS] if code_built(recipe) else fields


def _shallow(output: dict[str, Any]) -> dict[str, Any]:
    """An output as the tracker reads it: list fields only count as filled or not (the tracker
    compares scalars), so their items are not walked."""
    return {k: ([True] if v else []) if isinstance(v, list) else v for k, v in output.items()}


def tracker_of(outcomes: list[dict[str, Any]], recipe: Recipe) -> FactTracker:
    """Every current result through the fact tracker, in doc id order."""
    tracker = FactTracker(tuple(recipe.key_fields), item_field(recipe.integration_schema, "entities"))
    for o in sorted(outcomes, key=lambda o: o["doc_id"]):
        tracker.add(
            {
                "doc_id": o["doc_id"],
                "state": o.get("state"),
                "reason": o.get("reason") or o.get("failure_type"),
                "output": _shallow(o.get("output") or {}),
            }
        )
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

"""The integration state of one (source, recipe, model), kept between runs (a leaf).

`integration/<scope>/state.json` holds, per document, a fingerprint of what the integration read of
it (state, reason, output) and the notes slice that covered it; per notes slice, the model's
answer and the documents it read; and the sections of the last integrated output (entities,
duplicates, conflicts with every value and source, coverage gaps, key findings).

A run diffs the current per-file results against it: documents that are new or whose fingerprint
changed are integrated again; documents that are gone or changed retract the notes slice that
covered them (its other documents, unchanged, rejoin the delta: a slice is bounded, so retraction
is too). Exact facts (entities, duplicates, conflicts, gaps) are code-computed from every current
result on each run, so they never depend on what was retracted.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from tasks.request import answered_by

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore
    from docmill.settings import Settings
    from tasks.recipes import Recipe

STATE_VERSION = 1
NO_NOTES = "-"  # a document the model has nothing to read of (failed: no output)


class DocEntry(TypedDict, total=False):
    fp: str  # fingerprint of what the integration read of the document (always present)
    slice: str | None  # the notes slice that covered it; None: notes still to be asked (always present)
    ref: str  # `ledger_ref` of the result `fp` was computed from: the same ref, the same fp


class SliceNotes(TypedDict):
    doc_ids: list[str]
    key: str  # the ledger key of the answer
    output: dict[str, Any]
    run_id: str  # the run that asked (run ids sort by time: newest notes last)


class IntegrationState(TypedDict):
    version: int
    scope: dict[str, str]
    docs: dict[str, DocEntry]
    slices: dict[str, SliceNotes]
    sections: dict[str, Any]  # the last integrated output
    run_id: str | None  # the run that wrote it


def fingerprint(outcome: dict[str, Any]) -> str:
    """What the integration reads of a per-file result, hashed: a changed answer is a changed document."""
    part = {
        "state": outcome.get("state"),
        "reason": outcome.get("reason") or outcome.get("failure_type"),
        "output": outcome.get("output"),
    }
    return hashlib.sha256(json.dumps(part, sort_keys=True, default=str).encode()).hexdigest()[:32]


LEDGER_REF_FORMAT = 1  # raise when an outcome is built otherwise from its ledger record


def ledger_ref(outcome: dict[str, Any]) -> str | None:
    """What decides a result taken from the results ledger (its key: a result is written once,
    invariant 1; and the state and reason the run set), or None for a result answered or decided
    in its run, or carrying a review decision: the same ref, the same `fingerprint`."""
    if not outcome.get("from_ledger") or not outcome.get("key") or outcome.get("review"):
        return None
    reason = outcome.get("reason") or outcome.get("failure_type")
    return f"{LEDGER_REF_FORMAT}|{outcome['key']}|{outcome.get('state')}|{reason}"


def fingerprints(
    outcomes: list[dict[str, Any]], state: IntegrationState
) -> tuple[dict[str, str], dict[str, str]]:
    """(doc id -> `fingerprint`, doc id -> `ledger_ref`) of every result. A ledger result whose ref
    the state recorded with its fingerprint takes that fingerprint instead of encoding its output
    again (~30 µs a document: an unchanged nightly's results are all such)."""
    docs = state["docs"]
    fps: dict[str, str] = {}
    refs: dict[str, str] = {}
    for o in outcomes:
        doc_id, ref = o["doc_id"], ledger_ref(o)
        entry = docs.get(doc_id)
        if ref is not None and entry is not None and entry.get("ref") == ref:
            fps[doc_id] = entry["fp"]
        else:
            fps[doc_id] = fingerprint(o)
        if ref is not None:
            refs[doc_id] = ref
    return fps, refs


def record_refs(state: IntegrationState, refs: dict[str, str]) -> bool:
    """Record each ledger result's ref beside its fingerprint (after `apply_delta`: each document's
    entry holds the fingerprint of its current result); True when an entry changed."""
    moved = False
    for doc_id, entry in state["docs"].items():
        ref = refs.get(doc_id)
        if entry.get("ref") == ref:
            continue
        if ref is None:
            entry.pop("ref", None)
        else:
            entry["ref"] = ref
        moved = True
    return moved


def scope_of(source: str, recipe: Recipe, settings: Settings) -> dict[str, str]:
    """What an integration state belongs to: the source, the recipe (its prompts and schemas), the
    models of both passes, and who answers (`answered_by`)."""
    return {
        "source": source,
        "recipe": recipe.name,
        "recipe_version": recipe.version,
        "prompt_hash": recipe.prompt_hash(),
        "schema_hash": recipe.schema_hash(),
        "model": settings.api.model,
        "integration_model": settings.api.integration_model,
        **answered_by(settings),
    }


def state_key(scope: dict[str, str]) -> str:
    digest = hashlib.sha256(json.dumps(scope, sort_keys=True).encode()).hexdigest()[:24]
    return f"integration/{digest}/state.json"


def empty_state(scope: dict[str, str]) -> IntegrationState:
    return {
        "version": STATE_VERSION,
        "scope": scope,
        "docs": {},
        "slices": {},
        "sections": {},
        "run_id": None,
    }


def load_state(store: ObjectStore, scope: dict[str, str]) -> IntegrationState:
    """The stored state of `scope`, or an empty one (none yet, or written by another version)."""
    found = store.get_json_or_none(state_key(scope))
    if not isinstance(found, dict) or found.get("version") != STATE_VERSION or found.get("scope") != scope:
        return empty_state(scope)
    state: IntegrationState = found  # type: ignore[assignment]
    return state


def save_state(store: ObjectStore, state: IntegrationState) -> str:
    key = state_key(state["scope"])
    store.put_json(key, state)
    return key


@dataclass
class Delta:
    """How the current per-file results differ from the state."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # unchanged, but their notes are missing
    retracted_slices: list[str] = field(default_factory=list)
    needs_notes: list[str] = field(default_factory=list)  # what the model reads this run

    def counts(self) -> dict[str, int]:
        """How many of each (`needs_notes` as `to_integrate`), in the fields' order."""
        return {("to_integrate" if k == "needs_notes" else k): len(v) for k, v in vars(self).items()}


def apply_delta(state: IntegrationState, fps: dict[str, str]) -> Delta:
    """Diff `fps` (doc id -> fingerprint of every current result) against `state` and update it in
    place: removed documents leave, changed and new ones come in without notes, and every slice that
    covered a removed or changed document is retracted (its remaining documents need notes again)."""
    docs = state["docs"]
    delta = Delta()
    delta.removed = sorted(set(docs) - set(fps))
    delta.added = sorted(set(fps) - set(docs))
    delta.changed = sorted(d for d in fps if d in docs and docs[d]["fp"] != fps[d])
    gone = set(delta.removed) | set(delta.changed)
    retract = sorted({s for d in gone if (s := docs[d]["slice"]) and s in state["slices"]})
    delta.retracted_slices = retract
    for s in retract:
        for d in state["slices"].pop(s)["doc_ids"]:
            if d in docs:
                docs[d]["slice"] = None
    for d in delta.removed:
        del docs[d]
    for d in delta.added + delta.changed:
        docs[d] = {"fp": fps[d], "slice": None}
    fresh = set(delta.added) | set(delta.changed)
    delta.pending = sorted(d for d, e in docs.items() if e["slice"] is None and d not in fresh)
    delta.needs_notes = sorted(d for d, e in docs.items() if e["slice"] is None)
    return delta


def record_slice(state: IntegrationState, slice_id: str, notes: SliceNotes) -> None:
    state["slices"][slice_id] = notes
    for d in notes["doc_ids"]:
        if d in state["docs"]:
            state["docs"][d]["slice"] = slice_id


def mark_without_notes(state: IntegrationState, doc_ids: list[str]) -> None:
    """Documents with nothing for the model to read (no output) are covered by code alone."""
    for d in doc_ids:
        if d in state["docs"]:
            state["docs"][d]["slice"] = NO_NOTES

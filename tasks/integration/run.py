"""The cross-document integration pass, incremental.

Input: the gated per-file results, never the raw documents. Output: the recipe's integration
schema, assembled from two parts:

- sections code builds exactly from every current result on every run (`facts`): entities,
  duplicates, conflicts with every value, source and evidence, coverage gaps; plus the checks
  (conflicts, gaps, every doc id accounted for);
- sections only the model can write (`notes`: key findings, claims), asked over the results that
  are new or changed since the stored integration state (`state`) in bounded slices, in parallel,
  each with a digest of the state. A removed or changed document retracts the notes that read it.

`integration.mode`: incremental (default) merges into the state of this source, recipe and
model; full starts from an empty state (and stores the result); skip runs nothing. An unchanged
source integrates with no model call. A slice that could not be answered makes the record
`partial` (or `failed`), names its documents, and is asked again by the next run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from checkpoints.keys import content_hash, safe_segment
from docmill.logs import get_logger
from tasks.integration.checks import coverage_gaps, drop_unknown, find_conflicts
from tasks.integration.digest import choose_reading, delta_digest, state_digest
from tasks.integration.facts import code_built, model_sections, sections, tracker_of, unaccounted
from tasks.integration.notes import Asked, Notes, ask_all
from tasks.integration.records import compact_records, merge_outputs
from tasks.integration.state import (
    Delta,
    IntegrationState,
    apply_delta,
    empty_state,
    fingerprints,
    load_state,
    mark_without_notes,
    record_refs,
    record_slice,
    save_state,
    scope_of,
    state_key,
)
from tasks.records import IntegrationChecks, IntegrationResult

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore
    from docmill.settings import Settings
    from tasks.api.client import ModelClient
    from tasks.recipes import Recipe

log = get_logger("integrate")


READABLE = ("succeeded", "needs_review")
RECORD_VERSION = 1  # raise when code's sections or checks change: an unchanged source integrates anew
KEY_FINDINGS = 30  # the model's findings kept in the output, newest first (claims are all kept)


def _facts(recipe: Recipe, outcomes: list[dict[str, Any]]) -> tuple[dict[str, Any], str | None]:
    """Code's sections of the whole corpus (conflicts and duplicates at least) and its headline."""
    if code_built(recipe):
        tracker = tracker_of(outcomes, recipe)
        return sections(tracker, recipe), tracker.headline()
    return {"conflicts": find_conflicts(outcomes, tuple(recipe.key_fields)), "duplicates": []}, None


def _assemble(
    recipe: Recipe, known: set[str], state: IntegrationState, built: dict[str, Any], first: str | None
) -> dict[str, Any]:
    """The integration output: code's sections and every stored slice's notes, merged; citations of
    documents no longer in the source removed."""
    order = sorted(state["slices"], key=lambda s: (state["slices"][s].get("run_id") or "", s), reverse=True)
    parts = [state["slices"][s]["output"] for s in order]  # newest first
    merged = drop_unknown(merge_outputs(parts), known)
    for name, value in merged.items():  # items left citing nothing are retracted with their source
        if isinstance(value, list):
            merged[name] = [x for x in value if not (isinstance(x, dict) and x.get("doc_ids") == [])]
    if not code_built(recipe):
        return {name: merged.get(name, []) for name in model_sections(recipe)}
    output = {
        n: built[n] if n in built else merged.get(n, []) for n in recipe.integration_schema.model_fields
    }
    if "key_findings" in output:
        findings = list(dict.fromkeys(merged.get("key_findings") or []))[:KEY_FINDINGS]
        output["key_findings"] = [first, *findings]
    return output


def _ask_delta(
    notes: Notes,
    state: IntegrationState,
    records: list[dict[str, Any]],
    built: dict[str, Any],
    prior: dict[str, Any],
    documents: int,
) -> Asked:
    """The model's notes over this run's delta: every result when there are few, else a code-built
    digest of all of them plus a bounded, prioritised reading (recipes whose exact sections code
    builds). Answers go into `state`."""
    s = notes.settings.integration
    # a recipe whose sections are all the model's (code-review) has every result read in full
    limit = s.read_records if code_built(notes.recipe) else len(records)
    reading = choose_reading(records, built, limit)
    notes.summary = state_digest(prior, documents - len(records), s.digest_chars)
    if len(reading) < len(records):
        notes.summary += "\n\n" + delta_digest(records, built, read=len(reading), limit=s.digest_chars)
    asked = ask_all(notes, reading)
    for answer in asked.answers:
        record_slice(state, answer["key"][:32], answer)
    read = {r["doc_id"] for r in reading}
    rest = [r["doc_id"] for r in records if r["doc_id"] not in read]
    if rest and asked.answers:  # summarised by the digest every answer read: covered, retractable
        key = content_hash([sorted(rest), notes.summary])
        record_slice(
            state, f"digest-{key[:24]}", {"doc_ids": rest, "key": key, "output": {}, "run_id": notes.run_id}
        )
    return asked


def _status(asked: Asked, needed: int) -> str:
    if not asked.problems:
        return "complete"
    failed = sum(len(p.get("doc_ids") or []) for p in asked.problems)
    return "failed" if failed >= needed else "partial"


def _checks(
    recipe: Recipe, outcomes: list[dict[str, Any]], output: dict[str, Any], asked: Asked
) -> IntegrationChecks:
    ids = sorted(o["doc_id"] for o in outcomes)
    checks: IntegrationChecks = {
        "conflicts": find_conflicts(outcomes, tuple(recipe.key_fields)),
        "coverage_gaps": coverage_gaps(outcomes, list(recipe.file_schema.model_fields)),
        "flags": asked.flags,
    }
    if code_built(recipe):
        checks["unaccounted"] = unaccounted(ids, output)
    return checks


def _skipped(run_id: str, recipe: Recipe, outcomes: list[dict[str, Any]]) -> IntegrationResult:
    return {
        "run_id": run_id,
        "recipe": recipe.name,
        "mode": "skip",
        "status": "skipped",
        "problems": [],
        "documents": len(outcomes),
        "doc_ids": sorted(o["doc_id"] for o in outcomes),
        "delta": {},
        "calls": 0,
        "truncated": 0,
        "state_key": None,
        "output": {},
        "checks": {"conflicts": [], "coverage_gaps": [], "flags": []},
    }


def unchanged_record(
    store: ObjectStore, state: IntegrationState, delta: Delta, mode: str, run_id: str
) -> IntegrationResult | None:
    """The integration record of the run that wrote `state`, as this run's, when nothing it read
    moved: no document added, changed, removed or left without notes (`delta` all zero), and that
    run's record is complete, of this code's version, of the same mode and state, over the same
    documents, with the output the state holds. Code's sections and checks read only what the fingerprints hash (doc id,
    state, reason, output) and no model is asked, so integrating again would give this record; an
    unchanged nightly then reads one object instead of walking every result. None otherwise."""
    if any(delta.counts().values()) or not state["run_id"] or not state["docs"]:
        return None
    prior = store.get_json_or_none(f"runs/{safe_segment(state['run_id'])}/integration.json")
    if (
        not isinstance(prior, dict)
        or prior.get("version") != RECORD_VERSION
        or prior.get("status") != "complete"
        or prior.get("problems")
        or prior.get("mode") != mode
        or prior.get("state_key") != state_key(state["scope"])
        or prior.get("doc_ids") != sorted(state["docs"])
        or prior.get("output") != state["sections"]
        or not isinstance(prior.get("checks"), dict)
    ):
        return None
    checks: IntegrationChecks = prior["checks"]
    record: IntegrationResult = {
        **prior,  # type: ignore[typeddict-item]
        "run_id": run_id,
        "delta": delta.counts(),
        "calls": 0,
        "truncated": 0,
        "checks": {**checks, "flags": []},  # flags are what this run's answers raised: none
    }
    return record


def integrate(
    outcomes: list[dict[str, Any]],
    *,
    recipe: Recipe,
    run_id: str,
    store: ObjectStore,
    client: ModelClient,
    settings: Settings,
    source: str | None = None,
    mode: str | None = None,
) -> IntegrationResult:
    """Integrate the current per-file results of `source` (merging into its stored state unless
    `mode` is full; without a source nothing is stored) and return the record it writes to
    runs/<run_id>/integration.json."""
    mode = mode or settings.integration.mode
    if mode == "skip":
        skipped = _skipped(run_id, recipe, outcomes)
        store.put_json(f"runs/{run_id}/integration.json", skipped)
        return skipped
    scope = scope_of(source, recipe, settings) if source else None
    state = load_state(store, scope) if scope and mode == "incremental" else empty_state(scope or {})
    prior = state["sections"]
    fps, refs = fingerprints(outcomes, state)
    delta = apply_delta(state, fps)
    refs_moved = record_refs(state, refs)
    again = unchanged_record(store, state, delta, mode, run_id) if scope else None
    if again is not None:  # the state still names the run whose record this is
        if refs_moved:  # the next unchanged run takes these fingerprints without encoding outputs
            save_state(store, state)
        store.put_json(f"runs/{run_id}/integration.json", again)
        log.info("integration unchanged: no result moved since run %s", state["run_id"])
        return again
    by_id = {o["doc_id"]: o for o in outcomes}
    readable = [d for d in delta.needs_notes if by_id[d].get("output") and by_id[d].get("state") in READABLE]
    mark_without_notes(state, sorted(set(delta.needs_notes) - set(readable)))
    built, first = _facts(recipe, outcomes)
    notes = Notes(recipe, run_id, store, client, settings, known=set(fps), summary="")
    asked = _ask_delta(notes, state, compact_records(by_id[d] for d in readable), built, prior, len(fps))
    output = _assemble(recipe, set(fps), state, built, first)
    problems = list(asked.problems)
    try:
        output = recipe.integration_schema.model_validate(output).model_dump(mode="json")
    except ValidationError as e:
        problems.append(
            {
                "doc_ids": [],
                "problem": "integration output does not match the schema",
                "errors": [str(x["msg"]) for x in e.errors()[:5]],
            }
        )
    record: IntegrationResult = {
        "run_id": run_id,
        "recipe": recipe.name,
        "mode": mode,
        "status": "failed" if len(problems) > len(asked.problems) else _status(asked, len(readable)),
        "problems": problems,
        "documents": len(outcomes),
        "doc_ids": sorted(fps),
        "delta": delta.counts(),
        "calls": asked.calls,
        "truncated": asked.truncated,
        "state_key": None,
        "output": output,
        "checks": _checks(recipe, outcomes, output, asked),
        "version": RECORD_VERSION,
    }
    if scope:
        state["sections"], state["run_id"] = output, run_id
        record["state_key"] = save_state(store, state)
    store.put_json(f"runs/{run_id}/integration.json", record)
    log.info(
        "integration %s: %d calls, delta %s",
        record["status"],
        asked.calls,
        delta.counts(),
        extra={"phase": "integration"},
    )
    return record

"""Human review decisions applied to results (`docmill review accept|correct|reject`). The
decisions are stored append-only by `checkpoints.decisions`; this module turns them into what
readers use: corrected outputs checked against the recipe's schema, outcomes as exports and reports
show them, and the reviewed values as `eval` labels."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypedDict, TypeGuard

from pydantic import BaseModel, TypeAdapter, ValidationError

from checkpoints.decisions import Action, Decision
from docmill.errors import InputError
from tasks.provenance import field_value

if TYPE_CHECKING:
    from tasks.recipes import Recipe


class ReviewMark(TypedDict):
    """The decision in force on a document, as exports and reports carry it."""

    action: str
    by: str
    at: str  # ISO 8601, UTC (`2026-12-01T04:20:35Z`)
    note: str | None
    seq: int
    corrections: dict[str, dict[str, Any]]  # field -> {"from": model's value, "to": reviewer's}


def timestamp(at: float) -> str:
    """Unix seconds as an ISO 8601 UTC timestamp to the second, as exports and `review show` print it."""
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """`field=value` strings -> {field: value}; a value is JSON when it parses, else text."""
    values: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise InputError(f"--set {item!r} is not field=value", hint="e.g. --set total=1234.50")
        try:
            values[name] = json.loads(text)
        except ValueError:
            values[name] = text
    return values


def _is_value_node(node: Any) -> TypeGuard[dict[str, Any]]:
    return isinstance(node, dict) and "value" in node


def with_values(output: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """`output` with `values` set (no checks: decisions were checked when recorded)."""
    new = dict(output)
    for name, value in values.items():
        old = output.get(name)
        new[name] = {**old, "value": value, "evidence": None} if _is_value_node(old) else value
    return new


def corrected_output(recipe: Recipe | None, output: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """`output` with `values` applied to its top-level fields, each validated by its schema type (a
    `{value, evidence}` field takes the new value; its evidence becomes null, since the model's
    excerpt no longer supports it)."""
    fields = set(getattr(recipe.file_schema, "model_fields", {})) if recipe else set(output)
    unknown = sorted(set(values) - fields)
    if unknown:
        raise InputError(
            f"no field {', '.join(map(repr, unknown))} in this recipe's results",
            hint=f"fields: {', '.join(sorted(fields))}",
        )
    new = with_values(output, values)
    if recipe is not None:  # each corrected field against its type (the rest may be a partial answer)
        for name in values:
            annotation: Any = recipe.file_schema.model_fields[name].annotation
            is_node = isinstance(annotation, type) and issubclass(annotation, BaseModel)
            if is_node and "value" in annotation.model_fields and not _is_value_node(new[name]):
                new[name] = {"value": new[name], "evidence": None}  # a field the answer lacked
            try:
                TypeAdapter(annotation).validate_python(new[name])
            except ValidationError as e:
                first = e.errors()[0]
                where = ".".join(str(p) for p in (name, *first.get("loc", ())))
                raise InputError(
                    f"the corrected value does not fit the schema: {where}: {first.get('msg')}",
                    hint="give the value in the field's type (numbers plain, dates YYYY-MM-DD, null for none)",
                ) from e
    return new


def apply_decisions(outcomes: list[dict[str, Any]], decisions: dict[str, Decision]) -> list[dict[str, Any]]:
    """Outcomes with the decision in force applied (`decided`: the model's own output kept under
    `original_output` whenever a decision changed it); others unchanged."""
    if not decisions:
        return outcomes
    return [
        o if (d := decisions.get(o["doc_id"])) is None else decided(o, d, o.get("output")) for o in outcomes
    ]


def decided(view: dict[str, Any], d: Decision, original: dict[str, Any] | None) -> dict[str, Any]:
    """An outcome or review item with decision `d` in force: `d` under `review` (its corrections
    from `original`, the model's output), and when `d` changed values, the output in force under
    `output` with the one before it under `original_output`."""
    mark: ReviewMark = {
        "action": d.action.value,
        "by": d.by,
        "at": timestamp(d.at),
        "note": d.note,
        "seq": d.seq,
        "corrections": {
            k: {"from": field_value((original or {}).get(k)), "to": v} for k, v in d.values.items()
        },
    }
    view = {**view, "review": mark}
    if d.values:
        view["original_output"] = view.get("output")
        view["output"] = with_values(view.get("output") or {}, d.values)
    return view


def labels_from_decisions(
    outcomes: list[dict[str, Any]], decisions: dict[str, Decision]
) -> dict[str, dict[str, Any]]:
    """doc id -> labelled fields (the `eval` labels format) from the decisions in force: every
    top-level field of accepted and corrected documents, only the values the reviewer gave of
    rejected ones."""
    by_doc = {o["doc_id"]: o for o in outcomes}
    labels: dict[str, dict[str, Any]] = {}
    for doc_id, d in sorted(decisions.items()):
        output = (by_doc.get(doc_id) or {}).get("output") or {}
        if d.action is Action.REJECT:
            fields = dict(d.values)
        else:
            fields = {
                k: field_value(v) for k, v in output.items() if not isinstance(field_value(v), dict | list)
            }
            fields.update(d.values)
        if fields:
            labels[doc_id] = fields
    return labels


def label_records(outcomes: list[dict[str, Any]], decisions: dict[str, Decision]) -> list[dict[str, Any]]:
    """`review export --labels`: one labels-file record per decided document, with who and when."""
    labels = labels_from_decisions(outcomes, decisions)
    return [
        {
            "record": "document",
            "doc_id": doc_id,
            "fields": fields,
            "source": "review",
            "decision": decisions[doc_id].action.value,
            "by": decisions[doc_id].by,
            "at": timestamp(decisions[doc_id].at),
            "note": decisions[doc_id].note,
        }
        for doc_id, fields in labels.items()
    ]


def review_view(
    run_id: str,
    doc_id: str,
    item: dict[str, Any] | None,
    outcome: dict[str, Any] | None,
    history: list[Decision],
) -> dict[str, Any] | None:
    """What `docmill review show RUN DOC` prints: the review-queue item (if the document is queued),
    its outcome's state, every decision on it (oldest first, timestamps in ISO 8601) and, when a
    decision changed values, the output in force with the model's own beside it. A document that
    is neither queued nor decided shows its outcome (a reviewer may check any document); None when
    the run has no such document."""
    if item is None and not history and outcome is None:
        return None
    view: dict[str, Any] = dict(item) if item is not None else {"doc_id": doc_id, "run_id": run_id}
    if outcome is not None:
        view.setdefault("state", outcome.get("state"))
        view.setdefault("output", outcome.get("output"))
    view["decisions"] = [
        {**d.model_dump(mode="json", exclude={"run_id", "doc_id"}), "at": timestamp(d.at)} for d in history
    ]
    return decided(view, history[-1], (outcome or {}).get("output")) if history else view

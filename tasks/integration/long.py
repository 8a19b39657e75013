"""Integration over more per-file results than one window holds: one long `ConversationTask`.

The results are fed in slices (compact JSON, one object per document, with doc ids) as user
turns. Code, not the model, keeps the exact facts — every doc id seen, every conflict (same
value of the recipe's first key field, different values of another field, each value with its
doc ids), duplicates, entities (same vendor across documents), coverage gaps — as pinned facts
re-sent on every call and as structured state merged into the final answer. The task compacts
whenever the next request would exceed the budget. The final turn asks for the recipe's
integration schema; the answer is merged with the code's facts, so nothing pinned can be lost,
and validated against the schema.

Resume: slices are a pure function of the input order and the budget; a resumed task replays the
slices it already sent into the fact tracker (no API calls) and continues at `task.exchanges`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from docmill.errors import ContextError
from docmill.sdk import anthropic
from tasks.api.answers import message_text
from tasks.conversation.pinned import PinnedFacts, compress_ids
from tasks.conversation.task import ConversationTask
from tasks.integration.records import compact_value, evidence_of, results_block
from tasks.recipes.thinking import effort_config

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore
    from docmill.settings import Settings
    from tasks.recipes import Recipe

PASS = "integration_long"
TASK_ID = "integration"
SLICE_FRACTION = 0.2
STEP_MAX_TOKENS = 512
ID_CHAR_FRACTION = 0.15

RULES = (
    "\n\nYou receive the per-file results in several slices over one conversation; earlier slices may "
    "have been summarized. The <pinned_facts> block is maintained by the pipeline and is exact: rely on "
    "it for document ids, duplicates, conflicts and entities. After each slice, reply briefly with the "
    "new cross-document observations only, one per line, each starting with 'FACT:' and citing doc ids."
)
FINAL_ASK = (
    "All slices are in. Produce the final integration now as JSON matching the schema. Use the pinned "
    "facts for entities, duplicates and conflicts; cite only doc ids that appear in the results."
)


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
    """Exact cross-document facts, updated record by record; renders them as pinned facts."""

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

    @staticmethod
    def compact(result: dict[str, Any]) -> dict[str, Any]:
        if "output" in result:
            out = result.get("output") or {}
            record = {"doc_id": result["doc_id"], "state": result.get("state", "succeeded")}
            record.update(compact_value(out) if isinstance(out, dict) else {})
            if result.get("state") not in (None, "succeeded"):
                record["reason"] = result.get("reason") or result.get("failure_type")
            return record
        return dict(result)

    def add(self, result: dict[str, Any]) -> dict[str, Any]:
        """Take one per-file result; returns its compact record."""
        record = self.compact(result)
        doc_id = str(record["doc_id"])
        if doc_id in self._seen:
            return record
        self._seen.add(doc_id)
        self.doc_ids.append(doc_id)
        state = record.get("state", "succeeded")
        if state != "succeeded":
            self.gaps.append(
                {"doc_id": doc_id, "field": None, "reason": f"{state}: {record.get('reason') or state}"}
            )
        self.filled.update(k for k, v in record.items() if v not in (None, "", []))
        output = result.get("output") if isinstance(result.get("output"), dict) else {}
        if self.entity_field and _scalar(record.get(self.entity_field)):
            self.entities[str(record[self.entity_field])].append(doc_id)
        key = record.get(self.key_field) if self.key_field else None
        if _scalar(key):
            key = str(key)
            self.key_docs[key].append(doc_id)
            for field, value in record.items():
                if field in ("doc_id", "state", "reason", self.key_field) or not _scalar(value):
                    continue
                ev = evidence_of(output, field) if output else None
                self.groups[key][field].setdefault(_text(value), []).append((doc_id, ev))
        return record

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

    def pin(self, pinned: PinnedFacts, *, max_id_chars: int) -> None:
        """Write the current facts into `pinned` (replacing earlier versions of each fact)."""
        runs = ", ".join(compress_ids(self.doc_ids))
        if len(runs) <= max_id_chars:
            pinned.set("docs", f"DOCUMENTS SEEN ({len(self.doc_ids)}): {runs}")
        else:
            pinned.set(
                "docs", f"DOCUMENTS SEEN: {len(self.doc_ids)} (too many to list; the pipeline keeps every id)"
            )
        for dup in self.duplicates():
            pinned.set(
                f"dup:{dup['key']}",
                f"DUPLICATE {self.key_field}={dup['key']}: {', '.join(dup['doc_ids'])}",
                terms=[dup["key"]],
            )
        for c in self.conflicts():
            values = " | ".join(f"{v['value']} ({v['doc_id']})" for v in c["values"])
            pinned.set(
                f"conflict:{c['key']}:{c['field']}",
                f"CONFLICT {self.key_field}={c['key']} field={c['field']}: {values}",
                terms=[c["key"]],
            )
        for name in sorted(n for n, ids in self.entities.items() if len(ids) > 1):
            pinned.set(
                f"entity:{name}", f"ENTITY {self.entity_field}={name}: {len(self.entities[name])} documents"
            )
        for gap in self.gaps:
            pinned.set(f"gap:{gap['doc_id']}", f"GAP {gap['doc_id']}: {gap['reason']}", terms=[gap["doc_id"]])


def slices_of(results: Iterable[dict[str, Any]], limit_tokens: int) -> Iterator[list[dict[str, Any]]]:
    """Consecutive slices whose JSON lines total about `limit_tokens` tokens (chars / 4)."""
    part: list[dict[str, Any]] = []
    size = 0
    for result in results:
        n = len(json.dumps(FactTracker.compact(result), ensure_ascii=False)) // 4 + 1
        if part and size + n > limit_tokens:
            yield part
            part, size = [], 0
        part.append(result)
        size += n
    if part:
        yield part


def merge_final(answer: dict[str, Any] | None, tracker: FactTracker, dup_field: str) -> dict[str, Any]:
    """The model's answer with every code-kept fact merged in; unknown doc ids dropped."""
    known = set(tracker.doc_ids)
    answer = answer or {}

    def ids(values: Any) -> list[str]:
        return [i for i in values or [] if isinstance(i, str) and i in known]

    entities: dict[str, list[str]] = {name: list(docs) for name, docs in tracker.entities.items()}
    entity_field = tracker.entity_field or "name"
    for e in answer.get("entities") or []:
        name = str(e.get(entity_field) or "")
        if name:
            entities.setdefault(name, [])
            entities[name] += [i for i in ids(e.get("doc_ids")) if i not in entities[name]]
    conflicts = tracker.conflicts()
    have = {(c["field"], c["key"]) for c in conflicts}
    for c in answer.get("conflicts") or []:
        values = [v for v in c.get("values") or [] if v.get("doc_id") in known]
        if (c.get("field"), c.get("key")) not in have and len(values) > 1:
            conflicts.append({**c, "values": values})
    duplicates = [{dup_field: d["key"], "doc_ids": d["doc_ids"]} for d in tracker.duplicates()]
    have_dup = {d[dup_field] for d in duplicates}
    duplicates += [
        {**d, "doc_ids": ids(d.get("doc_ids"))}
        for d in answer.get("duplicates") or []
        if d.get(dup_field) not in have_dup and len(ids(d.get("doc_ids"))) > 1
    ]
    gaps = list(tracker.gaps)
    gap_keys = {(g["doc_id"], g["field"]) for g in gaps}
    gaps += [
        g
        for g in answer.get("coverage_gaps") or []
        if (g.get("doc_id"), g.get("field")) not in gap_keys
        and (g.get("doc_id") is None or g.get("doc_id") in known)
    ]
    claims = [
        {**c, "doc_ids": ids(c.get("doc_ids"))} for c in answer.get("claims") or [] if ids(c.get("doc_ids"))
    ]
    findings = [tracker.headline()]
    findings += [f for f in answer.get("key_findings") or [] if isinstance(f, str) and f not in findings]
    return {
        "key_findings": findings,
        "entities": [{entity_field: n, "doc_ids": d} for n, d in sorted(entities.items())],
        "duplicates": duplicates,
        "conflicts": conflicts,
        "coverage_gaps": gaps,
        "claims": claims,
    }


def _final_output(
    task: ConversationTask,
    recipe: Recipe,
    tracker: FactTracker,
    settings: Settings,
    budget: int,
    *,
    answered: bool,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Ask for the final structured answer (unless a crash came after it was `answered`), merge it
    with the facts code kept exact, and validate against the integration schema."""
    if answered:
        final = task.messages[-1]
    else:
        reply = task.send(
            FINAL_ASK,
            max_tokens=min(settings.api.max_tokens, budget // 3),
            output_config={
                "format": {
                    "type": "json_schema",
                    "schema": anthropic.transform_schema(recipe.integration_schema),
                },
                **effort_config(settings.api.integration_model, recipe.thinking),
            },
        )
        final = {"content": reply.get("content") or []}
    text = message_text(final)
    flags: list[dict[str, Any]] = []
    try:
        answer = json.loads(text) if text else None
    except ValueError as e:
        answer = None
        flags = [{"problem": "final answer was not JSON; facts kept by code only", "error": str(e)[:200]}]
    dup_field = item_field(recipe.integration_schema, "duplicates") or "key"
    merged = merge_final(answer if isinstance(answer, dict) else None, tracker, dup_field)
    try:
        return recipe.integration_schema.model_validate(merged).model_dump(mode="json"), flags
    except ValidationError as e:
        raise ContextError(
            f"merged integration output does not match {recipe.integration_schema.__name__}: {e.errors()[:3]}",
            hint="the recipe's integration schema must have entities/duplicates/conflicts/coverage_gaps lists",
        ) from e


def integrate_many(
    results: Iterable[dict[str, Any]],
    *,
    recipe: Recipe,
    run_id: str,
    store: ObjectStore,
    client: Any,
    settings: Settings,
    budget_tokens: int | None = None,
) -> dict[str, Any]:
    """Integrate any number of per-file results inside `budget_tokens`; returns the integration record."""
    budget = budget_tokens or settings.context.budget_tokens
    tracker = FactTracker(tuple(recipe.key_fields), item_field(recipe.integration_schema, "entities"))
    task = ConversationTask(
        TASK_ID,
        run_id,
        store,
        client,
        model=settings.api.integration_model,
        system=recipe.integration_prompt + RULES,
        budget_tokens=budget,
        pinned=PinnedFacts(),
        max_tokens=STEP_MAX_TOKENS,
        pass_name=PASS,
    )
    max_id_chars = int(budget * 4 * ID_CHAR_FRACTION)
    n_slices = 0
    for index, part in enumerate(slices_of(results, int(budget * SLICE_FRACTION))):
        records = [tracker.add(r) for r in part]
        tracker.pin(task.pinned, max_id_chars=max_id_chars)
        n_slices = index + 1
        if index < task.exchanges:
            continue  # sent before a crash: replayed into the tracker only
        task.send(results_block(records, f' slice="{index + 1}"'))
    output, flags = _final_output(task, recipe, tracker, settings, budget, answered=task.exchanges > n_slices)
    record = {
        "run_id": run_id,
        "recipe": recipe.name,
        "documents": len(tracker.doc_ids),
        "doc_ids": list(tracker.doc_ids),
        "output": output,
        "checks": {
            "conflicts": tracker.conflicts(),
            "coverage_gaps": tracker.field_gaps(getattr(recipe.file_schema, "model_fields", {})),
            "flags": flags,
        },
        "context": {
            "exchanges": task.exchanges,
            "compactions": len(task.compactions),
            "strategies": [c["strategy"] for c in task.compactions],
            "budget_tokens": budget,
        },
    }
    store.put_json(f"runs/{run_id}/tasks/{TASK_ID}/output.json", record)
    return record

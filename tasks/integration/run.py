"""The cross-document integration pass.

Input: the gated per-file results (compact JSON with doc ids, a key-findings summary on top,
explicit sections), never the raw documents. Output: the recipe's integration schema, plus
checks that code makes itself and never leaves to the model:

- every doc id the model cites must exist; unknown citations are repaired once by re-asking,
  then removed and listed under `checks.unknown_citations`;
- conflicts: documents that share a key field value (e.g. an invoice number) but disagree on
  another field, with every value and its source document and evidence;
- coverage gaps: documents that failed or need review, and schema fields no document filled.

Inputs too large for one request are integrated in slices and merged (chunk-and-merge);
`tasks.integration.long` keeps a single long conversation inside a token budget instead.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from docmill.logs import get_logger

log = get_logger("integrate")

PASS = "integration"
ID_KEYS = ("doc_id", "doc_ids", "source_doc_id", "source_doc_ids", "sources", "source", "documents")
SLICE_CHARS = 120_000


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


def find_conflicts(outcomes: list[dict[str, Any]], key_fields: tuple[str, ...]) -> list[dict[str, Any]]:
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
    conflicts = []
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
            if compact_value(v) not in (None, "", []):
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


def slices(records: list[dict[str, Any]], limit: int = SLICE_CHARS) -> list[list[dict[str, Any]]]:
    out: list[list[dict[str, Any]]] = [[]]
    size = 0
    for r in records:
        n = len(json.dumps(r, ensure_ascii=False))
        if out[-1] and size + n > limit:
            out.append([])
            size = 0
        out[-1].append(r)
        size += n
    return out


def merge_outputs(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge slice outputs: lists concatenate without duplicates, scalars keep the first."""
    merged: dict[str, Any] = {}
    for part in parts:
        for k, v in part.items():
            if isinstance(v, list):
                seen = {json.dumps(x, sort_keys=True) for x in merged.get(k, [])}
                merged.setdefault(k, [])
                merged[k].extend(x for x in v if json.dumps(x, sort_keys=True) not in seen)
            else:
                merged.setdefault(k, v)
    return merged


def integration_request(
    recipe: Any, records: list[dict[str, Any]], *, model: str, max_tokens: int
) -> dict[str, Any]:
    """Messages params: static prompt first (cached), then the per-file results as labelled data."""
    from anthropic import transform_schema

    states: dict[str, int] = defaultdict(int)
    for r in records:
        states[r.get("state", "?")] += 1
    shared: dict[str, set[str]] = defaultdict(set)
    for kf in recipe.key_fields:
        for r in records:
            if isinstance(r.get(kf), (str, int, float)):
                shared[f"{kf}={r[kf]}"].add(r["doc_id"])
    repeated = sorted(k for k, ids in shared.items() if len(ids) > 1)[:50]
    findings = [
        f"- {len(records)} per-file results ({', '.join(f'{k}: {v}' for k, v in sorted(states.items()))})"
    ]
    if repeated:
        findings.append("- values shared by several documents: " + "; ".join(repeated))
    body = "\n".join(json.dumps(r, ensure_ascii=False, sort_keys=True) for r in records)
    text = (
        "<per_file_results>\n## Key findings\n"
        + "\n".join(findings)
        + "\n\n## Results (one JSON object per document)\n"
        + body.replace("</per_file_results", "<\\/per_file_results")
        + "\n</per_file_results>"
    )
    return {
        "model": model,
        "max_tokens": max_tokens,
        "system": [
            {"type": "text", "text": recipe.integration_prompt, "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": text},
                    {
                        "type": "text",
                        "text": "Integrate the per-file results above. Cite only doc ids that appear in them. "
                        "Report every conflict with each value and its source doc id.",
                    },
                ],
            }
        ],
        "output_config": {
            "format": {"type": "json_schema", "schema": transform_schema(recipe.integration_schema)}
        },
    }


def _ask(client: Any, request: dict[str, Any], *, key: str, responses: Any, attempt: int) -> tuple[dict, Any]:
    result = client.call(
        request,
        key=key,
        doc_id="*integration*",
        pass_name=PASS,
        on_response=lambda n, msg: responses.put(PASS, key, attempt + n, msg),
        purpose="repair" if attempt else "first",
    )
    return result.message, result


def _text_of(message: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in message.get("content", []) if b.get("type") == "text")


def _long_task(recipe: Any, records: list[dict[str, Any]], settings: Any) -> bool | None:
    """True when the results do not fit one request's budget and the recipe's integration schema
    has the sections the long task keeps exact (conflicts, entities, ...); None otherwise."""
    fields = set(getattr(recipe.integration_schema, "model_fields", {}))
    if not {"conflicts", "entities", "duplicates", "coverage_gaps"} <= fields:
        return None
    tokens = sum(len(json.dumps(r, ensure_ascii=False)) for r in records) // 4
    return True if tokens > settings.context.budget_tokens // 2 else None


def integrate(
    outcomes: list[dict[str, Any]],
    *,
    recipe: Any,
    run_id: str,
    store: Any,
    client: Any,
    settings: Any,
) -> dict[str, Any]:
    """Run the integration pass once per distinct input (ledger-keyed) and return the record."""
    from pydantic import ValidationError

    from checkpoints.costs import CostEntry, CostLedger
    from checkpoints.keys import content_hash, idempotency_key
    from checkpoints.ledger import ResponseLog, ResultsLedger

    ledger, responses, costs = ResultsLedger(store), ResponseLog(store), CostLedger(store, run_id)
    records = compact_records(outcomes)
    known = {o["doc_id"] for o in outcomes}
    model = settings.api.integration_model
    max_tokens = settings.api.max_tokens
    parts: list[dict[str, Any]] = []
    flags: list[dict[str, Any]] = []
    long = _long_task(recipe, records, settings)
    if long is not None:
        key = idempotency_key(
            PASS, recipe.version, recipe.prompt_hash(), recipe.schema_hash(), model,
            content_hash(records), {"long": True, "budget": settings.context.budget_tokens},
        )  # fmt: skip
        cached = ledger.get(PASS, key)
        if cached is None:
            from tasks.integration.long import integrate_many

            record = integrate_many(records, recipe=recipe, run_id=run_id, store=store, client=client,
                                    settings=settings)  # fmt: skip
            cached, _ = ledger.put(PASS, key, {"key": key, "pass_name": PASS, "output": record["output"],
                                               "model": model, "context": record.get("context"),
                                               "flags": record["checks"].get("flags", [])})  # fmt: skip
        parts.append(cached["output"])
        flags.extend(cached.get("flags") or [])
    for i, part in enumerate(slices(records) if records and long is None else []):
        request = integration_request(recipe, part, model=model, max_tokens=max_tokens)
        key = idempotency_key(
            PASS,
            recipe.version,
            recipe.prompt_hash(),
            recipe.schema_hash(),
            model,
            content_hash(part),
            {"max_tokens": max_tokens},
        )
        cached = ledger.get(PASS, key)
        if cached is not None:
            parts.append(cached["output"])
            continue
        attempt, errors = 0, []
        output: dict[str, Any] | None = None
        while attempt < 1 + settings.gate.repair_attempts:
            message, result = _ask(client, request, key=key, responses=responses, attempt=attempt)
            costs.record(
                f"{key}-{attempt}",
                [
                    CostEntry.from_usage(
                        run_id=run_id,
                        pass_name=PASS,
                        doc_id=f"*integration-{i}*",
                        key=key,
                        attempt=attempt,
                        model=result.model,
                        request_id=result.request_id,
                        usage=message.get("usage") or {},
                        batch=False,
                    )
                ],
            )
            attempt += 1
            text = _text_of(message)
            try:
                output = recipe.integration_schema.model_validate_json(text).model_dump(mode="json")
                errors = [f"{p}: unknown doc id {d!r}" for p, d in cited_ids(output) if d not in known]
            except ValidationError as e:
                output, errors = (
                    None,
                    [f"{'.'.join(map(str, er['loc']))}: {er['msg']}" for er in e.errors()[:20]],
                )
            if not errors:
                break
            request = {
                **request,
                "messages": [
                    *request["messages"],
                    {"role": "assistant", "content": text or "{}"},
                    {
                        "role": "user",
                        "content": "Your answer had problems:\n- "
                        + "\n- ".join(errors)
                        + "\nReturn the corrected JSON only; cite only doc ids present in the results.",
                    },
                ],
            }
        if output is None:
            flags.append(
                {"slice": i, "problem": "integration output invalid after repairs", "errors": errors}
            )
            continue
        unknown = sorted({d for _, d in cited_ids(output) if d not in known})
        if unknown:
            flags.append({"slice": i, "problem": "unknown doc ids removed", "doc_ids": unknown})
            output = drop_unknown(output, known)
        ledger.put(PASS, key, {"key": key, "pass_name": PASS, "output": output, "model": model})
        parts.append(output)
    schema_fields = list(getattr(recipe.file_schema, "model_fields", {}))
    result = {
        "run_id": run_id,
        "recipe": recipe.name,
        "documents": len(outcomes),
        "output": merge_outputs(parts),
        "checks": {
            "conflicts": find_conflicts(outcomes, tuple(recipe.key_fields)),
            "coverage_gaps": coverage_gaps(outcomes, schema_fields),
            "flags": flags,
        },
    }
    store.put_json(f"runs/{run_id}/integration.json", result)
    log.info("integration done", extra={"phase": "integration"})
    return result

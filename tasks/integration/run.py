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
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from anthropic import transform_schema
from pydantic import ValidationError

from checkpoints.costs import CostEntry, CostLedger
from checkpoints.keys import content_hash, idempotency_key
from checkpoints.ledger import ResponseLog, ResultsLedger
from docmill.logs import get_logger
from tasks.integration.checks import cited_ids, coverage_gaps, drop_unknown, find_conflicts
from tasks.integration.long import integrate_many
from tasks.integration.records import PASS, compact_records, merge_outputs, slices
from tasks.records import IntegrationResult

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore
    from docmill.settings import Settings
    from tasks.api.client import CallResult, ModelClient
    from tasks.recipes import Recipe

log = get_logger("integrate")


def integration_request(
    recipe: Recipe, records: list[dict[str, Any]], *, model: str, max_tokens: int
) -> dict[str, Any]:
    """Messages params: static prompt first (cached), then the per-file results as labelled data."""
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


def _ask(
    client: ModelClient, request: dict[str, Any], *, key: str, responses: ResponseLog, attempt: int
) -> tuple[dict[str, Any], CallResult]:
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


def _long_task(recipe: Recipe, records: list[dict[str, Any]], settings: Settings) -> bool | None:
    """True when the results do not fit one request's budget and the recipe's integration schema
    has the sections the long task keeps exact (conflicts, entities, ...); None otherwise."""
    fields = set(getattr(recipe.integration_schema, "model_fields", {}))
    if not {"conflicts", "entities", "duplicates", "coverage_gaps"} <= fields:
        return None
    tokens = sum(len(json.dumps(r, ensure_ascii=False)) for r in records) // 4
    return True if tokens > settings.context.budget_tokens // 2 else None


@dataclass
class _Pass:
    """What every integration call of one run shares."""

    recipe: Recipe
    run_id: str
    store: ObjectStore
    client: ModelClient
    settings: Settings
    known: set[str]
    ledger: ResultsLedger = field(init=False)
    responses: ResponseLog = field(init=False)
    costs: CostLedger = field(init=False)

    def __post_init__(self) -> None:
        self.ledger = ResultsLedger(self.store)
        self.responses = ResponseLog(self.store)
        self.costs = CostLedger(self.store, self.run_id)

    def key(self, content: Any, params: dict[str, Any]) -> str:
        r = self.recipe
        model = self.settings.api.integration_model
        return idempotency_key(
            PASS, r.version, r.prompt_hash(), r.schema_hash(), model, content_hash(content), params
        )


def _integrate_long(p: _Pass, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The whole input as one long conversation (ledger-keyed); returns the ledger record."""
    key = p.key(records, {"long": True, "budget": p.settings.context.budget_tokens})
    cached = p.ledger.get(PASS, key)
    if cached is None:
        record = integrate_many(
            records, recipe=p.recipe, run_id=p.run_id, store=p.store, client=p.client, settings=p.settings
        )
        cached, _ = p.ledger.put(PASS, key, {"key": key, "pass_name": PASS, "output": record["output"],
                                             "model": p.settings.api.integration_model,
                                             "context": record.get("context"),
                                             "flags": record["checks"].get("flags", [])})  # fmt: skip
    return cached


def _repair_turn(request: dict[str, Any], text: str, errors: list[str]) -> dict[str, Any]:
    return {
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


def _validated(p: _Pass, text: str) -> tuple[dict[str, Any] | None, list[str]]:
    """The answer parsed against the integration schema, and its problems (unknown doc ids too)."""
    try:
        output = p.recipe.integration_schema.model_validate_json(text).model_dump(mode="json")
    except ValidationError as e:
        return None, [f"{'.'.join(map(str, er['loc']))}: {er['msg']}" for er in e.errors()[:20]]
    return output, [f"{path}: unknown doc id {d!r}" for path, d in cited_ids(output) if d not in p.known]


def _integrate_slice(
    p: _Pass, i: int, part: list[dict[str, Any]], flags: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """One slice: from the ledger, or asked and repaired up to the gate's repair attempts; returns
    its output (None when it stayed invalid, with a flag)."""
    max_tokens = p.settings.api.max_tokens
    request = integration_request(
        p.recipe, part, model=p.settings.api.integration_model, max_tokens=max_tokens
    )
    key = p.key(part, {"max_tokens": max_tokens})
    cached = p.ledger.get(PASS, key)
    if cached is not None:
        return dict(cached["output"])
    attempt = 0
    errors: list[str] = []
    output: dict[str, Any] | None = None
    while attempt < 1 + p.settings.gate.repair_attempts:
        message, result = _ask(p.client, request, key=key, responses=p.responses, attempt=attempt)
        # one group per API call (request id, else a fresh name): a slice asked again by a resume
        # was billed again, so it is recorded again (a `<key>-<attempt>` group was written once per run)
        call_id = result.request_id or uuid.uuid4().hex[:16]
        p.costs.record(f"{key}-{attempt}-{call_id}", [CostEntry.from_usage(
            run_id=p.run_id, pass_name=PASS, doc_id=f"*integration-{i}*", key=key, attempt=attempt,
            model=result.model, request_id=result.request_id, usage=message.get("usage") or {}, batch=False,
            answered_model=message.get("model"),
        )])  # fmt: skip
        attempt += 1
        text = _text_of(message)
        output, errors = _validated(p, text)
        if not errors:
            break
        request = _repair_turn(request, text, errors)
    if output is None:
        flags.append({"slice": i, "problem": "integration output invalid after repairs", "errors": errors})
        return None
    unknown = sorted({d for _, d in cited_ids(output) if d not in p.known})
    if unknown:
        flags.append({"slice": i, "problem": "unknown doc ids removed", "doc_ids": unknown})
        output = drop_unknown(output, p.known)
    p.ledger.put(PASS, key, {"key": key, "pass_name": PASS, "output": output,
                             "model": p.settings.api.integration_model})  # fmt: skip
    return output


def integrate(
    outcomes: list[dict[str, Any]],
    *,
    recipe: Recipe,
    run_id: str,
    store: ObjectStore,
    client: ModelClient,
    settings: Settings,
) -> IntegrationResult:
    """Run the integration pass once per distinct input (ledger-keyed) and return the record."""
    p = _Pass(recipe, run_id, store, client, settings, known={o["doc_id"] for o in outcomes})
    records = compact_records(outcomes)
    parts: list[dict[str, Any]] = []
    flags: list[dict[str, Any]] = []
    if _long_task(recipe, records, settings):
        cached = _integrate_long(p, records)
        parts.append(cached["output"])
        flags.extend(cached.get("flags") or [])
    else:
        for i, part in enumerate(slices(records) if records else []):
            output = _integrate_slice(p, i, part, flags)
            if output is not None:
                parts.append(output)
    schema_fields = list(getattr(recipe.file_schema, "model_fields", {}))
    result: IntegrationResult = {
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

"""What the model writes in the integration pass, asked slice by slice, in parallel.

The model reads only the per-file results that need notes this run (the delta) in bounded slices
(`integration.slice_records` / `slice_chars`), each with a bounded plain-text digest of the state
already integrated. It writes only the sections code cannot (`facts.model_sections`: key findings
and claims for the invoices recipe), so no single answer has to hold the whole corpus.

Every slice is ledger-keyed (written once; a re-run or a resume pays nothing for it again). An
answer cut at `max_tokens` is never re-asked at the same size: the slice is split in two and each
half asked on its own, down to one document. An answer that fails validation is repaired with its
errors (gate.repair_attempts). Whatever still fails is returned as a problem naming its doc ids;
the caller makes it visible and leaves those documents for the next run.
"""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from checkpoints.costs import CostEntry, CostLedger
from checkpoints.inflight import InFlight, life_of
from checkpoints.keys import content_hash, idempotency_key
from checkpoints.ledger import ResponseLog, ResultsLedger
from docmill.errors import ApiCallError
from docmill.prices import worst_usd
from docmill.sdk import anthropic
from tasks.api.answers import message_text
from tasks.api.usage import estimate_input_tokens
from tasks.integration.checks import cited_ids, drop_unknown
from tasks.integration.facts import model_sections
from tasks.integration.records import PASS, results_block
from tasks.integration.state import SliceNotes
from tasks.recipes.thinking import effort_config
from tasks.request import answered_by, repair_request

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore
    from docmill.settings import Settings
    from tasks.api.client import ModelClient
    from tasks.recipes import Recipe

RULES = (
    "\n\nYou see one slice of the per-file results, and a digest of what is already integrated. "
    "The pipeline computes entities, duplicates, conflicts and coverage gaps itself, exactly; write "
    "only the sections the schema asks for, about the documents in this slice (a few key findings, "
    "one sentence each, and claims that cite doc ids of this slice)."
)


def notes_schema(recipe: Recipe) -> type[BaseModel]:
    """The recipe's integration schema restricted to the sections the model writes."""
    wanted = model_sections(recipe)
    full = recipe.integration_schema
    if wanted == list(full.model_fields):
        return full
    fields: dict[str, Any] = {n: (full.model_fields[n].annotation, full.model_fields[n]) for n in wanted}
    model: type[BaseModel] = create_model(
        f"{full.__name__}Notes", __config__=ConfigDict(extra="forbid"), **fields
    )
    return model


def notes_request(
    recipe: Recipe,
    schema: type[BaseModel],
    records: list[dict[str, Any]],
    summary: str,
    *,
    model: str,
    max_tokens: int,
) -> dict[str, Any]:
    """Static prompt first (cached), then the digest and this slice's results as labelled data."""
    text = f"<integrated_digest>\n{summary}\n</integrated_digest>\n\n{results_block(records)}"
    ask = f"Write {', '.join(schema.model_fields)} for the per-file results above. Cite only their doc ids."
    return {
        "model": model,
        "max_tokens": max_tokens,
        "system": [
            {
                "type": "text",
                "text": recipe.integration_prompt + RULES,
                "cache_control": {"type": "ephemeral"},
            }
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": text}, {"type": "text", "text": ask}]}
        ],
        "output_config": {
            "format": {"type": "json_schema", "schema": anthropic.transform_schema(schema)},
            **effort_config(model, recipe.thinking),  # the recipe's effort: thinking within max_tokens
        },
    }


def plan_slices(
    records: list[dict[str, Any]], max_records: int, max_chars: int
) -> list[list[dict[str, Any]]]:
    """Consecutive slices of at most `max_records` results and about `max_chars` characters."""
    out: list[list[dict[str, Any]]] = []
    size = 0
    for r in records:
        n = len(json.dumps(r, ensure_ascii=False))
        if not out or len(out[-1]) >= max_records or (out[-1] and size + n > max_chars):
            out.append([])
            size = 0
        out[-1].append(r)
        size += n
    return out


@dataclass
class Asked:
    """What the notes of one run came to: answers, problems, and the calls made."""

    answers: list[SliceNotes] = field(default_factory=list)  # as stored in the integration state
    problems: list[dict[str, Any]] = field(default_factory=list)
    flags: list[dict[str, Any]] = field(default_factory=list)  # fixed in code, said in the report
    calls: int = 0
    truncated: int = 0  # answers cut at max_tokens (each split, never re-asked at the same size)

    def add(self, other: Asked) -> None:
        self.answers += other.answers
        self.problems += other.problems
        self.flags += other.flags
        self.calls += other.calls
        self.truncated += other.truncated


@dataclass
class Notes:
    """What every notes call of one run shares."""

    recipe: Recipe
    run_id: str
    store: ObjectStore
    client: ModelClient
    settings: Settings
    known: set[str]
    summary: str
    schema: type[BaseModel] = field(init=False)
    ledger: ResultsLedger = field(init=False)
    responses: ResponseLog = field(init=False)
    costs: CostLedger = field(init=False)

    def __post_init__(self) -> None:
        self.schema = notes_schema(self.recipe)
        self.ledger = ResultsLedger(self.store)
        self.responses = ResponseLog(self.store)
        self.costs = CostLedger(self.store, self.run_id)

    def request(self, records: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        s = self.settings.integration
        request = notes_request(
            self.recipe,
            self.schema,
            records,
            self.summary,
            model=self.settings.api.integration_model,
            max_tokens=s.max_tokens,
        )
        r = self.recipe
        key = idempotency_key(
            PASS,
            r.version,
            r.prompt_hash(),
            r.schema_hash(),
            self.settings.api.integration_model,
            content_hash([records, self.summary, list(self.schema.model_fields)]),
            {"max_tokens": s.max_tokens, **answered_by(self.settings)},
        )
        return key, request

    def send(self, request: dict[str, Any], key: str, attempt: int, slice_no: str) -> dict[str, Any]:
        def persist(n: int, msg: dict[str, Any]) -> None:
            self.responses.put(PASS, key, attempt + n, msg)

        # in flight until its cost entry is written (invariant 13: a kill in between is counted)
        worst = worst_usd(str(request["model"]), estimate_input_tokens(request), int(request["max_tokens"]))
        inflight = InFlight(self.store, self.run_id)
        mark = inflight.open_call(
            f"{key}-{attempt}", life_of(self.client), self.client.concurrency, worst or 0.0
        )
        try:
            result = self.client.call(
                request,
                key=key,
                doc_id="*integration*",
                pass_name=PASS,
                on_response=persist,
                purpose="repair" if attempt else "first",
            )
        except BaseException:
            inflight.close(mark)  # the client recorded a paid attempt that brought no answer
            raise
        message = result.message
        # one group per API call (request id, else a fresh name): a slice a resume asks again is
        # billed again, so it is recorded again
        call_id = result.request_id or uuid.uuid4().hex[:16]
        self.costs.record(
            f"{key}-{attempt}-{call_id}",
            [
                CostEntry.from_usage(
                    run_id=self.run_id,
                    pass_name=PASS,
                    doc_id=f"*integration-{slice_no}*",
                    key=key,
                    attempt=attempt,
                    model=result.model,
                    request_id=result.request_id,
                    usage=message.get("usage") or {},
                    answered_model=message.get("model"),
                )
            ],
        )
        inflight.close(mark)
        return message

    def validated(self, text: str) -> tuple[dict[str, Any] | None, list[str]]:
        try:
            output = self.schema.model_validate_json(text).model_dump(mode="json")
        except ValidationError as e:
            return None, [f"{'.'.join(map(str, er['loc']))}: {er['msg']}" for er in e.errors()[:20]]
        return output, [f"{p}: unknown doc id {d!r}" for p, d in cited_ids(output) if d not in self.known]


def ask_slice(n: Notes, records: list[dict[str, Any]], slice_no: str) -> Asked:
    """One slice: from the ledger, or asked (split in two when the answer is cut, repaired when
    invalid). Never raises for a bad answer or a failed call: those come back as problems."""
    ids = [r["doc_id"] for r in records]
    key, request = n.request(records)
    cached = n.ledger.get(PASS, key)
    if cached is not None:
        return Asked(
            answers=[SliceNotes(doc_ids=ids, key=key, output=dict(cached["output"]), run_id=n.run_id)]
        )
    asked = Asked()
    errors: list[str] = []
    output: dict[str, Any] | None = None
    for attempt in range(1 + n.settings.gate.repair_attempts):
        try:
            message = n.send(request, key, attempt, slice_no)
        except ApiCallError as e:
            asked.problems.append(
                {"doc_ids": ids, "problem": "integration call failed", "error": e.one_line()}
            )
            return asked
        asked.calls += 1
        if message.get("stop_reason") == "max_tokens":
            asked.truncated += 1
            if len(records) > 1:  # never the same question at the same size: halve it
                half = len(records) // 2
                asked.add(ask_slice(n, records[:half], f"{slice_no}a"))
                asked.add(ask_slice(n, records[half:], f"{slice_no}b"))
                return asked
            errors = [f"answer cut at max_tokens={request['max_tokens']} for a single document"]
            break
        text = message_text(message)
        output, errors = n.validated(text)
        if not errors:
            break
        request = repair_request(request, text, errors)
    if output is None:
        asked.problems.append({"doc_ids": ids, "problem": "integration answer invalid", "errors": errors[:5]})
        return asked
    if errors:  # only unknown citations are left: removed, and said so
        output = drop_unknown(output, n.known)
        asked.flags.append({"doc_ids": ids, "problem": "unknown doc ids removed", "errors": errors[:5]})
    n.ledger.put(
        PASS,
        key,
        {"key": key, "pass_name": PASS, "output": output, "model": n.settings.api.integration_model},
    )
    asked.answers.append(SliceNotes(doc_ids=ids, key=key, output=output, run_id=n.run_id))
    return asked


def ask_all(n: Notes, records: list[dict[str, Any]]) -> Asked:
    """Every slice of `records`, `integration.workers` calls in flight at once."""
    s = n.settings.integration
    parts = plan_slices(records, s.slice_records, s.slice_chars)
    total = Asked()
    if not parts:
        return total
    with ThreadPoolExecutor(
        max_workers=min(s.workers, len(parts)), thread_name_prefix="docmill-integ"
    ) as pool:
        for asked in pool.map(lambda ip: ask_slice(n, ip[1], str(ip[0])), enumerate(parts)):
            total.add(asked)
    return total

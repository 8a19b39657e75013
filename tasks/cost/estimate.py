"""Cost estimates without calling the model: `docmill estimate` and the batch-mode budget check.

Every number shown is an estimate (`METHOD` says how in one line):
  input tokens  = the exact per-file request's content (tasks.cost.sizing.content_tokens; PDF pages and
                  images as the API bills them: tasks.api.media_tokens); a PDF in page ranges: its pages
                  plus one prompt per part, priced realtime in batch mode too (the long path is realtime)
  output tokens = learned from the store's past runs of the recipe on the model (tasks.cost.answer_sizes:
                  first answers by document size per format, thinking and repairs per document), else the
                  prior: an answer modelled on the recipe's schema with one list item per table row of the
                  document (tasks.cost.sizing), plus docmill.models.THINKING_TOKENS_BY_EFFORT at the
                  request's effort when the model thinks adaptively; capped at max_tokens, the worst case
  USD           = tokens x the dated price table on settings.on_day() (docmill.prices, bands by prompt
                  length); batch at the model's multiplier without cache hits (best effort there);
                  realtime writes the system prompt to the cache once (1.25x) and reads it after (0.1x),
                  when it reaches the model's minimum cacheable length (settings.api.cache_min_tokens)
The integration pass (realtime, integration model) is estimated from its own requests
(`IntegrationEstimate`): slices of at most `integration.read_records` results read in full, a
code-built digest where the pass sends one, NOTE_TOKENS_PER_RESULT tokens written per result read,
or what the store's past passes read and wrote. Full: every document is new; incremental: only new
or changed documents are read, and an unchanged source costs nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from checkpoints.store import open_store
from docmill.models import min_cacheable_tokens, thinking_tokens
from docmill.prices import Price, override_lines, price_on, worst_usd
from tasks.cost.answer_sizes import AnswerSizes, document_tokens, format_key, learn
from tasks.cost.sizing import answer_chars, content_tokens, table_rows
from tasks.integration.digest import state_digest
from tasks.integration.facts import code_built
from tasks.integration.notes import notes_request, notes_schema
from tasks.recipes import load_recipe
from tasks.recipes.thinking import effort_config
from tasks.request import (
    Payload,
    file_request,
    load_payload,
    media_tokens,
    needs_parts,
    page_parts,
    recipe_parts,
    send_as,
)
from tasks.source.inventory import inventory

if TYPE_CHECKING:
    from docmill.settings import Settings
    from tasks.recipes import Recipe
    from tasks.source.inventory import Document

METHOD = (
    "an estimate, no model call: input = request content characters / 4 (PDF pages and images as the "
    "API bills them), output = answer sizes learned from the store's past runs of the recipe, else a "
    "typical answer to the recipe's schema with one list item per table row, "
    "plus the thinking the recipe's effort allows (worst case: max_tokens), priced with the docmill "
    "price table on the run's day; realtime reads the system prompt "
    "from the cache after the first request when it reaches the model's minimum cacheable length, batch = 50 % without cache hits; repairs as learned (none by the prior)"
)


NOTE_TOKENS_PER_RESULT = 55


@dataclass
class IntegrationEstimate:
    """The integration pass over `documents` new documents (full: all of them)."""

    model: str
    prompt_tokens: int  # one call's request without results: prompt, schema, the empty-state digest
    result_tokens: int  # one compact result as the model reads it
    read_records: int  # results read in full at most (the rest are summarised by the delta digest)
    slice_records: int
    max_tokens: int
    slice_chars: int = 24_000  # characters of results per call at most
    digest_tokens: int = 750  # a code-built digest at most (integration.digest_chars / 4)
    thinking_tokens: int = 0  # per call (the model's default effort when it thinks adaptively)
    note_tokens: float = NOTE_TOKENS_PER_RESULT  # text written per result read (learned, else the prior)

    def calls(self, documents: int) -> int:
        """Calls of a pass reading min(documents, read_records) results: slices of at most
        slice_records results and about slice_chars characters (tasks.integration.notes.plan_slices)."""
        read = min(documents, self.read_records)
        if not read:
            return 0
        per_slice = max(1, min(self.slice_records, self.slice_chars // max(1, 4 * self.result_tokens)))
        return math.ceil(read / per_slice)

    def input_tokens(self, documents: int, *, incremental: bool = False) -> int:
        """The pass's input over `documents` new documents: each call's prompt (with the delta digest
        when the results are more than it reads, the state digest when the store already holds
        integrated results: `incremental`) and the results it reads."""
        read = min(documents, self.read_records)
        digests = (self.digest_tokens if documents > read else 0) + (self.digest_tokens if incremental else 0)
        return self.calls(documents) * (self.prompt_tokens + digests) + read * self.result_tokens

    def usd(self, documents: int, *, worst: bool = False, incremental: bool = False) -> float:
        """Realtime price of integrating `documents` new or changed documents (calls send no thinking
        policy: the model's default effort; 0 without a price); `incremental`: see `input_tokens`."""
        price = price_on(self.model)
        read = min(documents, self.read_records)
        calls = self.calls(documents)
        if price is None or not calls:
            return 0.0
        inp = self.input_tokens(documents, incremental=incremental)
        think = calls * self.thinking_tokens
        out = (
            calls * self.max_tokens
            if worst
            else min(round(read * self.note_tokens) + think, calls * self.max_tokens)
        )
        rates = price.rates_for(inp // calls)
        return (inp * rates.input + out * rates.output) / 1e6

    def lines(self, documents: int, per_file_usd: float) -> list[str]:
        full = self.usd(documents)
        share = f" ({100 * full / per_file_usd:.0f}% of the realtime per-file pass)" if per_file_usd else ""
        one, hundred = self.usd(1, incremental=True), self.usd(100, incremental=True)
        return [
            f"  integration, full: {self.calls(documents)} call(s) reading {min(documents, self.read_records)} of "
            f"{documents} results (code builds entities, duplicates, conflicts, gaps) ~${full:.4f}{share} "
            f"(worst case ${self.usd(documents, worst=True):.4f}), model {self.model}",
            f"  integration, incremental: unchanged source $0; +1 document ~${one:.4f}; +100 documents "
            f"~${hundred:.4f} ({self.calls(100)} call(s))",
        ]


def integration_estimate(
    recipe: Any, settings: Any, typical: int, note_tokens: float | None = None
) -> IntegrationEstimate:
    """`typical`: one per-file answer's text tokens (learned or the prior): a compact result is the
    answer without its evidence (about half) plus its doc id and state (what past runs' bills say
    replaces that: `estimate_docs`); `note_tokens`: the text written per result read (learned from
    past runs; default NOTE_TOKENS_PER_RESULT). One call's own input is the request the pass builds
    (tasks.integration.notes.notes_request) with an empty slice and the digest of an empty store."""
    s, model = settings.integration, settings.api.integration_model
    digest = state_digest({}, 0, s.digest_chars)
    empty = notes_request(recipe, notes_schema(recipe), [], digest, model=model, max_tokens=s.max_tokens)
    return IntegrationEstimate(
        model=model,
        prompt_tokens=content_tokens(empty),
        result_tokens=max(16, typical // 2 + RECORD_TOKENS),
        read_records=s.read_records if code_built(recipe) else 10**9,
        slice_records=s.slice_records,
        max_tokens=s.max_tokens,
        slice_chars=s.slice_chars,
        digest_tokens=s.digest_chars // 4,
        note_tokens=NOTE_TOKENS_PER_RESULT if note_tokens is None else note_tokens,
        thinking_tokens=thinking_tokens(model, None, effort_config(model, recipe.thinking).get("effort")),
    )


RECORD_TOKENS = 12  # a compact result's doc id and state, as JSON


@dataclass
class Estimate:
    model: str
    documents: int = 0
    skipped: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0  # of input_tokens: the system prompt of every request after the first
    prefix_tokens: int = 0  # the static prefix (system prompt) of one request
    cache_min_tokens: int = 0  # the model's minimum cacheable prefix (settings.api.cache_min_tokens)
    typical_output_tokens: int = 0  # thinking included
    thinking_tokens: int = 0  # of typical_output_tokens: adaptive thinking (billed as output)
    effort: str | None = None  # the effort the requests send (None: the model's default)
    repair_input_tokens: int = 0  # of input_tokens: repair attempts, learned from past runs
    learned: AnswerSizes | None = None  # answer sizes learned from the store's past runs (None: the prior)
    max_output_tokens: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    sent_as: dict[str, int] = field(default_factory=dict)  # documents by how they go: text, pdf, image
    integration: IntegrationEstimate | None = None
    # USD summed per request (a prompt-length band prices each request on its own):
    # (realtime, realtime worst, batch, batch worst, thinking's share of realtime)
    _usd: list[float] = field(default_factory=lambda: [0.0] * 5)

    def add(
        self,
        price: Price | None,
        *,
        fresh: int,
        written: int,
        cached: int,
        out: int,
        think: int,
        max_tokens: int,
    ) -> None:
        """One request: `fresh` input, `written` / `cached` prefix tokens, `out` output (with `think`)."""
        if price is None:
            return
        prompt = fresh + written + cached
        r = price.rates_for(prompt)
        realtime = (
            fresh * r.input + written * r.cache_write_5m + cached * r.cache_read + out * r.output
        ) / 1e6
        batch = (prompt * r.input + out * r.output) / 1e6 * price.batch  # no cache hits assumed in batch
        self._usd[0] += realtime
        self._usd[1] += worst_usd(self.model, prompt, max_tokens) or 0.0
        self._usd[2] += batch
        self._usd[3] += worst_usd(self.model, prompt, max_tokens, batch=True) or 0.0
        self._usd[4] += think * r.output / 1e6

    def add_realtime(self, price: Price | None, *, inp: int, out: int, max_tokens: int, calls: int) -> None:
        """Requests that go realtime in either mode (a PDF in page ranges: the long path)."""
        if price is None:
            return
        r = price.rates_for(inp // max(1, calls))
        usd = (inp * r.input + out * r.output) / 1e6
        worst = calls * (worst_usd(self.model, inp // max(1, calls), max_tokens) or 0.0)
        for i, v in enumerate((usd, worst, usd, worst)):
            self._usd[i] += v

    @property
    def measured_answers(self) -> int:
        """Past documents the answer sizes were learned from (0: the prior)."""
        return self.learned.documents if self.learned else 0

    @property
    def text_output_tokens(self) -> int:
        """Output tokens besides thinking: the answers' text."""
        return self.typical_output_tokens - self.thinking_tokens

    def usd(self, *, batch: bool, worst: bool = False) -> float:
        return self._usd[(2 if batch else 0) + (1 if worst else 0)]

    def output_source(self) -> str:
        """Where the output figure comes from: the store's past runs, or the prior."""
        if self.learned is None:
            return (
                "prior: the recipe's schema with every field filled, a list of amounts with one item per "
                "table row of the document (2 items without text), thinking at the recipe's effort "
                "(docmill.models.THINKING_TOKENS_BY_EFFORT); a store with past runs of this recipe "
                "teaches the real sizes"
            )
        fits = ", ".join(f"{k} {v.documents}" for k, v in sorted(self.learned.by_type.items()))
        return (
            f"learned from {self.learned.documents} documents of {self.learned.runs} past run(s) of this recipe "
            f"on {self.model} in the store (answer tokens by document size per format: {fits or 'all formats'}; "
            f"other formats the mean answer; thinking and repairs per format as billed, over all formats "
            f"thinking ~{self.learned.thinking_per_doc:.0f} tokens and repairs "
            f"~{self.learned.overall_per_doc.repair_rate:.2f} repair(s) per document)"
        )

    def lines(self) -> list[str]:
        rows = [
            f"docmill estimate ({METHOD})",
            f"  documents to send: {self.documents} ({self.skipped} skipped by inventory); model {self.model}",
            f"  input tokens ~{self.input_tokens:,}; output tokens ~{self.typical_output_tokens:,} "
            f"(at most {self.max_output_tokens:,})",
            f"  realtime: ~${self.usd(batch=False):.4f} (worst case ${self.usd(batch=False, worst=True):.4f})",
            f"  batch:    ~${self.usd(batch=True):.4f} (worst case ${self.usd(batch=True, worst=True):.4f})",
            f"  output: answers ~{self.text_output_tokens:,} tokens + thinking ~{self.thinking_tokens:,}; "
            + self.output_source(),
        ]
        if self.thinking_tokens:
            rows.append(
                f"  thinking: {self.model} thinks adaptively (effort {self.effort or 'default'}): "
                f"~{self.thinking_tokens:,} of the output tokens, ~${self._usd[4]:.4f} of the realtime cost"
            )
        if price_on(self.model) is None:
            rows.append(
                f"  no price for {self.model}: USD shown as 0; a run under --max-cost-usd refuses it "
                "(declare one with DOCMILL_PRICES or DOCMILL_PRICES_FILE)"
            )
        rows += [f"  {line}" for line in override_lines()]
        if self.prefix_tokens and self.prefix_tokens < self.cache_min_tokens:
            rows.append(
                f"  prompt cache: the static prefix (~{self.prefix_tokens:,} tokens) is below {self.model}'s "
                f"minimum cacheable length ({self.cache_min_tokens:,}); no cache reads assumed"
            )
        if self.by_type:
            rows.append("  by type: " + ", ".join(f"{k}={v}" for k, v in sorted(self.by_type.items())))
        if set(self.sent_as) - {"text"}:
            rows.append(
                "  sent as: "
                + ", ".join(f"{k}={v}" for k, v in sorted(self.sent_as.items()))
                + " (PDF pages and images counted as the API bills them)"
            )
        if self.integration is not None:
            rows += self.integration.lines(self.documents, self.usd(batch=False))
        return rows


def typical_output_tokens(recipe: Recipe, max_tokens: int, rows: int | None = None) -> int:
    """One answer's text tokens by the prior: a typical answer modelled on the recipe's schema
    (tasks.cost.sizing.answer_chars; a list of amounts with one item per table row of the document when its
    text is known, `rows`), at least 64 and at most max_tokens."""
    schema = recipe_parts(recipe).schema
    guess = int(answer_chars(schema, schema.get("$defs") or {}, "", rows=rows) / 4)
    return min(max_tokens, max(64, guess))


def learned_sizes(recipe: Recipe, settings: Settings) -> AnswerSizes | None:
    """What this recipe's answers cost on the configured model in the store's past runs
    (tasks.cost.answer_sizes), or None: no store, too few past documents, or an unreadable store."""
    if "://" not in settings.store and not Path(settings.store).exists():
        return None  # never create a store to estimate
    try:
        store = open_store(settings.store, endpoint_url=settings.s3_endpoint_url)
        return learn(store, recipe.name, settings.api.model, settings.integration.read_records)
    except Exception:  # an estimate never fails on the store: the prior stands in
        return None


def _payload(doc: Document, recipe: Recipe, settings: Settings) -> Payload | None:
    """What a document sends, or None when it would not be sent (skipped, a duplicate, unreadable)."""
    if doc.status != "ok" or doc.duplicate_of:
        return None
    try:
        return load_payload(doc, recipe, settings)
    except Exception:
        return None


def request_of(recipe: Recipe, doc: Document, settings: Settings) -> dict[str, Any] | None:
    """The per-file request of a document, or None when it would not be sent."""
    payload = _payload(doc, recipe, settings)
    if payload is None:
        return None
    return file_request(recipe, doc, payload, model=settings.api.model, max_tokens=settings.api.max_tokens)


def _add_long(est: Estimate, doc: Document, recipe: Recipe, settings: Settings, typical: int) -> None:
    """A PDF in page ranges: its pages' tokens plus one prompt and one answer per part, realtime."""
    parts = len(page_parts(doc, settings))
    prompt = content_tokens(file_request(recipe, doc, "", model=settings.api.model, max_tokens=1))
    inp = media_tokens(doc) + parts * prompt
    max_tokens = int(settings.api.max_tokens)
    est.add_realtime(
        price_on(settings.api.model), inp=inp, out=parts * typical, max_tokens=max_tokens, calls=parts
    )
    est.documents += 1
    est.input_tokens += inp
    est.typical_output_tokens += parts * typical
    est.max_output_tokens += parts * max_tokens
    est.sent_as["pdf"] = est.sent_as.get("pdf", 0) + 1


def estimate_docs(docs: Iterable[Any], recipe: Recipe, settings: Settings) -> Estimate:
    learned = learned_sizes(recipe, settings)
    est = Estimate(
        model=settings.api.model,
        cache_min_tokens=min_cacheable_tokens(settings.api.model, settings.api.cache_min_tokens),
        learned=learned,
    )
    max_tokens = int(settings.api.max_tokens)
    prior = typical_output_tokens(recipe, max_tokens)  # without the document's rows
    price = price_on(settings.api.model)
    for doc in docs:
        if doc.status == "ok" and not doc.duplicate_of and needs_parts(doc, recipe, settings):
            _add_long(est, doc, recipe, settings, learned.overall.predict(0) if learned else prior)
            continue
        payload = _payload(doc, recipe, settings)
        if payload is None:
            est.skipped += 1
            continue
        request = file_request(recipe, doc, payload, model=settings.api.model, max_tokens=max_tokens)
        mode = send_as(doc, recipe).value
        est.sent_as[mode] = est.sent_as.get(mode, 0) + 1
        prefix = max(1, len(json.dumps(request["system"], ensure_ascii=False)) // 4)
        est.prefix_tokens = max(est.prefix_tokens, prefix)
        cacheable = prefix >= est.cache_min_tokens  # below the minimum nothing is cached
        cached = prefix if est.documents and cacheable else 0
        written = prefix if not est.documents and cacheable else 0
        est.cached_tokens += cached
        est.effort = (request.get("output_config") or {}).get("effort")
        inp = content_tokens(request)
        repair = 0
        if learned is not None:
            size = document_tokens(doc.text_chars, doc.image_tokens, mode)
            text, think, repair = learned.expected(format_key(str(doc.doc_type), mode), size, inp)
            text = min(max_tokens, text)
        else:
            rows = table_rows(payload.text) if payload.text.strip() else None
            text = typical_output_tokens(recipe, max_tokens, rows)
            think = thinking_tokens(settings.api.model, request.get("thinking"), est.effort)
        out = min(max_tokens, text + think)
        est.add(
            price,
            fresh=inp - cached - written + repair,
            written=written,
            cached=cached,
            out=out,
            think=min(think, out),
            max_tokens=max_tokens,
        )
        est.documents += 1
        est.input_tokens += inp + repair
        est.repair_input_tokens += repair
        est.typical_output_tokens += out
        est.thinking_tokens += min(think, out)
        est.max_output_tokens += max_tokens
        est.by_type[str(doc.doc_type)] = est.by_type.get(str(doc.doc_type), 0) + 1
    typical = est.text_output_tokens // est.documents if est.documents else prior
    notes = learned.note_tokens_per_result if learned else None
    est.integration = integration_estimate(recipe, settings, typical, notes)
    if learned is not None and learned.integration_calls:
        # what the past passes' results cost to read: their input less the calls' own prompts
        prompts = learned.integration_calls * est.integration.prompt_tokens
        per = (learned.integration_input_tokens - prompts) / max(1, learned.integration_documents)
        est.integration.result_tokens = max(16, round(per))
    return est


def estimate_source(source: str, recipe_name: str, settings: Settings) -> Estimate:
    recipe = load_recipe(recipe_name)
    return estimate_docs(inventory(source, settings, doc_types=recipe.doc_types), recipe, settings)

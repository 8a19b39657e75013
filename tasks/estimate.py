"""Cost estimates without calling the model: `docmill estimate` and the batch-mode budget check.

How a document is estimated (say so wherever a number is shown — it is an estimate):
  input tokens  = characters of the exact per-file request's content / 4 (`content_tokens`);
                  a PDF or image sent as what it is: every page as its text plus an image of the page,
                  an image by its pixels, as the API bills them (tasks.readers.measure); a PDF in page
                  ranges (tasks.per_file.media): its pages' tokens plus one prompt per part, priced
                  realtime in batch mode too (the long path is realtime)
  output tokens = typical: an answer modelled on the recipe's schema (every field with a short value,
                  evidence about a line, two items a list), capped at max_tokens; worst case: max_tokens
  USD           = tokens x the price table (docmill.prices); batch = 50 %. Realtime: the shared
                  system prompt is written to the cache once (1.25x) and read after (0.1x) when it
                  reaches the model's minimum cacheable length (settings.api.cache_min_tokens; below
                  it the API caches nothing, and no cache reads are assumed); batch: no cache hits
                  assumed (they are best effort there).
Repairs are not included (at most settings.gate.repair_attempts per document, typically none).

The integration pass (realtime, integration model) is estimated from the same numbers: code builds
the exact sections, the model reads at most `integration.read_records` results in full per run,
`integration.slice_records` per call; a compact result is about half the typical per-file answer
(no evidence), and the model writes about NOTE_TOKENS_PER_RESULT tokens per result it reads
(measured against the emulator). Full: every document is new. Incremental: only new or changed
documents are read (one bounded call per slice of them); an unchanged source costs nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from checkpoints.inflight import InFlightBound
from docmill.models import min_cacheable_tokens
from docmill.prices import BATCH_DISCOUNT, CACHE_READ, CACHE_WRITE_5M, price_of, price_table
from tasks.api.usage import estimate_input_tokens
from tasks.per_file.media import SendAs, load_payload, media_tokens, needs_parts, page_parts, send_as
from tasks.per_file.requests import file_request, recipe_parts

if TYPE_CHECKING:
    from docmill.settings import Settings
    from tasks.inventory import Document
    from tasks.recipes import Recipe

METHOD = (
    "an estimate, no model call: input = request content characters / 4 (PDF pages and images as the API "
    "bills them), output = a typical answer to the recipe's schema "
    "(worst case: max_tokens), priced with the docmill price table; realtime reads the system prompt "
    "from the cache after the first request when it reaches the model's minimum cacheable length, batch = 50 % without cache hits; repairs not included"
)


NOTE_TOKENS_PER_RESULT = 55
DIGEST_TOKENS = 1500  # the two code-built digests of a call, at most (integration.digest_chars x 2 / 4)


@dataclass
class IntegrationEstimate:
    """The integration pass over `documents` new documents (full: all of them)."""

    model: str
    prompt_tokens: int  # system prompt + digests, per call
    result_tokens: int  # one compact result
    read_records: int
    slice_records: int
    max_tokens: int

    def calls(self, documents: int) -> int:
        return math.ceil(min(documents, self.read_records) / self.slice_records) if documents else 0

    def usd(self, documents: int, *, worst: bool = False) -> float:
        """Realtime price of integrating `documents` new or changed documents."""
        p = price_table()[self.model]
        read = min(documents, self.read_records)
        calls = self.calls(documents)
        inp = calls * self.prompt_tokens + read * self.result_tokens
        out = (
            calls * self.max_tokens if worst else min(read * NOTE_TOKENS_PER_RESULT, calls * self.max_tokens)
        )
        return (inp * p["input"] + out * p["output"]) / 1e6

    def lines(self, documents: int, per_file_usd: float) -> list[str]:
        full = self.usd(documents)
        share = f" ({100 * full / per_file_usd:.0f}% of the realtime per-file pass)" if per_file_usd else ""
        one, hundred = self.usd(1), self.usd(100)
        return [
            f"  integration, full: {self.calls(documents)} call(s) reading {min(documents, self.read_records)} of "
            f"{documents} results (code builds entities, duplicates, conflicts, gaps) ~${full:.4f}{share} "
            f"(worst case ${self.usd(documents, worst=True):.4f}), model {self.model}",
            f"  integration, incremental: unchanged source $0; +1 document ~${one:.4f}; +100 documents "
            f"~${hundred:.4f} ({self.calls(100)} call(s))",
        ]


def integration_estimate(recipe: Any, settings: Any, system_tokens: int) -> IntegrationEstimate:
    s = settings.integration
    return IntegrationEstimate(
        model=settings.api.integration_model,
        prompt_tokens=system_tokens + DIGEST_TOKENS,
        result_tokens=max(16, typical_output_tokens(recipe, int(settings.api.max_tokens)) // 2),
        read_records=s.read_records,
        slice_records=s.slice_records,
        max_tokens=s.max_tokens,
    )


@dataclass
class Estimate:
    model: str
    documents: int = 0
    skipped: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0  # of input_tokens: the system prompt of every request after the first
    prefix_tokens: int = 0  # the static prefix (system prompt) of one request
    cache_min_tokens: int = 0  # the model's minimum cacheable prefix (settings.api.cache_min_tokens)
    typical_output_tokens: int = 0
    max_output_tokens: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    sent_as: dict[str, int] = field(default_factory=dict)  # documents by how they go: text, pdf, image
    long_input_tokens: int = 0  # of input_tokens: PDFs in page ranges (realtime in batch mode too)
    long_output_tokens: int = 0
    long_max_output_tokens: int = 0
    integration: IntegrationEstimate | None = None

    def usd(self, *, batch: bool, worst: bool = False) -> float:
        p = price_of(self.model) or {"input": 0.0, "output": 0.0}
        out = self.max_output_tokens if worst else self.typical_output_tokens
        if batch:
            long_out = self.long_max_output_tokens if worst else self.long_output_tokens
            realtime = self.long_input_tokens * p["input"] + long_out * p["output"]
            batched = (self.input_tokens - self.long_input_tokens) * p["input"] + (out - long_out) * p[
                "output"
            ]
            return (batched * BATCH_DISCOUNT + realtime) / 1e6
        fresh = self.input_tokens - self.cached_tokens
        return (fresh * p["input"] + self.cached_tokens * p["input"] * CACHE_READ + out * p["output"]) / 1e6

    def lines(self) -> list[str]:
        rows = [
            f"docmill estimate ({METHOD})",
            f"  documents to send: {self.documents} ({self.skipped} skipped by inventory); model {self.model}",
            f"  input tokens ~{self.input_tokens:,}; output tokens ~{self.typical_output_tokens:,} "
            f"(at most {self.max_output_tokens:,})",
            f"  realtime: ~${self.usd(batch=False):.4f} (worst case ${self.usd(batch=False, worst=True):.4f})",
            f"  batch:    ~${self.usd(batch=True):.4f} (worst case ${self.usd(batch=True, worst=True):.4f})",
        ]
        if price_of(self.model) is None:
            rows.append(f"  no price for {self.model}: USD shown as 0 (add it with DOCMILL_PRICES)")
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


ANSWER_ITEMS = 2  # items assumed per list in a typical answer
EVIDENCE_CHARS = 32  # an evidence excerpt: about one labelled line of a document
VALUE_CHARS = 10  # a value copied from a document (a number, a date, a name)
BLOCK_TOKENS = 3  # per content block, message and request: what the API adds around the content


def _answer_chars(node: Any, defs: dict[str, Any], name: str, depth: int = 0) -> float:
    """Characters of a typical answer to `node` (the wire schema): every field with a short value,
    evidence fields with about a line, lists with ANSWER_ITEMS items."""
    if depth > 12 or not isinstance(node, dict):
        return VALUE_CHARS
    ref = node.get("$ref")
    if isinstance(ref, str):
        return _answer_chars(defs.get(ref.rsplit("/", 1)[-1]) or {}, defs, name, depth + 1)
    alternatives = [a for a in node.get("anyOf") or [] if isinstance(a, dict) and a.get("type") != "null"]
    if alternatives:
        return _answer_chars(alternatives[0], defs, name, depth + 1)
    kind = node.get("type")
    if kind == "object" or "properties" in node:
        props = node.get("properties") or {}
        return 2 + sum(len(k) + 4 + _answer_chars(v, defs, k, depth + 1) for k, v in props.items())
    if kind == "array":
        return 2 + ANSWER_ITEMS * (2 + _answer_chars(node.get("items") or {}, defs, name, depth + 1))
    if kind == "string":
        enum = node.get("enum")
        if enum:
            return 2 + max(len(str(e)) for e in enum)
        return 2 + (
            EVIDENCE_CHARS if "evidence" in name or "quote" in name or "excerpt" in name else VALUE_CHARS
        )
    return 6  # number, integer, boolean


def typical_output_tokens(recipe: Recipe, max_tokens: int) -> int:
    """Output tokens of a typical per-file answer, modelled on the recipe's schema (_answer_chars)."""
    schema = recipe_parts(recipe)[2]
    chars = _answer_chars(schema, schema.get("$defs") or {}, "")
    return min(max_tokens, max(64, int(chars / 4)))


def content_tokens(request: dict[str, Any]) -> int:
    """Input tokens of a request as the API counts them: the content (system text, message blocks,
    the output schema) at 4 characters a token, PDFs and images by pages and pixels, plus a few
    tokens per block; not the JSON envelope (keys, quotes, escapes) that
    tasks.api.usage.estimate_input_tokens includes to stay on the safe side for pacing."""
    from tasks.readers.measure import media_block_tokens

    def text(t: Any) -> int:
        return math.ceil(len(str(t)) / 4) + BLOCK_TOKENS

    total = BLOCK_TOKENS + text(json.dumps((request.get("output_config") or {}).get("format") or {}))
    system = request.get("system") or []
    total += sum(text(b.get("text", "")) for b in system) if isinstance(system, list) else text(system)
    for message in request.get("messages") or []:
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for block in blocks:
            media = media_block_tokens(block)
            total += media + BLOCK_TOKENS if media is not None else text(block.get("text", json.dumps(block)))
        total += BLOCK_TOKENS
    return total


def request_of(recipe: Recipe, doc: Document, settings: Settings) -> dict[str, Any] | None:
    """The per-file request of a document, or None when it would not be sent (skipped, unreadable)."""
    if doc.status != "ok" or doc.duplicate_of:
        return None
    try:
        payload = load_payload(doc, recipe, settings)
    except Exception:
        return None
    return file_request(recipe, doc, payload, model=settings.api.model, max_tokens=settings.api.max_tokens)


def _add_long(est: Estimate, doc: Document, recipe: Recipe, settings: Settings, typical: int) -> None:
    """A PDF in page ranges: its pages' tokens plus one prompt and one answer per part."""
    parts = len(page_parts(doc, settings))
    prompt = estimate_input_tokens(file_request(recipe, doc, "", model=settings.api.model, max_tokens=1))
    tokens = media_tokens(doc) + parts * prompt
    est.input_tokens += tokens
    est.long_input_tokens += tokens
    est.typical_output_tokens += parts * typical
    est.long_output_tokens += parts * typical
    est.max_output_tokens += parts * int(settings.api.max_tokens)
    est.long_max_output_tokens += parts * int(settings.api.max_tokens)


def estimate_docs(docs: Iterable[Any], recipe: Recipe, settings: Settings) -> Estimate:
    est = Estimate(
        model=settings.api.model,
        cache_min_tokens=min_cacheable_tokens(settings.api.model, settings.api.cache_min_tokens),
    )
    max_tokens = int(settings.api.max_tokens)
    typical = typical_output_tokens(recipe, max_tokens)
    for doc in docs:
        if doc.status == "ok" and not doc.duplicate_of and needs_parts(doc, recipe, settings):
            _add_long(est, doc, recipe, settings, typical)
            est.documents += 1
            est.sent_as["pdf"] = est.sent_as.get("pdf", 0) + 1
            continue
        request = request_of(recipe, doc, settings)
        if request is None:
            est.skipped += 1
            continue
        mode = send_as(doc, recipe).value
        est.sent_as[mode] = est.sent_as.get(mode, 0) + 1
        prefix = max(1, len(json.dumps(request["system"], ensure_ascii=False)) // 4)
        est.prefix_tokens = max(est.prefix_tokens, prefix)
        if est.documents and prefix >= est.cache_min_tokens:  # below the minimum nothing is cached
            est.cached_tokens += prefix
        est.documents += 1
        est.input_tokens += content_tokens(request)
        est.typical_output_tokens += typical
        est.max_output_tokens += max_tokens
        est.by_type[str(doc.doc_type)] = est.by_type.get(str(doc.doc_type), 0) + 1
    system = max(1, len(recipe.integration_prompt) // 4)
    est.integration = integration_estimate(recipe, settings, system)
    return est


def estimate_source(source: str, recipe_name: str, settings: Settings) -> Estimate:
    from tasks.inventory import inventory
    from tasks.recipes import load_recipe

    recipe = load_recipe(recipe_name)
    return estimate_docs(inventory(source, settings, doc_types=recipe.doc_types), recipe, settings)


def worst_case_usd(request: dict[str, Any], *, batch: bool) -> float:
    """What one request can cost at most: input as 5-minute cache writes, max_tokens of output
    (the same bound tasks.api.client.ModelClient reserves before a realtime request)."""
    p = price_of(str(request["model"]))
    if p is None:
        return 0.0
    usd = (
        estimate_input_tokens(request) * p["input"] * CACHE_WRITE_5M + request["max_tokens"] * p["output"]
    ) / 1e6
    return usd * (BATCH_DISCOUNT if batch else 1.0)


def in_flight_bound(docs: Iterable[Document], recipe: Recipe, settings: Settings) -> InFlightBound:
    """What a realtime chunk's requests can cost at most (checkpoints.inflight records it): all of
    them (answers buffered but not yet in the cost ledger are lost by a kill until a resume recounts
    them), and the ones in flight at once (at most the concurrency: the largest worst cases). Each
    request is sized from its document's bytes without reading it (bytes / 2 tokens: /4 as
    everywhere, x2 for JSON escapes) plus the prompt, at the dearer of the model and its fallback."""
    table = price_table()
    models = [m for m in (settings.api.model, settings.api.fallback_model) if m and m in table]
    worst: list[float] = []
    for doc in docs:
        if doc.status != "ok" or doc.duplicate_of:
            continue
        each = []
        for model in models:
            request = file_request(recipe, doc, "", model=model, max_tokens=settings.api.max_tokens)
            media = send_as(doc, recipe) is not SendAs.TEXT  # pages and pixels, not bytes
            tokens = media_tokens(doc) if media else doc.size / 2
            text_usd = tokens * table[model]["input"] * CACHE_WRITE_5M / 1e6
            each.append(worst_case_usd(request, batch=False) + text_usd)
        worst.append(max(each, default=0.0))
    k = min(len(worst), int(settings.api.concurrency))
    return InFlightBound(
        requests=len(worst), usd=sum(worst), at_once=k, at_once_usd=sum(sorted(worst, reverse=True)[:k])
    )

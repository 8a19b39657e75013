"""A document longer than the per-file budget: split on structure, extract chunk by chunk, merge.

`split_document` cuts at the coarsest structure that makes every chunk fit (`LEVELS`). Chunks are
contiguous slices of the original text (`text[chunk.start:chunk.end] == chunk.text`, covering it), so
every offset maps back into the document. A PDF sent as a PDF is cut into page ranges instead
(tasks.request.page_parts), each sent as its own `document` block; the pages its answer names are
turned into the document's page numbers.

`extract_long` sends the chunks one by one through one `ConversationTask` (its checkpoint makes a
crash resume at the next chunk; values found so far are pinned facts). Each chunk goes out alone with
the pinned facts, so the document's tokens are paid about once. Code merges the answers: a
`{value, evidence}` field takes the first chunk that states it, lists are concatenated without exact
duplicates, and every excerpt gets its provenance `{chunk, start, end}` as absolute offsets into the
original text (so a PDF sent as text in chunks is boxed like a short one, tasks.per_file.boxes).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from docmill.sdk import anthropic
from tasks.api.answers import message_text
from tasks.conversation.compaction import canonical
from tasks.conversation.pinned import PinnedFacts
from tasks.conversation.task import ConversationTask
from tasks.per_file.boxes import with_boxes
from tasks.per_file.gate import PAGE_MARK, evidence_report, strip_page_marks, validation_errors
from tasks.per_file.outcome import DocOutcome
from tasks.per_file.settle import enqueue_review, write_outcome
from tasks.recipes.thinking import effort_config
from tasks.request import (
    CHARS_PER_TOKEN,
    INSTRUCTION,
    Payload,
    SendAs,
    document_blocks,
    page_parts,
    part_payload,
    static_system,
    wrap_document,
)

if TYPE_CHECKING:
    from tasks.per_file.settle import Pass
    from tasks.recipes import Recipe
    from tasks.source.document import Document

PASS = "file_long"
_HEADING = re.compile(r"(?m)^#{1,6}[ \t]")
_PARAGRAPH = re.compile(r"\n[ \t]*\n+")


@dataclass(frozen=True)
class Chunk:
    index: int
    start: int
    end: int
    text: str
    first_page: int | None = None  # a PDF part: its pages (1-based, inclusive)
    last_page: int | None = None


# Where a text may be cut, coarsest first: after a page (form feed), before a markdown heading, after
# a blank-line paragraph, after a line; past the last, a hard cut.
LEVELS: list[Callable[[str], list[int]]] = [
    lambda text: [m.end() for m in re.finditer("\f", text)],
    lambda text: [m.start() for m in _HEADING.finditer(text) if m.start() > 0],
    lambda text: [m.end() for m in _PARAGRAPH.finditer(text)],
    lambda text: [m.end() for m in re.finditer("\n", text)],
]


def _spans(text: str, start: int, end: int, limit: int, depth: int) -> list[tuple[int, int]]:
    """Spans of text[start:end], each at most `limit` chars, cut at LEVELS[depth] or finer."""
    if end - start <= limit:
        return [(start, end)]
    if depth == len(LEVELS):
        return [(i, min(i + limit, end)) for i in range(start, end, limit)]
    piece = text[start:end]
    cuts = [start + c for c in LEVELS[depth](piece) if 0 < c < len(piece)]
    pieces = list(zip([start, *cuts], [*cuts, end], strict=True))
    out: list[tuple[int, int]] = []
    cur_start = cur_end = start
    for a, b in pieces:
        if b - a > limit:
            if cur_end > cur_start:
                out.append((cur_start, cur_end))
            out.extend(_spans(text, a, b, limit, depth + 1))
            cur_start = cur_end = b
        elif b - cur_start > limit:
            out.append((cur_start, cur_end))
            cur_start, cur_end = a, b
        else:
            cur_end = b
    if cur_end > cur_start:
        out.append((cur_start, cur_end))
    return out


def split_document(text: str, max_tokens: int, *, chars_per_token: float = CHARS_PER_TOKEN) -> list[Chunk]:
    """Contiguous chunks of at most `max_tokens` (estimated) each, cut on structure."""
    limit = max(1, int(max_tokens * chars_per_token))
    spans = _spans(text, 0, len(text), limit, 0) if text else [(0, 0)]
    return [Chunk(i, a, b, text[a:b]) for i, (a, b) in enumerate(spans)]


def locate(text: str, chunks: list[Chunk], chunk_index: int, excerpt: Any) -> dict[str, int | None]:
    """Absolute provenance of an excerpt: searched in its chunk first, then anywhere in the text;
    not found (or none): the chunk alone."""
    excerpt, chunk = str(excerpt or ""), chunks[chunk_index]
    pos = chunk.text.find(excerpt) if excerpt else -1
    if pos != -1:
        return {"chunk": chunk.index, "start": chunk.start + pos, "end": chunk.start + pos + len(excerpt)}
    pos = text.find(excerpt) if excerpt else -1
    if pos == -1:
        return {"chunk": chunk_index, "start": None, "end": None}
    owner = next(c for c in chunks if c.start <= pos < max(c.end, c.start + 1))
    return {"chunk": owner.index, "start": pos, "end": pos + len(excerpt)}


def _is_value(node: Any) -> bool:
    return isinstance(node, dict) and "value" in node and "evidence" in node


def merge_chunks(
    text: str, chunks: list[Chunk], outputs: list[dict[str, Any] | None]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(merged output, provenance by field path) from per-chunk outputs in chunk order."""
    merged: dict[str, Any] = {}
    provenance: dict[str, Any] = {}
    for i, out in enumerate(outputs):
        for field, node in (out or {}).items():
            if _is_value(node):
                if merged.get(field, {}).get("value") is None and node.get("value") is not None:
                    merged[field] = node
                    provenance[field] = locate(text, chunks, i, node.get("evidence"))
                else:
                    merged.setdefault(field, node)
            elif isinstance(node, list):
                items = merged.setdefault(field, [])
                seen = {canonical(x) for x in items}
                for item in node:
                    if canonical(item) in seen:  # stated again (a repeated header, a page break)
                        continue
                    seen.add(canonical(item))
                    excerpt = item.get("evidence") if isinstance(item, dict) else None
                    provenance[f"{field}[{len(items)}]"] = locate(text, chunks, i, excerpt)
                    items.append(item)
            elif field not in merged or merged[field] in (None, "other"):
                merged[field] = node
    return merged, provenance


def _pin_found(pinned: PinnedFacts, index: int, out: dict[str, Any]) -> None:
    for field, node in out.items():
        if _is_value(node) and node.get("value") is not None and f"field:{field}" not in pinned:
            value = canonical(node["value"]).decode()
            pinned.set(f"field:{field}", f"{field} = {value} (chunk {index})", terms=[str(node["value"])])


def pdf_chunks(payload: Payload, parts: list[tuple[int, int]]) -> list[Chunk]:
    """One chunk per page range of a PDF, with the span of those pages in its text layer."""
    chunks = []
    for i, (first, last) in enumerate(parts):
        spans = [p for p in payload.content.pages if first <= p.number <= last]
        start, end = (spans[0].start, spans[-1].end) if spans else (0, 0)
        chunks.append(Chunk(i, start, end, payload.text[start:end], first, last))
    return chunks


def _turn(chunk: Chunk, total: int, doc_id: str, doc_type: str, payload: Payload | None) -> Any:
    """The user turn of one chunk: wrapped text, or a PDF part's label, pages and instruction."""
    if chunk.first_page is None or payload is None:
        return (
            f"Chunk {chunk.index + 1} of {total} (characters {chunk.start}-{chunk.end}).\n"
            + wrap_document(f"{doc_id}#chunk-{chunk.index}", doc_type, chunk.text)
            + "\n"
            + INSTRUCTION
        )
    a, b = chunk.first_page, chunk.last_page or chunk.first_page
    part = part_payload(payload, a, b)
    head = {"type": "text", "text": f"Part {chunk.index + 1} of {total}: pages {a}-{b} of the document."}
    return [head, *document_blocks(f"{doc_id}#pages-{a}-{b}", doc_type, part)]


def absolute_pages(node: Any, first_page: int) -> Any:
    """Every `[page N]` prefix of a part's answer as the document's page (N + first_page - 1)."""
    if isinstance(node, dict):
        return {k: absolute_pages(v, first_page) for k, v in node.items()}
    if isinstance(node, list):
        return [absolute_pages(v, first_page) for v in node]
    if isinstance(node, str):
        m = PAGE_MARK.match(node)
        if m:
            return f"[page {int(m.group(1)) + first_page - 1}] " + node[m.end() :]
    return node


def extract_long(
    p: Pass,
    text: str,
    *,
    doc_id: str,
    doc_type: str = "txt",
    payload: Payload | None = None,
    parts: list[tuple[int, int]] | None = None,
) -> dict[str, Any]:
    """Extract a long document chunk by chunk in one conversation (the run's recipe, store, client and
    settings: `p`); merged output with provenance. With a PDF `payload` and its page `parts`, the
    chunks are those page ranges, sent as PDFs."""
    recipe, settings = p.recipe, p.settings
    if payload is not None and payload.send is SendAs.PDF and parts is not None:
        chunks, unit = pdf_chunks(payload, parts), "parts of page ranges"
    else:
        chunks, unit = split_document(text, settings.context.document_budget_tokens), "chunks"
    task = ConversationTask(
        "longdoc-" + hashlib.sha256(doc_id.encode()).hexdigest()[:24],  # doc ids may hold '/'; keys may not
        p.run_id,
        p.store,
        p.client,
        model=settings.api.model,
        system=f"{static_system(recipe)}\n\nThe document arrives in {unit}, one per "
        "turn; extract what each states. The <pinned_facts> block lists values already found.",
        budget_tokens=settings.context.budget_tokens,
        max_tokens=settings.api.max_tokens,
        pass_name=PASS,
        doc_id=doc_id,
    )
    fmt = {
        "format": {"type": "json_schema", "schema": anthropic.transform_schema(recipe.file_schema)},
        **effort_config(settings.api.model, recipe.thinking),  # thinking must not eat max_tokens
    }
    task.state.setdefault("outputs", {})
    for chunk in chunks[task.exchanges :]:
        task.forget_history()  # the chunk alone, with the pinned facts: no earlier chunk is re-sent

        def keep(message: dict[str, Any], c: Chunk = chunk) -> None:
            try:
                out = json.loads(message_text(message))
            except ValueError:
                out = None
            if isinstance(out, dict) and c.first_page is not None:
                out = absolute_pages(out, c.first_page)
                task.forget_history()  # a PDF part's bytes are not kept in the checkpoint
            task.state["outputs"][str(c.index)] = out if isinstance(out, dict) else None
            if isinstance(out, dict):
                _pin_found(task.pinned, c.index, out)

        task.send(_turn(chunk, len(chunks), doc_id, doc_type, payload), output_config=fmt, on_reply=keep)
    outputs = [task.state["outputs"].get(str(c.index)) for c in chunks]
    merged, provenance = merge_chunks(text, chunks, outputs)
    return {
        "doc_id": doc_id,
        "output": merged,
        "provenance": provenance,
        "chunks": [
            {"index": c.index, "start": c.start, "end": c.end}
            | ({"pages": [c.first_page, c.last_page]} if c.first_page is not None else {})
            for c in chunks
        ],
        "failed_chunks": [c.index for c, o in zip(chunks, outputs, strict=True) if o is None],
        "compactions": len(task.compactions),
    }


def long_outcome_fields(
    recipe: Recipe, result: dict[str, Any], payload: Payload
) -> tuple[dict[str, Any], list[str]]:
    """(the DocOutcome fields of a merged long extraction, its errors): validated, evidence checked
    by the gate's verbatim rule against the whole document (pages named as the document's own),
    provenance per field with its chunk, offsets and page."""
    errors: list[str] = []
    flags: list[dict[str, Any]] = []
    output: dict[str, Any] | None = None
    fields: dict[str, Any] = dict(result["provenance"])
    whole = Payload(payload.text, payload.content, payload.send, None, payload.media_type, pdf=payload.pdf)
    try:
        output = recipe.file_schema.model_validate(result["output"]).model_dump(mode="json")
        flags, found = evidence_report(recipe, output, whole)
        errors += [f"{f['path']}: evidence excerpt {f['excerpt']!r} {f.pop('why')}" for f in flags]
        if payload.send is SendAs.PDF:
            fields, output = with_boxes(whole, found), strip_page_marks(recipe, output)
        else:
            for where in fields.values():
                if isinstance(where, dict) and where.get("start") is not None:
                    where["page"] = payload.page_of(int(where["start"]))
                    if payload.pdf is not None:
                        where["verified"] = True  # found verbatim in the PDF's text layer
            fields = with_boxes(whole, fields)  # a PDF sent as text: its offsets are the whole text's
    except ValidationError as e:
        errors = validation_errors(e)[:20]
    if result["failed_chunks"]:
        errors.append(f"chunks without a valid answer: {result['failed_chunks']}")
    ok = not errors and not flags
    return {
        "state": "succeeded" if ok else "needs_review",
        "reason": None if ok else ("evidence_not_found" if flags else "validation_failed"),
        "output": output if output is not None else result["output"],
        "flags": flags,
        "last_error": "; ".join(errors)[:2000] or None,
        "provenance": {"chunks": result["chunks"], "fields": fields, "sent_as": payload.send.value},
    }, errors


def review_long(p: Pass, doc: Document, key: str, payload: Payload) -> DocOutcome:
    """A document above the per-file budget, realtime (also from batch mode, which sends no long
    document in a batch): split on structure (a PDF sent as a PDF: page ranges), extracted chunk by
    chunk in one conversation task, merged with provenance, gated, written once, queued for review
    when it needs review."""
    result = extract_long(
        p,
        payload.text,
        doc_id=doc.doc_id,
        doc_type=doc.doc_type,
        payload=payload,
        parts=page_parts(doc, p.settings) if payload.send is SendAs.PDF else None,
    )
    fields, errors = long_outcome_fields(p.recipe, result, payload)
    outcome = DocOutcome(
        doc_id=doc.doc_id,
        key=key,
        model=p.model,
        attempts=len(result["chunks"]),
        **fields,
    )
    return enqueue_review(p, doc, write_outcome(p, outcome), errors=errors)

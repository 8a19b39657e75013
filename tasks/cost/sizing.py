"""How big a request and its answer are, as the API counts them (for `tasks.cost.estimate`; a leaf but for
the media measure): `content_tokens` counts a request's content, not its JSON envelope, PDF pages and
images as the API bills them; `answer_chars` models a typical answer on a recipe's wire schema, and
`table_rows` counts the rows of a document's tables that a list of amounts would copy."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from tasks.api.media_tokens import media_block_tokens

ANSWER_ITEMS = 2  # items assumed per list in a typical answer
EVIDENCE_CHARS = 32  # an evidence excerpt: about one labelled line of a document
VALUE_CHARS = 10  # a value copied from a document (a number, a date, a name)
BLOCK_TOKENS = 3  # per content block, message and request: what the API adds around the content
MAX_ROWS = 100  # table rows counted at most per document
_DATE = re.compile(r"\b\d{1,4}[-/.]\d{1,2}[-/.]\d{1,4}\b")
_NUMBER = re.compile(r"(?<![\w.,])\d[\d.,' ]*\d(?![\w])|(?<![\w.,])\d(?![\w.,])")


def table_rows(text: str) -> int:
    """Lines of `text` that read as a row of a table of amounts: two or more numbers besides dates
    (a quantity and a price, a price and a total), at most MAX_ROWS."""
    rows = 0
    for line in text.splitlines():
        if len(_NUMBER.findall(_DATE.sub(" ", line))) >= 2:
            rows += 1
            if rows >= MAX_ROWS:
                break
    return rows


def _rows_of_amounts(node: Any, defs: dict[str, Any]) -> bool:
    """A list whose items carry a decimal number (an amount, a quantity): one item per table row."""
    ref = node.get("$ref") if isinstance(node, dict) else None
    item = defs.get(ref.rsplit("/", 1)[-1]) if isinstance(ref, str) else node
    props = (item or {}).get("properties") or {}
    for prop in props.values():
        kinds = [prop.get("type")] + [a.get("type") for a in prop.get("anyOf") or [] if isinstance(a, dict)]
        if "number" in kinds:
            return True
    return False


def answer_chars(
    node: Any, defs: dict[str, Any], name: str, depth: int = 0, rows: int | None = None
) -> float:
    """Characters of a typical answer to `node` (the wire schema): every field with a short value,
    evidence fields with about a line, lists with ANSWER_ITEMS items — but a list of amounts with one
    item per table row of the document when its text is known (`rows`, from `table_rows`)."""
    if depth > 12 or not isinstance(node, dict):
        return VALUE_CHARS
    ref = node.get("$ref")
    if isinstance(ref, str):
        return answer_chars(defs.get(ref.rsplit("/", 1)[-1]) or {}, defs, name, depth + 1, rows)
    alternatives = [a for a in node.get("anyOf") or [] if isinstance(a, dict) and a.get("type") != "null"]
    if alternatives:
        return answer_chars(alternatives[0], defs, name, depth + 1, rows)
    kind = node.get("type")
    if kind == "object" or "properties" in node:
        props = node.get("properties") or {}
        return 2 + sum(len(k) + 4 + answer_chars(v, defs, k, depth + 1, rows) for k, v in props.items())
    if kind == "array":
        items = node.get("items") or {}
        count = rows if rows is not None and _rows_of_amounts(items, defs) else ANSWER_ITEMS
        return 2 + count * (2 + answer_chars(items, defs, name, depth + 1))
    if kind == "string":
        enum = node.get("enum")
        if enum:
            return 2 + max(len(str(e)) for e in enum)
        return 2 + (
            EVIDENCE_CHARS if "evidence" in name or "quote" in name or "excerpt" in name else VALUE_CHARS
        )
    return 6  # number, integer, boolean


def content_tokens(request: dict[str, Any]) -> int:
    """Input tokens of a request as the API counts them: the content (system text, message blocks,
    the output schema) at 4 characters a token, PDFs and images by pages and pixels, plus a few
    tokens per block; not the JSON envelope (keys, quotes, escapes) that
    tasks.api.usage.estimate_input_tokens includes to stay on the safe side for pacing."""

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

"""Read the request the way the emulated model does: its documents, their lines and labelled lines.

Everything the emulator's answers contain comes from here, so every string it returns as
evidence is a slice of a document in the request. Linear-time scanning only (no regex with
nested quantifiers), because batches push 100k requests through it. Amounts and dates are read
in `emulator.values`, JSON records in `emulator.records`.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from emulator import media
from emulator.records import json_records
from emulator.values import DATE_RE, NUMBER
from emulator.words import tokens

DOC_TAG = re.compile(r"<document\b([^>]*)>(.*?)</document>", re.DOTALL)
ID_ATTR = re.compile(r"""\b(?:id|name|path|doc_id)\s*=\s*["']([^"']{1,300})["']""")
JSON_ID = re.compile(r""""(?:doc_id|source_doc_id|document_id)"\s*:\s*"([^"\\]{1,300})\"""")


@dataclass(frozen=True)
class Line:
    doc_id: str | None
    number: int  # 1-based within its document
    text: str  # stripped; always a substring of the document
    page: int | None = None  # a PDF / image sent as what it is: the page the line is on (1-based)


@dataclass(frozen=True)
class Label:
    line: Line
    label: str
    value: str
    toks: frozenset[str]


@dataclass
class Doc:
    doc_id: str | None
    text: str
    paged: bool = False  # sent as a PDF or image: pages split by form feeds, lines know their page

    @cached_property
    def lines(self) -> list[Line]:
        out = []
        number = 0
        pages = self.text.split("\f") if self.paged else [self.text]
        for page_no, page in enumerate(pages, start=1):
            for raw in page.split("\n"):
                number += 1
                stripped = raw.strip()
                if stripped:
                    out.append(Line(self.doc_id, number, stripped, page_no if self.paged else None))
        return out

    @cached_property
    def labels(self) -> list[Label]:
        """`Label: value` lines, also `"key": "value",` (JSON) and `Label,value` (CSV); values unquoted."""
        out = []
        for line in self.lines:
            text = line.text
            comma, colon = text.find(","), text.find(":")
            csv_like = (
                0 < comma < 40 and (colon < 0 or comma < colon) and not any(c.isdigit() for c in text[:comma])
            )
            head, sep, tail = text.partition("," if csv_like else ":")
            value = tail.strip()
            if value.endswith(","):
                value = value[:-1].rstrip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            if (
                not sep
                or not value
                or value in "[{"
                or len(head) > 60
                or "//" in tail[:2]
                or _code_like(head)
            ):
                continue
            label = head.strip(" \t-*•#\"'")
            toks = tokens(label)
            if toks:
                out.append(Label(line, label, value, frozenset(toks)))
        return out

    @cached_property
    def table_rows(self) -> list[Line]:
        """Lines that look like rows of a table: bullets or pipes with a number, or 2+ amounts, no label."""
        rows = []
        labelled = {lab.line.number for lab in self.labels}
        for line in self.lines:
            text = line.text
            nums = NUMBER.findall(DATE_RE.sub(" ", text))
            if not nums or (line.number in labelled and "|" not in text):
                continue
            if text[:1] in "-*•|" or "|" in text or len(nums) >= 2:
                rows.append(line)
            if len(rows) >= 50:
                break
        return rows


CODE_HEADS = (
    "def ",
    "class ",
    "if ",
    "elif ",
    "for ",
    "while ",
    "with ",
    "return",
    "lambda",
    "async ",
    "else",
)


def _code_like(head: str) -> bool:
    """A `head:` that is code (`def f(x`, `if a == b`), not a label."""
    stripped = head.lstrip()
    return (
        any(c in head for c in "=[]{};<>`")
        or head.count("(") != head.count(")")
        or stripped.startswith(CODE_HEADS)
        or len(head.split()) > 6
    )


@dataclass
class Prompt:
    """The request's text: documents (from `<document>` tags, else all user text) and every id in it."""

    docs: list[Doc]
    full_text: str
    ids: list[str] = field(default_factory=list)

    @cached_property
    def records(self) -> list[tuple[str, dict[str, Any]]]:
        return json_records([(doc.doc_id, doc.text) for doc in self.docs], self.full_text)

    @property
    def per_file(self) -> bool:
        """A request about one document (not the integration pass over per-file records)."""
        return not (self.records and self.docs[0].doc_id is None)


def block_text(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            out.append(str(block.get("text", "")))
        elif kind == "tool_result":
            out.extend(block_text(block.get("content", "")))
        elif kind == "compaction" and block.get("content"):
            out.append(str(block["content"]))
        elif kind == "document":
            source = block.get("source") or {}
            if source.get("type") == "text":
                title = block.get("title") or "document"
                out.append(f'<document id="{title}">{source.get("data", "")}</document>')
        elif kind == "tool_use":
            out.append(json.dumps(block.get("input", {})))
    return out


MEDIA_LABEL = re.compile(r"<document\b([^>]*)/>")


def media_docs(content: Any) -> list[Doc]:
    """Documents sent as PDFs or images: what the model reads of each page (emulator.media), named
    by the document block's title or the label before an image."""
    out: list[Doc] = []
    label: str | None = None
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            for m in MEDIA_LABEL.finditer(str(block.get("text", ""))):
                attr = ID_ATTR.search(m.group(1))
                label = html.unescape(attr.group(1)) if attr else label
            continue
        found = media.read_media(block)
        if isinstance(found, media.Pdf):
            out.append(
                Doc(str(block.get("title") or label or "") or None, "\f".join(found.pages), paged=True)
            )
        elif found is not None:  # an image: what the model reads of it is its OCR hint
            out.append(Doc(label or None, found.text, paged=True))
    return out


def read_prompt(body: dict[str, Any]) -> Prompt:
    system = body.get("system") or ""
    parts = block_text(system)
    user_parts: list[str] = []
    sent_media: list[Doc] = []
    for message in body.get("messages") or []:
        texts = block_text(message.get("content", ""))
        parts.extend(texts)
        if message.get("role") == "user":
            user_parts.extend(texts)
            sent_media.extend(media_docs(message.get("content")))
    full = "\n".join(parts)
    docs = []
    for match in DOC_TAG.finditer(full):
        attr = ID_ATTR.search(match.group(1))
        text = match.group(2)
        text = text[2:] if text.startswith("\r\n") else text[1:] if text.startswith("\n") else text
        docs.append(Doc(html.unescape(attr.group(1)) if attr else None, text))
    docs.extend(sent_media)
    if not docs:
        docs = [Doc(None, "\n".join(user_parts))]
    in_json = JSON_ID.findall(full) if '"' in full and "id" in full else []
    ids = list(dict.fromkeys([*(doc.doc_id for doc in docs if doc.doc_id), *in_json]))
    return Prompt(docs, full, ids)

"""Read the request the way the emulated model does: documents, lines, labels, records.

Everything the emulator's answers contain comes from here, so every string it returns as
evidence is a slice of a document in the request. Linear-time scanning only (no regex with
nested quantifiers), because batches push 100k requests through it.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from datetime import date, datetime
from enum import StrEnum
from functools import cached_property, lru_cache
from typing import Any

DOC_TAG = re.compile(r"<document\b([^>]*)>(.*?)</document>", re.DOTALL)
ID_ATTR = re.compile(r"""\b(?:id|name|path|doc_id)\s*=\s*["']([^"']{1,300})["']""")
JSON_ID = re.compile(r""""(?:doc_id|source_doc_id|document_id)"\s*:\s*"([^"\\]{1,300})\"""")
NUMBER = re.compile(r"(?:(?<![A-Za-z0-9])-)?\(?\d(?:[\d,.]*\d)?\)?")
DATE_RE = re.compile(
    r"\b\d{4}-\d{1,2}-\d{1,2}\b|\b\d{1,2}[./-]\d{1,2}[./-]\d{2,4}\b|\b\d{4}/\d{1,2}/\d{1,2}\b"
)
WORD = re.compile(r"[a-z0-9#]+")
SQL_WORDS = ("select ", "insert ", "update ", "delete ", "where ")
# fmt: off
STOPWORDS = frozenset({
    "a", "an", "the", "of", "for", "to", "in", "on", "at", "by", "and", "or", "is", "are", "be", "this", "that",
    "its", "per",
})
WEAK = frozenset({"name", "value", "text", "amount", "str", "string", "field", "raw"})  # matched only alone
SYNONYMS = {
    "no": "number", "num": "number", "nr": "number", "#": "number", "id": "number", "ref": "number",
    "supplier": "vendor", "seller": "vendor", "issuer": "vendor", "from": "vendor", "merchant": "vendor",
    "customer": "buyer", "client": "buyer", "bill": "buyer", "billed": "buyer", "vat": "tax", "gst": "tax",
    "sum": "total", "grand": "total", "issued": "invoice", "qty": "quantity", "cur": "currency",
    "ccy": "currency", "dated": "date",
}
DATE_FORMATS = (
    "%Y-%m-%d", "%d.%m.%Y", "%d/%m/%Y", "%m/%d/%Y", "%Y/%m/%d", "%d %B %Y", "%d %b %Y", "%B %d, %Y",
    "%b %d, %Y", "%B %d %Y", "%d-%m-%Y", "%Y%m%d",
)
NOTABLE = (  # (needle, kind); checked in order on lowercased lines
    ("eval(", "security"), ("exec(", "security"), ("password", "security"), ("secret", "security"),
    ("shell=true", "security"), ("pickle.load", "security"), ("md5", "security"),
    ("except:", "error-handling"), ("except exception: pass", "error-handling"),
    ("todo", "maintainability"), ("fixme", "maintainability"), ("xxx", "maintainability"),
    ("print(", "style"), ("== none", "style"),
)
# fmt: on


def tokens(text: str) -> list[str]:
    """Lowercase word tokens of a label or field name, synonyms folded, stopwords and digits dropped."""
    return list(_tokens(text))


@lru_cache(maxsize=8192)
def _tokens(text: str) -> tuple[str, ...]:
    words = WORD.findall(text.replace("_", " ").lower())
    return tuple(SYNONYMS.get(w, w) for w in words if w not in STOPWORDS and not w.isdigit())


def strong(toks: list[str]) -> list[str]:
    """`toks` without weak words (name, value, ...) unless nothing else is left."""
    kept = [t for t in toks if t not in WEAK]
    return kept or toks


@dataclass(frozen=True)
class Line:
    doc_id: str | None
    number: int  # 1-based within its document
    text: str  # stripped; always a substring of the document

    @property
    def numbers(self) -> list[float]:
        return numbers_in(self.text)


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

    @cached_property
    def lines(self) -> list[Line]:
        out = []
        for i, raw in enumerate(self.text.split("\n"), start=1):
            stripped = raw.strip()
            if stripped:
                out.append(Line(self.doc_id, i, stripped))
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
        return json_records(self)


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


def read_prompt(body: dict[str, Any]) -> Prompt:
    system = body.get("system") or ""
    parts = block_text(system)
    user_parts: list[str] = []
    for message in body.get("messages") or []:
        texts = block_text(message.get("content", ""))
        parts.extend(texts)
        if message.get("role") == "user":
            user_parts.extend(texts)
    full = "\n".join(parts)
    docs = []
    for match in DOC_TAG.finditer(full):
        attr = ID_ATTR.search(match.group(1))
        text = match.group(2)
        text = text[2:] if text.startswith("\r\n") else text[1:] if text.startswith("\n") else text
        docs.append(Doc(html.unescape(attr.group(1)) if attr else None, text))
    if not docs:
        docs = [Doc(None, "\n".join(user_parts))]
    ids: list[str] = []
    for doc in docs:
        if doc.doc_id and doc.doc_id not in ids:
            ids.append(doc.doc_id)
    if '"' in full and "id" in full:
        for found in JSON_ID.findall(full):
            if found not in ids:
                ids.append(found)
    return Prompt(docs, full, ids)


def parse_number(text: str) -> float | None:
    """The first amount in `text`: `1,234.50`, `1.234,50`, `(12.00)`, `-3`, `EUR 99` (dates skipped)."""
    for raw in NUMBER.findall(DATE_RE.sub(" ", text)):
        value = _amount(raw)
        if value is not None:
            return value
    return None


def numbers_in(text: str) -> list[float]:
    found = (_amount(raw) for raw in NUMBER.findall(DATE_RE.sub(" ", text)))
    return [value for value in found if value is not None]


def _amount(raw: str) -> float | None:
    neg = raw.startswith("-") or (raw.startswith("(") and raw.endswith(")"))
    digits = raw.strip("-() ")
    if "," in digits and "." in digits:
        if digits.rfind(",") > digits.rfind("."):
            digits = digits.replace(".", "").replace(",", ".")
        else:
            digits = digits.replace(",", "")
    elif "," in digits:
        head, _, tail = digits.rpartition(",")
        digits = head.replace(",", "") + ("." if len(tail) != 3 else "") + tail
    elif digits.count(".") > 1:
        digits = digits.replace(".", "")
    try:
        value = float(digits)
    except ValueError:
        return None
    return -value if neg else value


def parse_date(text: str) -> date | None:
    text = text.strip().rstrip(".")
    if not text or not text[0].isalnum() or len(text) > 40:
        return None
    for fmt in DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt).date()
        except ValueError:
            continue
    head = text[:10]
    if head != text:
        return parse_date(head)
    return None


def notable_lines(doc: Doc) -> list[tuple[Line, str, str]]:
    """Lines of code worth a review finding: (line, kind, needle)."""
    out = []
    for line in doc.lines:
        low = line.text.lower()
        hit = next(((kind, needle) for needle, kind in NOTABLE if needle in low), None)
        if hit is None and any(w in low for w in SQL_WORDS) and ('" +' in low or 'f"' in low or "%" in low):
            hit = ("security", "sql")
        if hit:
            out.append((line, hit[0], hit[1]))
        if len(out) >= 50:
            break
    return out


def json_records(prompt: Prompt) -> list[tuple[str, dict[str, Any]]]:
    """Per-document JSON results in the prompt as (doc_id, flat {field: value}) pairs.

    A record is a JSON object with a doc id key (`doc_id`, `source_doc_id`, `document_id`, `id`),
    or the JSON body of a `<document id=...>`. Nested `{value, evidence}` objects collapse to value;
    their evidence is kept under `<field>.__evidence`.
    """
    found: list[tuple[str, dict[str, Any]]] = []
    decoder = json.JSONDecoder()
    sources = [(doc.doc_id, doc.text) for doc in prompt.docs] if prompt.docs[0].doc_id else []
    sources.append((None, prompt.full_text))
    seen: set[str] = set()
    for default_id, text in sources:
        pos = 0
        while len(found) < 500:
            start = min((i for i in (text.find("{", pos), text.find("[", pos)) if i >= 0), default=-1)
            if start < 0:
                break
            try:
                obj, end = decoder.raw_decode(text, start)
            except ValueError:
                pos = start + 1
                continue
            pos = end
            for doc_id, record in _records_in(obj, default_id):
                key = json.dumps([doc_id, record], sort_keys=True, default=str)
                if key not in seen:
                    seen.add(key)
                    found.append((doc_id, record))
    return found


def _records_in(obj: Any, default_id: str | None) -> list[tuple[str, dict[str, Any]]]:
    if isinstance(obj, list):
        return [r for item in obj[:1000] for r in _records_in(item, default_id)]
    if not isinstance(obj, dict):
        return []
    doc_id = next(
        (obj[k] for k in ("doc_id", "source_doc_id", "document_id", "id") if isinstance(obj.get(k), str)),
        None,
    )
    if doc_id is None:
        nested = [r for value in obj.values() if isinstance(value, list) for r in _records_in(value, None)]
        if nested or default_id is None:
            return nested
        doc_id = default_id
    flat: dict[str, Any] = {}
    _flatten(obj, "", flat)
    found = [(doc_id, flat)] if flat else []
    for key, value in obj.items():  # nested lists of objects (findings, line items) as sub-records
        for item in value[:200] if isinstance(value, list) else []:
            if isinstance(item, dict):
                sub: dict[str, Any] = {"__sub": key}
                _flatten(item, "", sub)
                found.append((doc_id, sub))
    return found


def _flatten(obj: dict[str, Any], prefix: str, out: dict[str, Any]) -> None:
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if key in ("doc_id", "source_doc_id", "document_id", "id"):
            continue
        if isinstance(value, dict):
            if "value" in value:
                out[name] = value["value"]
                ev = next(
                    (value[k] for k in ("evidence", "quote", "excerpt", "source_text") if k in value), None
                )
                if isinstance(ev, str):
                    out[name + ".__evidence"] = ev
            else:
                _flatten(value, name + ".", out)
        elif isinstance(value, str) and key in EVIDENCE_NAMES:
            out["__evidence"] = value
        elif isinstance(value, str | int | float) and not isinstance(value, bool):
            out[name] = value


class Role(StrEnum):
    """What a schema field is for, decided from its name; item builders fill roles, not names."""

    EVIDENCE = "evidence"
    DOC_ID = "doc_id"
    FILE = "file"
    LINE_START = "line_start"
    LINE_END = "line_end"
    CONFIDENCE = "confidence"
    FIELD = "field"
    VALUE = "value"
    DESC = "desc"
    EXPLAIN = "explain"
    QTY = "qty"
    UNIT_PRICE = "unit_price"
    AMOUNT = "amount"
    KEY = "key"


# fmt: off
EVIDENCE_NAMES = frozenset(
    ["evidence", "quote", "excerpt", "source_text", "snippet", "code", "code_snippet", "quoted_code", "source_line", "line_text", "quotes", "excerpts", "evidences", "snippets"]
)
_ROLE_WORDS = {
    Role.DOC_ID: "doc_id source_doc_id document_id document source doc doc_ids sources source_doc_ids documents "
                 "source_ids docs files file_ids",
    Role.LINE_START: "line line_start start_line line_number lineno",
    Role.LINE_END: "line_end end_line",
    Role.CONFIDENCE: "confidence score probability",
    Role.FIELD: "field field_name attribute property type kind category",
    Role.VALUE: "values canonical_value entity canonical",
    Role.KEY: "key_value",
    Role.DESC: "item product service label",
    Role.EXPLAIN: "explanation reason rationale message summary note notes comment details issue problem "
                  "suggestion recommendation fix statement",
}
ROLE_BY_NAME: dict[str, tuple[Role, ...]] = {w: (role,) for role, words in _ROLE_WORDS.items() for w in words.split()}
ROLE_BY_NAME.update({
    "file": (Role.FILE, Role.DOC_ID), "path": (Role.FILE, Role.DOC_ID), "file_path": (Role.FILE, Role.DOC_ID),
    "filename": (Role.FILE, Role.DOC_ID), "filepath": (Role.FILE, Role.DOC_ID),
    "value": (Role.VALUE, Role.DESC), "name": (Role.VALUE, Role.DESC), "key": (Role.KEY, Role.FIELD),
    "description": (Role.DESC, Role.EXPLAIN), "title": (Role.EXPLAIN, Role.DESC), "text": (Role.EXPLAIN, Role.DESC),
})
# fmt: on


@lru_cache(maxsize=4096)
def roles_of(name: str) -> tuple[Role, ...]:
    """Candidate roles for a field name, most specific first."""
    low = name.lower()
    if low in ROLE_BY_NAME:
        return ROLE_BY_NAME[low]
    if low in EVIDENCE_NAMES or low.endswith(("_evidence", "_quote", "_excerpt")):
        return (Role.EVIDENCE,)
    toks = tokens(low)
    if "doc" in toks or "document" in toks or "source" in toks:
        return (Role.DOC_ID,)
    if "confidence" in toks or "certainty" in toks:
        return (Role.CONFIDENCE,)
    if "quantity" in toks or "count" in toks or "units" in toks or "hours" in toks:
        return (Role.QTY,)
    if "price" in toks or "rate" in toks or ("unit" in toks and "cost" in toks):
        return (Role.UNIT_PRICE,)
    if {"amount", "total", "net", "gross", "subtotal"} & set(toks):
        return (Role.AMOUNT,)
    return ()


@dataclass
class Frame:
    """What one item of an array is about: its source line and the values its fields may take."""

    doc: Doc
    line: Line | None = None
    known: dict[Role, Any] = field(default_factory=dict)
    hints: list[str] = field(default_factory=list)
    per_doc: list[Frame] = field(default_factory=list)
    top: bool = False
    named: dict[str, Any] = field(default_factory=dict)


SEVERITY_HINTS = {
    "security": ["critical", "high", "error", "major", "security", "vulnerability"],
    "error-handling": ["medium", "warning", "moderate", "major", "bug", "error_handling", "reliability"],
    "maintainability": ["low", "info", "minor", "note", "maintainability", "todo", "quality"],
    "style": ["low", "info", "minor", "nit", "style", "quality", "maintainability"],
}


def finding_frames(prompt: Prompt) -> list[Frame]:
    frames = []
    for doc in prompt.docs:
        for line, kind, needle in notable_lines(doc):
            file_id = doc.doc_id or (prompt.ids[0] if prompt.ids else "document")
            known = {
                Role.FILE: file_id,
                Role.DOC_ID: file_id,
                Role.LINE_START: line.number,
                Role.LINE_END: line.number,
                Role.EVIDENCE: line,
                Role.EXPLAIN: f"{kind}: line {line.number} contains `{needle}`",
                Role.CONFIDENCE: 0.9,
                Role.FIELD: kind,
            }
            frames.append(Frame(doc, line, known, [kind, *SEVERITY_HINTS[kind]]))
    return frames[:50]


def row_frames(prompt: Prompt) -> list[Frame]:
    frames = []
    for doc in prompt.docs:
        if doc.text.lstrip().startswith(("{", "[")):
            frames.extend(_json_rows(doc))
            continue
        values = {lab.line.number: lab.value for lab in doc.labels}
        for line in doc.table_rows:
            text = values.get(line.number, line.text).lstrip("-*•| \t")
            if "|" in text:
                desc = next((seg.strip() for seg in text.split("|") if seg.strip()), text)
            else:
                match = NUMBER.search(DATE_RE.sub(" ", text))
                desc = text[: match.start()].rstrip(" :,-=x×@\t") if match and match.start() > 0 else text
            rest = text.split("|", 1)[1] if "|" in text else text[len(desc) :]
            nums = numbers_in(rest) or line.numbers
            qty, unit, amount = 1.0, None, nums[-1]
            low = line.text.lower()
            if len(nums) >= 3:
                qty, unit = nums[0], nums[1]
            elif len(nums) == 2 and (" x " in low or "×" in low or "@" in low or float(nums[0]).is_integer()):
                qty = nums[0]
                unit = round(amount / qty, 2) if qty else amount
            known = {
                Role.DESC: desc or text,
                Role.VALUE: desc or text,
                Role.QTY: qty,
                Role.UNIT_PRICE: unit if unit is not None else amount,
                Role.AMOUNT: amount,
                Role.EVIDENCE: line,
                Role.CONFIDENCE: 0.9,
                Role.DOC_ID: doc.doc_id,
                Role.FILE: doc.doc_id,
                Role.LINE_START: line.number,
                Role.LINE_END: line.number,
            }
            frames.append(Frame(doc, line, known))
    return frames[:50]


def _json_rows(doc: Doc) -> list[Frame]:
    """Line items of a JSON document: the objects of its first list of objects."""
    try:
        obj = json.loads(doc.text)
    except ValueError:
        return []
    rows = (
        next((v for v in obj.values() if isinstance(v, list) and v and isinstance(v[0], dict)), [])
        if isinstance(obj, dict)
        else obj
    )
    frames = []
    for item in rows[:50] if isinstance(rows, list) else []:
        if not isinstance(item, dict):
            continue
        named: dict[str, Any] = {}
        _flatten(item, "", named)
        first = next((v for v in named.values() if isinstance(v, str) and v), None)
        quoted = json.dumps(first, ensure_ascii=False) if first else None
        line = next((ln for ln in doc.lines if quoted and quoted in ln.text), None)
        known: dict[Role, Any] = {Role.DESC: first, Role.CONFIDENCE: 0.9, Role.DOC_ID: doc.doc_id}
        if line is not None:
            known.update({Role.EVIDENCE: line, Role.LINE_START: line.number, Role.LINE_END: line.number})
        frames.append(Frame(doc, line, known, named=named))
    return frames


def _norm(value: Any) -> str:
    if isinstance(value, int | float):
        return f"{float(value):.4f}"
    return str(value).strip().casefold()


def _by_doc(prompt: Prompt) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for doc_id, record in prompt.records:
        if "__sub" not in record:
            out.setdefault(doc_id, record)
    return out


def _evidence_for(prompt: Prompt, doc_id: str, record: dict[str, Any], name: str) -> Line | str | None:
    ev = record.get(name + ".__evidence", record.get("__evidence"))
    if isinstance(ev, str) and ev.strip() and ev in prompt.full_text:
        return ev
    value = str(record.get(name, ""))
    for doc in prompt.docs:
        if doc.doc_id == doc_id and value:
            return next((line for line in doc.lines if value in line.text), None)
    return None


def _member_frames(prompt: Prompt, items: list[tuple[str, dict[str, Any]]], name: str) -> list[Frame]:
    frames = []
    for doc_id, record in items:
        doc = next((d for d in prompt.docs if d.doc_id == doc_id), prompt.docs[0])
        ev = _evidence_for(prompt, doc_id, record, name)
        known = {
            Role.DOC_ID: doc_id,
            Role.FILE: doc_id,
            Role.VALUE: record.get(name),
            Role.FIELD: _leaf(name),
            Role.DESC: record.get(name),
            Role.CONFIDENCE: 0.9,
        }
        if ev is not None:
            known[Role.EVIDENCE] = ev
        named = {_leaf(k): v for k, v in record.items() if "__" not in k}
        frames.append(Frame(doc, ev if isinstance(ev, Line) else None, known, named=named))
    return frames


def _leaf(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _group_frame(prompt: Prompt, members: list[tuple[str, dict[str, Any]]], name: str, explain: str) -> Frame:
    per_doc = _member_frames(prompt, members, name)
    known: dict[Role, Any] = {
        Role.FIELD: _leaf(name),
        Role.VALUE: [f.known[Role.VALUE] for f in per_doc],
        Role.DOC_ID: [d for d, _ in members],
        Role.EXPLAIN: explain,
        Role.CONFIDENCE: 0.9,
        Role.DESC: members[0][1].get(name),
    }
    evidence = next((f.known[Role.EVIDENCE] for f in per_doc if Role.EVIDENCE in f.known), None)
    if evidence is not None:
        known[Role.EVIDENCE] = evidence
    named = {k: v for k, v in per_doc[0].named.items() if roles_of(k)[:1] != (Role.EXPLAIN,)}
    named[_leaf(name)] = members[0][1].get(name)
    return Frame(per_doc[0].doc, per_doc[0].line, known, per_doc=per_doc, named=named)


def _is_meta(name: str) -> bool:
    # `state` is docmill's own bookkeeping in integration records, not something documents say
    return (
        "__" in name or name == "state" or bool({Role.CONFIDENCE, Role.EVIDENCE} & set(roles_of(_leaf(name))))
    )


def claim_frames(
    prompt: Prompt, fields: set[str] | None = None, min_docs: int = 2, sub: bool = False
) -> list[Frame]:
    """String values shared by `min_docs`+ documents' records (or nested sub-records), per field."""
    records = [(d, r) for d, r in prompt.records if "__sub" in r] if sub else list(_by_doc(prompt).items())
    groups: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for doc_id, record in records:
        for name, value in record.items():
            if fields is not None and _leaf(name) not in fields:
                continue
            if isinstance(value, str) and value.strip() and not _is_meta(name):
                groups.setdefault((name, _norm(value)), {}).setdefault(doc_id, record)
    frames = []
    for (name, _), by_doc in groups.items():
        members = list(by_doc.items())
        if len(members) >= min_docs:
            value = members[0][1][name]
            shown = ", ".join(d for d, _ in members[:5]) + (
                f" and {len(members) - 5} more" if len(members) > 5 else ""
            )
            explain = f"{_leaf(name)} {value!s} appears in {len(members)} documents: {shown}"
            frames.append(_group_frame(prompt, members, name, explain))
    return frames[:50]


def conflict_frames(prompt: Prompt) -> list[Frame]:
    """Records sharing a key field (name has `number` or `id`) whose other fields differ."""
    records = _by_doc(prompt)
    frames = []
    names = list(dict.fromkeys(n for r in records.values() for n in r if not _is_meta(n)))
    keys = [n for n in names if {"number", "id"} & set(tokens(_leaf(n))) or _leaf(n).endswith("id")]
    for key in keys:
        groups: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for doc_id, record in records.items():
            if record.get(key) not in (None, ""):
                groups.setdefault(_norm(record[key]), []).append((doc_id, record))
        for members in groups.values():
            if len(members) < 2:
                continue
            for name in names:
                values = {_norm(r.get(name)) for _, r in members if r.get(name) is not None}
                if name == key or len(values) < 2:
                    continue
                shown = " vs ".join(f"{r.get(name)} ({d})" for d, r in members)
                explain = f"{_leaf(key)} {members[0][1][key]}: {_leaf(name)} differs: {shown}"
                frame = _group_frame(prompt, members, name, explain)
                frame.known[Role.KEY] = members[0][1][key]
                frames.append(frame)
    return frames[:50]


def code_names(doc: Doc, kind: str) -> list[str]:
    """Top-level names a source file defines (`exports`) or the modules it uses (`imports`)."""
    out: list[str] = []
    for raw in doc.text.split("\n"):
        words = raw.replace("(", " ").replace(":", " ").replace(",", " ").split()
        if len(words) < 2 or raw[:1].isspace():
            continue
        if kind == "imports" and words[0] in ("import", "from", "require", "use", "#include"):
            out.append(words[1].strip(";\"'<>"))
        elif kind == "exports" and words[0] in ("def", "class", "function", "func", "fn", "pub", "export"):
            skip = words[1] in ("def", "fn", "function", "class", "const", "async") and len(words) > 2
            out.append(words[2] if skip else words[1])
    return list(dict.fromkeys(out))[:50]

"""What a schema field is for, decided from its name alone."""

from __future__ import annotations

from enum import StrEnum
from functools import lru_cache

from emulator.words import tokens


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

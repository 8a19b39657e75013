"""Words of labels and field names: lowercase tokens with synonyms folded, weak words set apart."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

WORD = re.compile(r"[a-z0-9#]+")
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
# fmt: on


@lru_cache(maxsize=8192)
def tokens(text: str) -> tuple[str, ...]:
    """Lowercase word tokens of a label or field name, synonyms folded, stopwords and digits dropped."""
    words = WORD.findall(text.replace("_", " ").lower())
    return tuple(SYNONYMS.get(w, w) for w in words if w not in STOPWORDS and not w.isdigit())


def strong(toks: Sequence[str]) -> Sequence[str]:
    """`toks` without weak words (name, value, ...) unless nothing else is left."""
    kept = [t for t in toks if t not in WEAK]
    return kept or toks


def word_set(text: str) -> frozenset[str]:
    """The space-separated words of `text` as a set (for the word lists that steer the filler)."""
    return frozenset(text.split())

"""Values stated in sentences, not in `Label: value` lines: "It is effective as of March 1, 2026",
"governed by the laws of England and Wales", "an annual fee of EUR 48,000.00".

How the emulated model reads prose, deterministically and no kinder than the API (it misses what a
sentence does not name): a field is looked up by its words (its name's strong tokens, the words of
the value's kind such as `date` or `amount` left out, each word matched by its stem so `governing
law` finds "governed by the laws"). A sentence that holds every such word states the field; the value
is what follows the last of them in that sentence: the first date (as YYYY-MM-DD), the first amount,
or for text the phrase up to the next comma or full stop, without its leading small words. The
sentence is the evidence: a slice of the document, which contains the value as the document writes it.
A field no sentence names stays unfound (null where the schema allows it). Used by
emulator.schema_fill for the top-level fields of a per-file request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from emulator.grounding import Doc, Line
from emulator.values import parse_number
from emulator.words import strong, tokens, word_set

SENTENCE_END = re.compile(r"(?<=[.;!?])\s+(?=[A-Z0-9\"'(])")
_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
DATE = re.compile(
    rf"\b\d{{4}}-\d{{1,2}}-\d{{1,2}}\b|\b\d{{1,2}}[./]\d{{1,2}}[./]\d{{4}}\b"
    rf"|\b\d{{1,2}}(?:st|nd|rd|th)?(?:\s+of)?\s+{_MONTH},?\s+\d{{4}}\b"
    rf"|\b{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}\b",
    re.IGNORECASE,
)
AMOUNT = re.compile(
    r"(?<![\w.,])\d{1,3}(?:[,.\u00a0 ]\d{3})+(?:[.,]\d{1,2})?(?![\w])|(?<![\w.,])\d+(?:[.,]\d{1,2})?(?![\w%])"
)
KIND_WORDS = frozenset({"date", "day", "amount", "value", "number", "text", "name", "sum"})
SMALL = word_set(  # the small words a phrase neither starts nor ends with
    "a an the of by is are be been shall will to as at on in under from per its their this that which with for"
)
MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
MONTHS = {m: i for i, m in enumerate(MONTH_NAMES, start=1)}
WORD = re.compile(r"[A-Za-z0-9]+")


@dataclass(frozen=True)
class Found:
    value: str | float
    line: Line  # the sentence: evidence, verbatim


def stem(word: str) -> str:
    """A crude stem: `governed`, `governing`, `governs` -> `govern`; `laws` -> `law`."""
    w = word.lower()
    for suffix in ("ing", "ed", "es", "s"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            return w[: -len(suffix)]
    return w


def sentences(doc: Doc) -> list[Line]:
    """The document's sentences, each a slice of one of its lines (labelled lines are skipped)."""
    labelled = {lab.line.number for lab in doc.labels}
    out = []
    for line in doc.lines:
        if line.number in labelled:
            continue
        start = 0
        for cut in [*(m.start() for m in SENTENCE_END.finditer(line.text)), len(line.text)]:
            piece = line.text[start:cut].strip()
            if piece:
                out.append(Line(line.doc_id, line.number, piece))
            start = cut
    return out


def _after(sentence: str, keys: list[str]) -> int | None:
    """Where the text after the last of the field's words begins (None: not every word is there)."""
    ends: dict[str, int] = {}
    for m in WORD.finditer(sentence):
        s = stem(m.group())
        if s in keys:
            ends[s] = m.end()
    return max(ends.values()) if all(k in ends for k in keys) else None


def iso_day(text: str) -> str | None:
    """`March 1, 2026`, `1 March 2026`, `01.03.2026` (day first), `2026-03-01` as YYYY-MM-DD."""
    nums = [int(x) for x in re.findall(r"\d+", text)]
    month = next(
        (MONTHS[w[:3].lower()] for w in re.findall(r"[A-Za-z]+", text) if w[:3].lower() in MONTHS), None
    )
    if month is not None and len(nums) == 2:
        day, year = (nums[0], nums[1]) if nums[1] > 31 else (nums[1], nums[0])
    elif len(nums) == 3 and nums[0] > 31:
        year, month, day = nums
    elif len(nums) == 3:
        day, month, year = nums
    else:
        return None
    if not (1 <= (month or 0) <= 12 and 1 <= day <= 31):
        return None
    return f"{year:04d}-{month:02d}-{day:02d}"


def _phrase(rest: str) -> str | None:
    """The phrase a text field takes: up to a comma, semicolon, bracket or full stop, without the
    small words it starts or ends with; at most eight words."""
    head = re.split(r"[,;:(]|\.(?:\s|$)", rest, maxsplit=1)[0]
    words = head.split()
    while words and words[0].lower().strip("\"'") in SMALL:
        words.pop(0)
    while words and words[-1].lower().strip("\"'.") in SMALL:
        words.pop()
    text = " ".join(words[:8]).strip(" \"'")
    return text or None


def find(doc: Doc, name: str, kind: str) -> Found | None:
    """The value of field `name` stated in a sentence of `doc`: kind `date`, `number` or `text`."""
    keys = [stem(t) for t in strong(tokens(name)) if t not in KIND_WORDS]
    if not keys:
        return None
    for sentence in sentences(doc):
        at = _after(sentence.text, keys)
        if at is None:
            continue
        rest = sentence.text[at:]
        if kind == "date":
            m = DATE.search(rest)
            day = iso_day(m.group()) if m else None
            if day:
                return Found(day, sentence)
        elif kind == "number":
            m = AMOUNT.search(rest)
            value = parse_number(m.group()) if m else None
            if value is not None:
                return Found(value, sentence)
        else:
            phrase = _phrase(rest)
            if phrase and not DATE.search(phrase):
                return Found(phrase, sentence)
    return None

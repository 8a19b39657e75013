"""Does the evidence support the value? (a leaf; the gate's second evidence rule)

The first rule (tasks.per_file.gate.evidence_flags) proves that an excerpt occurs in the document: it
was not invented. It does not prove that the excerpt is about the field: `Total: USD 4,828.00` occurs
verbatim in a purchase order, and was accepted as the evidence of an effective date. This rule checks,
for every `{value, evidence}` pair (at any depth, `evidence` being a declared evidence field), that the
evidence contains the value in a normalised form:

- a number (`4828.0`): some amount written in the evidence equals it, however written (`4,828.00`,
  `4.828,00`, `USD 4828`, `(12.00)` for -12; to half a cent, or 1e-6 of the value);
- a date (a string `YYYY-MM-DD`, or a date-time): some date in the evidence is that day (`2026-03-01`,
  `01.03.2026`, `03/01/2026`, `1 March 2026`, `March 1st, 2026`, `Mar 1, 2026`; day and month read both
  ways when ambiguous);
- other text: every word and number of the value occurs in the evidence, ignoring case, accents,
  punctuation and spacing (`Acme GmbH` in `Vendor: ACME GmbH.`; `New York` in `the laws of the State of
  New York`).
Booleans, null values and empty evidence are not checked (a null value says "not stated"). What it
cannot prove: that the excerpt is the right mention of a value that appears twice, or a value the
model computed (a sum, a currency read from `$`): such an answer is repaired or goes to review as
`evidence_unsupported`, where a person decides. docs/recipes.md states the rule and its measured
false rejections.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import date
from typing import Any

_MONTH_NAMES = (
    "jan january",
    "feb february",
    "mar march",
    "apr april",
    "may",
    "jun june",
    "jul july",
    "aug august",
    "sep sept september",
    "oct october",
    "nov november",
    "dec december",
)
MONTHS = {m: i + 1 for i, names in enumerate(_MONTH_NAMES) for m in names.split()}
_MONTH = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
NUMERIC_DATE = re.compile(r"(?<!\d)(\d{1,4})[./-](\d{1,2})[./-](\d{1,4})(?!\d)")
DAY_MONTH_YEAR = re.compile(rf"(?<!\d){_DAY}(?:\s+of)?\s+{_MONTH},?\s+(\d{{4}})", re.IGNORECASE)
MONTH_DAY_YEAR = re.compile(rf"{_MONTH}\s+{_DAY},?\s+(\d{{4}})", re.IGNORECASE)
ISO_VALUE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?:[T ][\d:.]+(?:Z|[+-]\d{2}:?\d{2})?)?$")
AMOUNT = re.compile(r"\(?-?\d[\d,. '\u00a0\u202f]*\d\)?|\(?-?\d\)?")
WORD = re.compile(r"[^\W_]+")


def _day(y: int, m: int, d: int) -> date | None:
    if y < 100:
        y += 2000
    try:
        return date(y, m, d)
    except ValueError:
        return None


def dates_in(text: str) -> set[date]:
    """Every day a date expression in `text` can mean (both readings of `03/01/2026`)."""
    found: set[date] = set()
    for a, b, c in NUMERIC_DATE.findall(text):
        x, y, z = int(a), int(b), int(c)
        # 2026-03-01 (year first), else 01.03.2026 (day first) or 03/01/2026 (month first)
        candidates = [_day(x, y, z)] if len(a) == 4 else [_day(z, y, x), _day(z, x, y)]
        found.update(d for d in candidates if d is not None)
    for d, mon, y in DAY_MONTH_YEAR.findall(text):
        found.update(x for x in [_day(int(y), MONTHS[mon.lower()[:3]], int(d))] if x)
    for mon, d, y in MONTH_DAY_YEAR.findall(text):
        found.update(x for x in [_day(int(y), MONTHS[mon.lower()[:3]], int(d))] if x)
    return found


def _readings(raw: str) -> set[float]:
    """The amounts `raw` can mean: `1,234.50`, `1.234,50`, `1 234,50`, `(12.00)` = -12."""
    neg = raw.startswith("-") or (raw.startswith("(") and raw.endswith(")"))
    digits = re.sub(r"[^\d,.]", "", raw)
    out: set[float] = set()
    for thousands, decimal in ((",", "."), (".", ","), ("", ".")):
        text = digits.replace(thousands, "") if thousands else digits
        if decimal == ",":
            text = text.replace(",", ".")
        if text.count(".") > 1:
            continue
        try:
            value = float(text)
        except ValueError:
            continue
        out.add(-value if neg else value)
    return out


def amounts_in(text: str) -> set[float]:
    """Every amount a number in `text` can mean (dates left out)."""
    cleared = NUMERIC_DATE.sub(" ", text)
    found: set[float] = set()
    for raw in AMOUNT.findall(cleared):
        found |= _readings(raw.strip())
        for part in re.split(r"[ '\u00a0\u202f]", raw.strip()):  # `2 x 17.62`: each number on its own
            if part:
                found |= _readings(part)
    return found


def words(text: str) -> list[str]:
    """Lowercase words and numbers without accents or punctuation."""
    plain = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    return WORD.findall(plain)


def supports(value: Any, evidence: str) -> bool:
    """Whether `evidence` contains `value` in a normalised form (the module docstring's rule)."""
    if isinstance(value, bool) or value is None or not evidence.strip():
        return True
    if isinstance(value, int | float):
        return any(abs(a - value) <= max(0.005, abs(value) * 1e-6) for a in amounts_in(evidence))
    text = str(value).strip()
    iso = ISO_VALUE.match(text)
    if iso:
        day = _day(*map(int, iso.groups()))
        if day is not None and day in dates_in(evidence):
            return True
    have = set(words(evidence))
    return all(w in have for w in words(text))


def support_flags(output: Any, evidence_fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """A flag for every `{value, evidence}` pair whose evidence does not contain its value."""
    checked = "evidence" in evidence_fields  # the pair's name (tasks.recipes.shape holds recipes to it)
    flags: list[dict[str, Any]] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            excerpt = node.get("evidence")
            if (
                checked
                and "value" in node
                and isinstance(excerpt, str)
                and not supports(node["value"], excerpt)
            ):
                flags.append(
                    {
                        "path": f"{path}.evidence",
                        "excerpt": excerpt,
                        "value": node["value"],
                        "problem": "evidence_unsupported",
                    }
                )
            for k, v in node.items():
                walk(v, f"{path}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")

    walk(output, "$")
    return flags

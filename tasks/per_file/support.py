"""Does the evidence state the value? (a leaf; the gate's second evidence rule, invariant 18)

The gate's first rule (tasks.per_file.gate.evidence_report) proves that an excerpt occurs in the
document text, not in docmill's wrapper: it was not invented. It does not prove that the excerpt is
about the field (`Total: USD 4,828.00` occurs verbatim in a purchase order, and was accepted as the
evidence of an effective date). This rule checks, for every `{value, evidence}` pair (at any depth),
that the evidence states the value:

- a non-null value (other than a boolean) needs a non-empty excerpt (a value read from docmill's
  wrapper, such as the document id, has none);
- a number (`4828.0`): some number written in the evidence, read as a whole token, is it (`4,828.00`,
  `4.828,00`, `4 828,00`, `4'828.00`, `USD 4828`, `(12.00)` for -12, Indian `3,19,000.00`; to half a
  cent). A separator is a thousands separator only before groups of three digits, so `179.00` is never
  17900; a number is never read in parts (`987 654 321.50` is not 987), the numbers of a date or a
  time are not amounts (`August 3 , 2014` does not state 3), and a number glued into an identifier
  (`VF1005193039SCONL`, `INV-2023`, `#562`, `n°562044387`) is not an amount;
- a date (a string `YYYY-MM-DD`, or a date-time): some date in the evidence is that day, numeric
  (`2026-03-01`, `01.03.2026`, `03/01/2026` and `01-03-26` read both ways when day and month could
  swap, `2026年3月1日`) or with the month's name in any language of `MONTH_LOCALES` (`1 March 2026`,
  `March 1st, 2026`, `7. Mai 2014`, `1er mars 2026`, `1 de marzo de 2026`, `20-MAR-18`);
- in a date field (`date_paths`) the value must be written `YYYY-MM-DD` (a date-time is accepted);
  any other string is refused, never normalised, so the stored value is always ISO;
- other text: every word and number of the value is a whole word of the evidence, ignoring case,
  accents, punctuation and spacing (`Acme GmbH` in `Vendor: ACME GmbH.`; `562044387` in
  `Facture n°562044387`, but not `5620`).
Booleans and null values are not checked. What it cannot prove: that the excerpt is the right mention
of a value that appears twice, which reading of `03/04/2026` the document meant (both are accepted),
or a value the model computed: such an answer is repaired or goes to review as `evidence_unsupported`.
docs/recipes.md states the rule and its measured accept and refuse rates (bench/gate.py).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter
from datetime import date
from typing import Any

# Month names from babel (CLDR) for the European languages of Latin, Cyrillic and Greek script, and
# Indonesian and Malay (space-separated codes); `_months()` builds the table once, on the first date
# that needs it. English is always loaded (`MONTHS`).
MONTH_LOCALES = "en de fr nl es it pt pl sv da nb nn fi cs sk ro hu tr id ms ca hr sl et lv lt ga cy eu gl is"
MONTH_LOCALES += " af ru uk bg sr el"
_ENGLISH = "jan january|feb february|mar march|apr april|may|jun june|jul july|aug august|sep sept september"
_ENGLISH += "|oct october|nov november|dec december"
MONTHS = {m: i + 1 for i, names in enumerate(_ENGLISH.split("|")) for m in names.split()}


def fold(text: str) -> str:
    """Lowercase without accents (`März` -> `marz`, `Février` -> `fevrier`)."""
    if text.isascii():
        return text.lower()
    plain = unicodedata.normalize("NFKD", text.casefold())
    return "".join(c for c in plain if not unicodedata.combining(c))


@functools.cache
def _months() -> dict[str, frozenset[int]]:
    """Every month name and abbreviation of MONTH_LOCALES (folded, without a trailing dot) -> the
    months it can name (`listopad` is November in Polish, October in Croatian)."""
    from babel import Locale  # ~0.5 s of CLDR data, loaded on the first word the English table does not know

    table: dict[str, set[int]] = {k: {v} for k, v in MONTHS.items()}
    for code in MONTH_LOCALES.split():
        months = Locale.parse(code).months
        for context in ("format", "stand-alone"):
            for width in ("wide", "abbreviated"):
                for number, name in months[context][width].items():
                    key = fold(name).strip().rstrip(".")
                    key = re.sub(r"^(?:de |d'|d\u2019)", "", key)  # Catalan `de gener`, `d'abril`
                    if len(key) >= 3:
                        table.setdefault(key, set()).add(number)
                        if len(key) > 4:  # `sept.`, `janv.`: the 4-letter stem many documents use
                            table.setdefault(key[:4], set()).add(number)
    return {k: frozenset(v) for k, v in table.items()}


def month_numbers(word: str) -> frozenset[int]:
    """The months a word names (empty when it names none)."""
    key = fold(word).rstrip(".")
    if key in MONTHS:
        return frozenset((MONTHS[key],))
    if not key.isalpha() or len(key) < 3:
        return frozenset()
    return _months().get(key, frozenset())


_NAME = r"([^\W\d_]{3,}\.?)"  # a word that may be a month's name (checked against the table)
_ORD = r"(?:st|nd|rd|th|er|re|e|º|°|\.)?"
_YEAR = r"(\d{4}|'\d{2}|\d{2})"
_FILL = r"[\s,.\-/]*(?:(?:de|del|of|di|du|im|den|el)\s+)?"
NUMERIC_DATE = re.compile(
    r"(?<!\d)(?<!\d[.,])(\d{1,4})\s?([./-])\s?(\d{1,2})\s?\2\s?(\d{1,4})(?![\d]|[.,]\d)"
)
DAY_MONTH_YEAR = re.compile(
    rf"(?<!\w)(?<!\d[.,])(\d{{1,2}}){_ORD}[\s\-/.]*(?:(?:day\s+)?(?:de|of|di|del)\s+)?{_NAME}{_FILL}{_YEAR}(?!\w|[.,]\d)",
    re.IGNORECASE,
)
MONTH_DAY_YEAR = re.compile(
    rf"(?<![^\W\d_]){_NAME}[\s\-/.]*(\d{{1,2}})(?:st|nd|rd|th)?(?!\d|[.,]\d{{1,2}}(?!\d))[\s,.\-/]*{_YEAR}(?!\w|[.,]\d)",
    re.IGNORECASE,
)
YEAR_MONTH_DAY = re.compile(
    rf"(?<!\w)(?<!\d[.,])(\d{{4}})[\s.,\-/]*{_NAME}[\s.,\-/]*(\d{{1,2}})(?!\d)", re.IGNORECASE
)
DAY_RANGE = re.compile(  # `du 1er au 31 Juillet 2015`, `1-31 March 2026`: the first day too
    rf"(?<!\w)(?<!\d[.,])(\d{{1,2}}){_ORD}\s*(?:-|\u2013|au|to|bis|al|tot|till|until|through)\s*"
    rf"(\d{{1,2}}){_ORD}[\s\-/.]*(?:(?:de|of|di|del)\s+)?{_NAME}{_FILL}{_YEAR}(?!\w|[.,]\d)",
    re.IGNORECASE,
)
CJK_DATE = re.compile(r"(\d{4})\s*[年년]\s*(\d{1,2})\s*[月월]\s*(\d{1,2})\s*[日일]?")
TIME = re.compile(r"(?<!\d)\d{1,2}[:h]\d{2}(?::\d{2})?(?:\s*[ap]\.?m\.?)?(?![\d])", re.IGNORECASE)
ISO_VALUE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?:[T ][\d:.]+(?:Z|[+-]\d{2}:?\d{2})?)?$")
WORD = re.compile(r"[^\W_]+")
_DIGIT = re.compile(r"\d")
_ORDINAL_MARKS = str.maketrans({"º": " ", "ª": " ", "°": " ", "№": " "})


def _day(y: int, m: int, d: int) -> date | None:
    if y < 100:
        y += 2000 if y < 70 else 1900
    try:
        return date(y, m, d)
    except ValueError:
        return None


def _days(year: int, months: frozenset[int] | set[int], days: tuple[int, ...]) -> set[date]:
    found = (_day(year, month, day) for month in months for day in days)
    return {d for d in found if d is not None}


# (pattern, group of the year, of the month's name, of the day(s))
_NAMED: tuple[tuple[re.Pattern[str], int, int, tuple[int, ...]], ...] = (
    (DAY_MONTH_YEAR, 3, 2, (1,)),
    (MONTH_DAY_YEAR, 3, 1, (2,)),
    (YEAR_MONTH_DAY, 1, 2, (3,)),
    (DAY_RANGE, 4, 3, (1, 2)),  # `du 1er au 31 Juillet 2015` states both days
)


def date_spans(text: str) -> list[tuple[int, int, set[date]]]:
    """Every date expression in `text`: (start, end, the days it can mean)."""
    out: list[tuple[int, int, set[date]]] = []
    if not _DIGIT.search(text):
        return out
    for m in NUMERIC_DATE.finditer(text):
        a, _sep, b, c = m.groups()
        x, y, z = int(a), int(b), int(c)
        if len(a) == 4:  # 2026-03-01
            found = {_day(x, y, z)}
        elif len(c) in (2, 4):  # 01.03.2026 (day first) or 03/01/2026 (month first)
            found = {_day(z, y, x), _day(z, x, y)}
        else:
            continue
        days = {d for d in found if d is not None}
        if days:
            out.append((m.start(), m.end(), days))
    for pattern, gy, gm, gd in _NAMED:
        pos = 0
        while (hit := pattern.search(text, pos)) is not None:
            pos = hit.start() + 1  # overlapping candidates: `Total 12 items May 3, 2014`
            named = month_numbers(hit.group(gm))
            days = _days(int(hit.group(gy).lstrip("'")), named, tuple(int(hit.group(g)) for g in gd))
            if days:
                out.append((hit.start(), hit.end(), days))
                pos = hit.end()
    for m in CJK_DATE.finditer(text):
        days = _days(int(m.group(1)), {int(m.group(2))}, (int(m.group(3)),))
        if days:
            out.append((m.start(), m.end(), days))
    return out


def dates_in(text: str) -> set[date]:
    """Every day a date expression in `text` can mean (both readings of `03/01/2026`)."""
    return {d for _, _, days in date_spans(text) for d in days}


# A run of digits and the separators a number may hold; what it means is decided by `_readings`.
NUMBER_RUN = re.compile(r"\d(?:[\d.,'\u2019\u00a0\u202f ]*\d)?")
_GROUPED = re.compile(r"\d{1,3}(?:([.,'\u2019\u00a0\u202f])\d{3})(?:\1\d{3})*")
_INDIAN = re.compile(r"\d{1,2}(?:,\d{2})+,\d{3}")
_ID_BEFORE = frozenset("#№°º/_\\@")
_ID_AFTER = frozenset("/_\\@")


def _integer_part(text: str) -> int | None:
    """`1,234` / `1.234.567` / `1'234` / `3,19,000` grouped by threes (or Indian lakhs) -> int."""
    if text.isdigit():
        return int(text)
    if text[:1] != "0" and (_GROUPED.fullmatch(text) or _INDIAN.fullmatch(text)):
        return int(re.sub(r"\D", "", text))
    return None


def _part_readings(text: str) -> set[float]:
    """The numbers one space-free token can be: digits grouped by threes (`1,234`, `1.234.567`), or a
    decimal mark (the last `.` or `,`, used once) after such digits (`4.828,00`, `179.00`: never
    17900). `1.234` is both 1234 and 1.234: only the document's locale could tell."""
    text = text.rstrip(".,'\u2019")
    out: set[float] = set()
    whole = _integer_part(text)
    if whole is not None:
        out.add(float(whole))
    cut = max(text.rfind("."), text.rfind(","))
    if cut > 0:
        head, tail = text[:cut], text[cut + 1 :]
        if tail.isdigit() and text[cut] not in head:
            lead = _integer_part(head)
            if lead is not None:
                out.add(float(f"{lead}.{tail}"))
    return out


def _readings(run: str) -> set[float]:
    """The numbers a run of digits and separators can mean, each read as a whole token: a run split by
    spaces is one grouped number when every group after the first has three digits (`4 828,00`,
    `987 654 321.50`); two such groups may also be two numbers side by side (`1 250.00` in a table
    row: a quantity, then a price); more may not (`987 654 321.50` is never 987)."""
    parts = run.split(" ")
    if len(parts) == 1:
        return _part_readings(run)
    grouped = (
        parts[0].isdigit()
        and len(parts[0]) <= 3
        and all(p.isdigit() and len(p) == 3 for p in parts[1:-1])
        and re.fullmatch(r"\d{3}(?:[.,]\d+)?[.,]?", parts[-1]) is not None
    )
    out: set[float] = set()
    if grouped:
        out |= _part_readings("".join(parts))
        if len(parts) > 2:
            return out
    for part in parts:
        out |= _part_readings(part)
    return out


_UNSPACED = "\u2e80"  # CJK and the scripts after it write no spaces between words
_DECIMAL_LIKE = re.compile(r"[.,]\d{1,2}$|\d[.,'\u2019\u00a0\u202f]\d{3}")


def _is_id(text: str, start: int, end: int) -> bool:
    """Whether the number at text[start:end] is part of an identifier, not an amount: glued between
    letters (`VF1005193039SCONL`), after `#`, `n°` or `/`, joined by `-` or `.` to a word (`INV-2023`,
    `no.562`, `USG-99-`), or glued to letters without a decimal part (`SH01`, `A4`); glued to a
    currency with one it is an amount (`RM9.00`, `Rs.319.00`, `17.62EUR`)."""
    before = text[start - 1] if start else " "
    after = text[end] if end < len(text) else " "
    if before in _ID_BEFORE or after in _ID_AFTER:
        return True
    amount_like = _DECIMAL_LIKE.search(text, start, end) is not None
    if _letter(before):
        return _letter(after) or after == "-" or not amount_like
    if before in "-." and start >= 2 and text[start - 2].isalnum():
        return not (before == "." and _letter(text[start - 2]) and amount_like)  # `Rs.319.00`
    return after == "-" and end + 1 < len(text) and text[end + 1].isalnum()


def _letter(c: str) -> bool:
    """A letter an identifier is made of; CJK text glues words to numbers (`金額1,234円`), so its
    characters are not."""
    return c.isalpha() and c < _UNSPACED


def amounts_in(text: str) -> set[float]:
    """Every number `text` states as a whole token (dates, times and identifiers left out)."""
    chars = list(text)
    for start, end, _ in date_spans(text):
        chars[start:end] = " " * (end - start)
    cleared = TIME.sub(lambda m: " " * len(m.group()), "".join(chars))
    found: set[float] = set()
    for m in NUMBER_RUN.finditer(cleared):
        raw = m.group()
        end = m.end()
        if _is_id(cleared, m.start(), end):
            continue
        before = cleared[: m.start()].rstrip(" $€£¥₹")
        negative = (
            (before.endswith(("-", "\u2212")) and not before[:-1][-1:].isalnum())
            or (before.endswith("(") and cleared[end:].lstrip(" $€£¥₹").startswith(")"))
            or (cleared[end : end + 1] == "-" and not cleared[end + 1 : end + 2].isalnum())
        )
        for value in _readings(raw):
            found.add(-value if negative else value)
    return found


def words(text: str) -> list[str]:
    """Lowercase words and numbers without accents or punctuation (`n°562044387` -> n, 562044387)."""
    return WORD.findall(fold(text.translate(_ORDINAL_MARKS)))


def iso_day(value: Any) -> date | None:
    """The day `value` is, written YYYY-MM-DD (or as an ISO date-time); None for anything else."""
    m = ISO_VALUE.match(value.strip()) if isinstance(value, str) else None
    return None if m is None else _day(*map(int, m.groups()))


def supports(value: Any, evidence: str | None, *, is_date: bool = False) -> bool:
    """Whether `evidence` states `value` (the module docstring's rule); `is_date` for a date field."""
    if isinstance(value, bool) or value is None or value == "":
        return True
    if evidence is None or not evidence.strip():
        return False
    if isinstance(value, int | float):
        return any(abs(a - value) <= max(0.005, abs(value) * 1e-12) for a in amounts_in(evidence))
    day = iso_day(value)
    if day is not None and day in dates_in(evidence):
        return True
    if is_date:
        return False
    value_words, evidence_words = words(str(value).strip()), words(evidence)
    distinct = set(value_words)
    if len(distinct) == len(value_words) and distinct.issubset(evidence_words):
        return True  # each word once, and each in the evidence: nothing to count
    missing = Counter(value_words) - Counter(evidence_words)
    if not missing or _joined(value_words, evidence):
        return True
    folded = fold(evidence)  # CJK words are not space-separated: found inside a longer run
    return all(
        _joined([word], evidence) or (max(word) >= _UNSPACED and word in folded) for word in missing
    )  # `LP` in `L.P.`, `SA` in `S.A.`


def _joined(value_words: list[str], evidence: str) -> bool:
    """Whether the value, its spacing and punctuation dropped, is written in the evidence with other
    spacing or punctuation (`DE89370400440532013000` in `IBAN DE89 3704 0044 0532 0130 00`, `DE 232
    446 240` in `DE232446240`, `7740001454` in `774-00-01-454`), as a whole: never a part of a word
    (`5620` in `562044387`) nor of an identifier joined by `-`, `.` or `/` (`77400` in
    `774-00-01-454`). A part of an identifier written in spaced groups cannot be told from numbers
    side by side: it passes."""
    compact = "".join(value_words)
    if len(compact) < 2:
        return False
    body = r"[\s\-./]*".join(map(re.escape, compact))
    pattern = rf"(?<![^\W_])(?<![^\W_][\-./]){body}(?![^\W_])(?![\-./][^\W_])"
    return re.search(pattern, fold(evidence)) is not None


def date_paths(schema: dict[str, Any]) -> frozenset[str]:
    """The paths (`$.invoice_date`, `$.items[].due`) of `{value, evidence}` pairs whose value the JSON
    schema declares a date: `format: date` / `date-time`, or a description that asks for `YYYY-MM-DD`."""
    defs: dict[str, Any] = schema.get("$defs") or {}
    found: set[str] = set()

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        ref = node.get("$ref")
        return defs.get(ref.rsplit("/", 1)[-1], {}) if isinstance(ref, str) else node

    def is_date(node: dict[str, Any]) -> bool:
        node = resolve(node)
        alts = [resolve(a) for a in node.get("anyOf") or node.get("oneOf") or [node]]
        described = "YYYY-MM-DD" in str(node.get("description") or "")
        return described or any(a.get("format") in ("date", "date-time") for a in alts)

    def walk(node: dict[str, Any], path: str, depth: int) -> None:
        node = resolve(node)
        if depth > 20:
            return
        for alt in node.get("anyOf") or node.get("oneOf") or []:
            walk(alt, path, depth + 1)
        if node.get("type") == "array" and isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]", depth + 1)
        props = node.get("properties") or {}
        if "value" in props and "evidence" in props and is_date(props["value"]):
            found.add(path)
        for name, sub in props.items():
            walk(sub, f"{path}.{name}", depth + 1)

    walk(schema, "$", 0)
    return frozenset(found)


_INDEX = re.compile(r"\[\d+\]")


def support_flags(
    output: Any, evidence_fields: tuple[str, ...], dates: frozenset[str] = frozenset()
) -> list[dict[str, Any]]:
    """A flag for every `{value, evidence}` pair whose evidence does not state its value (`why`
    says how), `dates` being the pairs that hold a date (`date_paths`)."""
    checked = "evidence" in evidence_fields  # the pair's name (tasks.recipes.shape holds recipes to it)
    flags: list[dict[str, Any]] = []

    def flag(path: str, node: dict[str, Any], why: str) -> None:
        item = {"path": f"{path}.evidence", "excerpt": node.get("evidence"), "value": node["value"]}
        flags.append({**item, "problem": "evidence_unsupported", "why": why})

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            if checked and "value" in node and "evidence" in node:
                value, excerpt = node["value"], node.get("evidence")
                is_date = bool(dates) and _INDEX.sub("[]", path) in dates
                if is_date and value not in (None, "") and iso_day(value) is None:
                    flag(path, node, f"holds {value!r}, not a date written YYYY-MM-DD")
                elif isinstance(excerpt, str | None) and not supports(value, excerpt, is_date=is_date):
                    what = (
                        "is empty, but the value is"
                        if not (excerpt or "").strip()
                        else "does not contain the value"
                    )
                    flag(path, node, f"{what} {value!r}: quote the text that states the value")
            for k, v in node.items():
                walk(v, f"{path}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")

    walk(output, "$")
    return flags

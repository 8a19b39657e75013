"""Amounts and dates as documents write them: `1.234,50`, `(12.00)`, `01.03.2026`, `March 1, 2026`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date, datetime
from email.utils import parsedate_tz

NUMBER = re.compile(r"(?:(?<![A-Za-z0-9])-)?\(?\d(?:[\d,.]*\d)?\)?")
DATE_RE = re.compile(
    r"\b\d{4}-\d{1,2}-\d{1,2}\b|\b\d{1,2}[./-]\d{1,2}[./-]\d{2,4}\b|\b\d{4}/\d{1,2}/\d{1,2}\b"
)
# fmt: off
DATE_FORMATS = (
    "%Y-%m-%d", "%d.%m.%Y", "%d/%m/%Y", "%m/%d/%Y", "%Y/%m/%d", "%d %B %Y", "%d %b %Y", "%B %d, %Y",
    "%b %d, %Y", "%B %d %Y", "%d-%m-%Y", "%Y%m%d",
)
# fmt: on


def parse_number(text: str) -> float | None:
    """The first amount in `text`: `1,234.50`, `1.234,50`, `(12.00)`, `-3`, `EUR 99` (dates skipped)."""
    return next(_amounts(text), None)


def numbers_in(text: str) -> list[float]:
    return list(_amounts(text))


def _amounts(text: str) -> Iterator[float]:
    found = (_amount(raw) for raw in NUMBER.findall(DATE_RE.sub(" ", text)))
    return (value for value in found if value is not None)


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
    stamp = parsedate_tz(text)  # an e-mail's Date header (RFC 5322), which a model reads as a date too
    if stamp is not None and stamp[0] > 0:
        try:
            return date(stamp[0], stamp[1], stamp[2])
        except ValueError:
            pass
    head = text[:10]
    if head != text:
        return parse_date(head)
    return None

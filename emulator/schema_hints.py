"""What a JSON schema says beyond its types: constraints in descriptions, nullability, generic names.

Also `Out`, the filler's result for one value, and how found values are shown as text and dates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from emulator.grounding import Line
from emulator.values import parse_date
from emulator.words import word_set


@dataclass
class Out:
    """A generated value, the document line it came from (for sibling evidence), and whether it was found."""

    value: Any
    line: Line | str | None = None
    found: bool = False


ALNUM = re.compile(r"[^\W_]+")
PATTERN = re.compile(r"[{,] ?pattern: (.+?)(?:, \w+: .*)?\}\s*$")
CONSTRAINTS = re.compile(r"\{([^{}]{1,400})\}\s*$")
# Field names that defer to their parent's name (`total: {value, evidence}` -> value is the total).
GENERIC = word_set("amount content normalized parsed raw str string text val value")
SUMMARY_WORDS = word_set("findings notes highlights summary observations insights")


def effective(name: str, parent: str) -> str:
    """The name a field is looked up by: its parent's when the field's own name is generic."""
    return parent if parent and name.lower() in GENERIC else name


def alnum_key(value: Any) -> str:
    """`value` lowercased with everything but letters and digits dropped (how enum members match)."""
    return "".join(ch for ch in str(value).lower() if ch.isalnum())


def constraints(schema: dict[str, Any]) -> dict[str, float]:
    match = CONSTRAINTS.search(str(schema.get("description") or ""))
    out: dict[str, float] = {}
    for part in match.group(1).split(", ") if match else []:
        key, _, raw = part.partition(": ")
        try:
            out[key.strip()] = float(raw)
        except ValueError:
            continue
    return out


def pattern_of(schema: dict[str, Any]) -> re.Pattern[str] | None:
    match = PATTERN.search(str(schema.get("description") or ""))
    try:
        return re.compile(match.group(1)) if match else None
    except re.error:
        return None


def nullable(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "null" or any(v.get("type") == "null" for v in schema.get("anyOf") or [])


def as_text(value: Any) -> str:
    if isinstance(value, Line):  # a line of a PDF or image names its page, as the prompt asks
        return value.text if value.page is None else f"[page {value.page}] {value.text}"
    if isinstance(value, list):
        shown = [as_text(v) for v in value]
        return shown[0] if len(set(shown)) == 1 else " vs ".join(shown)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def as_date(text: str, fmt: Any) -> str:
    day = parse_date(text) if fmt in ("date", "date-time", "iso-if-date") else None
    if day is None:
        return text
    return day.isoformat() + ("T00:00:00Z" if fmt == "date-time" else "")

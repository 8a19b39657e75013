"""CSV cells a spreadsheet opens as data, never runs as a formula (a leaf).

The OWASP rule for CSV injection: a cell whose text starts with `=`, `+`, `-`, `@`, a tab or a
carriage return is a formula to Excel, LibreOffice and Google Sheets (`=HYPERLINK(...)`,
`-2+3+cmd|' /C calc'!A0`), so it is written with a single quote in front; the spreadsheet shows
the text and drops the quote. A cell that is a plain number (`-12.5`, `+3`, `-1e-05`: what a
number prints as) is left alone: a spreadsheet reads it as that number, not a formula, and CSV has
no types, so quoting it would turn every negative amount into text. Only CSV is escaped: JSONL and
Parquet keep every value exactly as it is.
"""

from __future__ import annotations

import re
from typing import Any

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def safe_cell(value: Any) -> Any:
    """`value` as a CSV cell: None as empty, a formula-like text with `'` in front, the rest as is."""
    if value is None:
        return ""
    if isinstance(value, bool | int | float):
        return value
    text = str(value)
    if text.startswith(FORMULA_START) and not _NUMBER.fullmatch(text):
        return "'" + text
    return value

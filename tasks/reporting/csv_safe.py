"""CSV cells a spreadsheet opens as data, never runs as a formula (a leaf): OWASP's rule for CSV
injection puts a `'` before a cell starting with `=`, `+`, `-`, `@`, a tab or a carriage return
(`=HYPERLINK(...)`, `-2+3+cmd|' /C calc'!A0`); the spreadsheet shows the text without it. A plain
number (`-12.5`, `+3`, `-1e-05`) is left alone: CSV has no types, and quoting would turn every
negative amount into text. JSONL and Parquet keep every value as it is.
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

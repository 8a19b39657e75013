"""The installed `anthropic` SDK's own end-of-life list, read defensively as an extra warning source.

The SDK keeps it in a private module (`anthropic._data`) whose name, shape and content change between
releases (2.15.0 dropped the retired claude-sonnet-4-5). docmill's model table decides; this only adds
a warning when the SDK knows an end of life the table does not (or an earlier one). A missing module, a
changed shape or an unparseable date gives no hint, never an error. The one place product code touches
a private SDK module.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from datetime import date, datetime

_ORDINAL = re.compile(r"(\d+)(st|nd|rd|th)\b")


def parse_sdk_date(text: str) -> date | None:
    """'November 30th, 2026' (or an ISO date) -> date; None when it reads as neither."""
    if not isinstance(text, str):
        return None
    try:
        return date.fromisoformat(text.strip())
    except ValueError:
        pass
    plain = _ORDINAL.sub(r"\1", text).replace(",", "").strip()
    try:
        return datetime.strptime(plain, "%B %d %Y").date()
    except ValueError:
        return None


def sdk_end_of_life(module: str = "anthropic._data", name: str = "DEPRECATED_MODELS") -> dict[str, date]:
    """model -> end-of-life date as the installed SDK lists it; {} when it lists nothing readable."""
    try:
        listed = getattr(importlib.import_module(module), name)
    except Exception:
        return {}
    if not isinstance(listed, Mapping):
        return {}
    out: dict[str, date] = {}
    for model, when in listed.items():
        day = parse_sdk_date(when) if isinstance(model, str) else None
        if day is not None:
            out[model] = day
    return out

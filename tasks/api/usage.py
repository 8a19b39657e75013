"""Token arithmetic shared by every pass (a leaf: imports nothing of docmill's): the usage
counters of a response summed, and the cheap input-token estimate used for pacing and budgets."""

from __future__ import annotations

import json
from typing import Any

USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


def add_usage(total: dict[str, int], usage: dict[str, Any] | None) -> dict[str, int]:
    """Sum the integer token counters of one response's usage into `total` (in place)."""
    for name in USAGE_FIELDS:
        value = (usage or {}).get(name) or 0
        total[name] = total.get(name, 0) + int(value)
    return total


def estimate_input_tokens(request: dict[str, Any]) -> int:
    """Cheap input-token estimate (chars/4 of the request body) for pacing and budgets."""
    return max(1, len(json.dumps(request, ensure_ascii=False)) // 4)

"""The models docmill knows: one dated table (`docmill/data/models.json`), read through these functions.
A leaf (standard library only) for prices, settings, the pipeline's model checks and the emulator.

A model's status on a day (`ModelInfo.status_on`) is asked with the day passed in (settings.today in
the pipeline, the injected date in tests), never read here. Before the 4.6 generation an alias resolves
to a dated id and answers name it (`claude-haiku-4-5` -> `claude-haiku-4-5-20251001`); both price the
same (`price_id`). What a model accepts for `thinking` and `output_config.effort` comes from the table
(the per-file request builds its thinking policy from it, the emulator refuses the rest with 400).
The SDK's private deprecation data is not read here (see `docmill.sdk_hints`: a warning source only).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from enum import StrEnum
from importlib import resources
from typing import Any

DATED_SUFFIX = re.compile(r"-\d{8}$")
# Thinking tokens one extraction answer spends at each effort when adaptive thinking is on: an
# assumption (no published figure), used by `estimate` and as the emulator's default; set the
# emulator's `thinking_tokens_by_effort` knob to measure others. Billed as output tokens.
THINKING_TOKENS_BY_EFFORT: dict[str, int] = {
    "low": 128,
    "medium": 512,
    "high": 1536,
    "xhigh": 3072,
    "max": 6144,
}
CACHE_MIN_TOKENS_UNKNOWN = 4096  # a model outside the table: the largest known minimum


class Status(StrEnum):
    CURRENT = "current"
    LEGACY = "legacy"
    DEPRECATED = "deprecated"
    RETIRED = "retired"


@dataclass(frozen=True)
class ModelInfo:
    """One row of the model table. Dates are the first day of each status (00:00 UTC)."""

    id: str
    family: str
    generation: str
    legacy_from: date | None
    deprecated_from: date | None
    retires: date | None
    max_output_tokens: int
    cache_min_tokens: int
    thinking: str  # "adaptive" (on by default, 5.x) or "manual" (budget_tokens, 4.x)
    source: str
    dated_id: str | None = None
    thinking_types: tuple[str, ...] = ("enabled", "disabled")  # `thinking.type` values accepted
    effort: bool = False  # `output_config.effort` accepted
    default_effort: str | None = None  # the effort the API uses when none is sent

    @property
    def thinks_by_default(self) -> bool:
        """Adaptive thinking runs unless the request turns it off (5.x): thinking tokens are output."""
        return self.thinking == "adaptive"

    def status_on(self, day: date) -> Status:
        if self.retires is not None and day >= self.retires:
            return Status.RETIRED
        if self.deprecated_from is not None and day >= self.deprecated_from:
            return Status.DEPRECATED
        if self.legacy_from is not None and day >= self.legacy_from:
            return Status.LEGACY
        return Status.CURRENT


def _day(value: Any) -> date | None:
    return None if value is None else date.fromisoformat(value)


def _load() -> tuple[str, dict[str, ModelInfo]]:
    raw = json.loads(resources.files("docmill").joinpath("data/models.json").read_text(encoding="utf-8"))
    rows: dict[str, ModelInfo] = {}
    for row in raw["models"]:  # every row names each field (dated_id where there is one)
        dates = {k: _day(row[k]) for k in ("legacy_from", "deprecated_from", "retires")}
        rows[row["id"]] = ModelInfo(**{**row, **dates, "thinking_types": tuple(row["thinking_types"])})
    return raw["checked"], rows


TABLE_CHECKED, MODELS = _load()

# Minimum cacheable prompt prefix per model (tokens). Below it the API caches nothing and says nothing.
# Where sources differ the table holds the larger value. The emulator uses this same table.
CACHE_MIN_TOKENS: dict[str, int] = {m.id: m.cache_min_tokens for m in MODELS.values()}


def price_id(model: str) -> str:
    """The id a model is priced under: `claude-haiku-4-5-20251001` -> `claude-haiku-4-5`."""
    return DATED_SUFFIX.sub("", model)


def model_info(model: str) -> ModelInfo | None:
    """The table's row for `model` (exact id first, then its alias without a date suffix)."""
    return MODELS.get(model) or MODELS.get(price_id(model))


def dated_aliases() -> dict[str, str]:
    """alias -> dated id, for the models whose alias answers with a dated id (before 4.6)."""
    return {m.id: m.dated_id for m in MODELS.values() if m.dated_id}


def current_models(day: date) -> list[str]:
    """Ids whose status on `day` is current, in table order (newest first)."""
    return [m.id for m in MODELS.values() if m.status_on(day) is Status.CURRENT]


def min_cacheable_tokens(model: str, table: Mapping[str, int] | None = None) -> int:
    """The shortest prefix `model` caches (`table`: settings.api.cache_min_tokens, else the default)."""
    table = CACHE_MIN_TOKENS if table is None else table
    found = table.get(model, table.get(price_id(model)))
    return CACHE_MIN_TOKENS_UNKNOWN if found is None else found


def thinking_tokens(
    model: str, thinking: Mapping[str, Any] | None, effort: str | None, table: Mapping[str, int] | None = None
) -> int:
    """Thinking tokens one answer of `model` spends for a request's `thinking` and
    `output_config.effort` (`table`: effort -> tokens, default THINKING_TOKENS_BY_EFFORT): adaptive
    thinking (on by default on 5.x, or asked for) spends the effort's share; `disabled` and
    `between_tools` (no tool calls in docmill's requests) spend none; manual `enabled` at most its
    budget. The same rule for `estimate` and the emulator."""
    table = THINKING_TOKENS_BY_EFFORT if table is None else table
    info = model_info(model)
    kind = (thinking or {}).get("type")
    if kind in ("disabled", "between_tools"):
        return 0
    if kind == "enabled":
        budget = (thinking or {}).get("budget_tokens")
        return min(int(budget), table.get("high", 0)) if isinstance(budget, int) else 0
    if kind != "adaptive" and (info is None or not info.thinks_by_default):
        return 0
    level = effort or (info.default_effort if info is not None else None) or "high"
    return int(table.get(level, table.get("high", 0)))

"""What the emulator knows about models, taken from the SDK where the SDK says it.

- Aliases of the generations before 4.6 point at dated ids: an answer to `claude-haiku-4-5` carries
  `model: "claude-haiku-4-5-20251001"` (reference §00.1). The pairs come from the SDK's
  `types/model.py` (every listed `<alias>-YYYYMMDD` whose alias is listed too).
- End of life from the SDK's `_data/deprecated_models.py` ("November 30th, 2026"). A model is retired
  from 00:00 UTC of that day (the harsher reading) and answered like a model that does not exist.
- Minimum cacheable prefix per model (reference §7.1; where sources differ, the larger value).
- A dated id is priced as its alias (`price_id`).
"""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from datetime import UTC, datetime

from anthropic._data import DEPRECATED_MODELS
from anthropic.types.model import Model

from docmill.models import CACHE_MIN_TOKENS as PIPELINE_CACHE_MIN_TOKENS
from docmill.models import CACHE_MIN_TOKENS_UNKNOWN as PIPELINE_UNKNOWN

DATED = re.compile(r"^(?P<base>.+)-(?P<date>\d{8})$")
_ORDINAL = re.compile(r"(\d+)(st|nd|rd|th)\b")

# Reference §7.1, one table with the client's settings default (larger value where sources differ).
CACHE_MIN_TOKENS: dict[str, int] = dict(PIPELINE_CACHE_MIN_TOKENS)
CACHE_MIN_TOKENS_UNKNOWN = PIPELINE_UNKNOWN  # a model not in the table: the largest known minimum


def sdk_model_ids() -> tuple[str, ...]:
    """The literal model ids the SDK lists in `anthropic.types.model.Model`."""
    ids: list[str] = []
    for arg in typing.get_args(Model):
        ids.extend(a for a in typing.get_args(arg) if isinstance(a, str))
    return tuple(ids)


def dated_aliases() -> dict[str, str]:
    """alias -> dated id, for every dated id the SDK lists next to its alias."""
    ids = set(sdk_model_ids())
    out: dict[str, str] = {}
    for model in sorted(ids):
        m = DATED.match(model)
        if m and m["base"] in ids:
            out[m["base"]] = model
    return out


def price_id(model: str) -> str:
    """The id a model is priced (and cache-sized) under: a `-YYYYMMDD` suffix dropped."""
    m = DATED.match(model)
    return m["base"] if m else model


def parse_sdk_date(text: str) -> str:
    """'November 30th, 2026' -> '2026-11-30'."""
    plain = _ORDINAL.sub(r"\1", text).replace(",", "")
    return datetime.strptime(plain, "%B %d %Y").date().isoformat()


def sdk_end_of_life() -> dict[str, str]:
    """model -> ISO end-of-life date, from the SDK's deprecated-models data."""
    return {model: parse_sdk_date(when) for model, when in DEPRECATED_MODELS.items()}


def end_of_life_ts(iso_date: str) -> float:
    return datetime.fromisoformat(iso_date).replace(tzinfo=UTC).timestamp()


def retired_on(model: str, end_of_life: Mapping[str, str], now: float) -> str | None:
    """The ISO end-of-life date when `model` has reached it at `now`, else None."""
    when = end_of_life.get(model) or end_of_life.get(price_id(model))
    return when if when is not None and now >= end_of_life_ts(when) else None


def known_models(priced: Mapping[str, object]) -> set[str]:
    """Ids the emulator accepts: every priced id plus the dated ids of priced aliases."""
    return set(priced) | {dated for alias, dated in dated_aliases().items() if alias in priced}

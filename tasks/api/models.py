"""The pinned models, checked when a run starts (before anything is sent).

- A model past its end of life in the SDK's deprecated-models data (`anthropic._data.DEPRECATED_MODELS`,
  e.g. `claude-sonnet-4-5`: November 30th, 2026) is refused by the API: `check_models` raises one
  `ConfigError` line naming the setting (exit 2), so no run starts on it.
- A model with an end of life still ahead, or with no price in the table, is a note: the run goes on
  (answers of an unpriced model are kept and their tokens recorded as `unpriced`).
Used by `flows.extract.run_extract` and `docmill doctor`.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from anthropic._data import DEPRECATED_MODELS

from docmill.errors import ConfigError
from docmill.models import price_id
from docmill.prices import price_of

if TYPE_CHECKING:
    from docmill.settings import Settings

_ORDINAL = re.compile(r"(\d+)(st|nd|rd|th)\b")


def end_of_life(model: str) -> str | None:
    """The ISO end-of-life date of `model` (or of its alias) from the SDK's data, if it has one."""
    when = DEPRECATED_MODELS.get(model) or DEPRECATED_MODELS.get(price_id(model))
    if when is None:
        return None
    plain = _ORDINAL.sub(r"\1", when).replace(",", "")
    return datetime.strptime(plain, "%B %d %Y").date().isoformat()


def pinned_models(settings: Settings) -> list[tuple[str, str]]:
    """(setting name, model id) of every model a run may send to."""
    api = settings.api
    out = [("api.model", api.model), ("api.integration_model", api.integration_model)]
    if api.fallback_model:
        out.append(("api.fallback_model", api.fallback_model))
    return out


def check_models(settings: Settings, *, now: float | None = None) -> list[str]:
    """Notes about the pinned models; raises `ConfigError` when one has reached its end of life
    (a day counts from 00:00 UTC, the harsher reading)."""
    now = time.time() if now is None else now
    retired: list[str] = []
    notes: list[str] = []
    for name, model in pinned_models(settings):
        eol = end_of_life(model)
        if eol is not None:
            ends = datetime.fromisoformat(eol).replace(tzinfo=UTC).timestamp()
            if now >= ends:
                retired.append(f"{name} {model} reached its end of life on {eol}")
            else:
                notes.append(f"{name} {model} is deprecated: end of life on {eol}")
        if price_of(model) is None:
            notes.append(f"{name} {model} has no price: its answers are recorded as unpriced")
    if retired:
        raise ConfigError(
            "; ".join(retired),
            hint="pin a current model (DOCMILL_API__MODEL, DOCMILL_API__INTEGRATION_MODEL, "
            "DOCMILL_API__FALLBACK_MODEL); nothing was sent",
        )
    return list(dict.fromkeys(notes))

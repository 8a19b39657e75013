"""The pinned models, checked when a run starts (before anything is sent), on `settings.on_day()`,
against docmill's model table (`docmill/data/models.json`). Used by `flows.entry.run_extract` and
`docmill doctor`.

- Retired that day: `check_models` raises one `ConfigError` line naming the setting (exit 2).
- No price under a cost cap: `ConfigError` naming how to declare one (the cap is never off); without
  a cap, a warning, and its tokens are recorded as `unpriced`.
- Outside the table: probed once (`check_served`, a free `count_tokens`); a 404 stops the run.
- Deprecated, legacy with a retirement date, or outside the table: a warning. The installed SDK's
  end-of-life list (`docmill.sdk_hints`) adds a note when it knows an earlier date; it never stops a
  run. A legacy model with no retirement date is only listed by `docmill doctor`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import TYPE_CHECKING, Any

from docmill.errors import ConfigError
from docmill.models import TABLE_CHECKED, Status, current_models, model_info, price_id
from docmill.prices import declare_hint, note_unpriced, price_on
from docmill.sdk import anthropic
from docmill.sdk_hints import sdk_end_of_life

if TYPE_CHECKING:
    from docmill.settings import Settings


def pinned_models(settings: Settings) -> list[tuple[str, str]]:
    """(setting name, model id) of every model a run may send to."""
    api = settings.api
    out = [("api.model", api.model), ("api.integration_model", api.integration_model)]
    if api.fallback_model:
        out.append(("api.fallback_model", api.fallback_model))
    return out


def lifecycle_note(name: str, model: str, day: date) -> str | None:
    """One line about `model`'s status on `day` when it is not simply current (None then)."""
    info = model_info(model)
    if info is None:
        return (
            f"{name} {model} is not in docmill's model table (checked {TABLE_CHECKED}): "
            "its lifecycle is unknown"
        )
    status = info.status_on(day)
    newer = next((m for m in current_models(day) if (model_info(m) or info).family == info.family), None)
    instead = f"; the current {info.family} is {newer}" if newer and newer != info.id else ""
    if status is Status.DEPRECATED:
        return f"{name} {model} is deprecated: it retires on {info.retires}{instead}"
    if status is Status.LEGACY:
        retires = f", retiring on {info.retires}" if info.retires else ""
        return f"{name} {model} is legacy{retires}{instead}"
    return None


def check_models(settings: Settings, *, today: date | None = None, everything: bool = False) -> list[str]:
    """Warnings about the pinned models on `today` (default `settings.on_day()`); raises `ConfigError`
    when one is retired that day. A legacy model with no retirement date yet is worth a line in
    `doctor` (`everything=True`), not a warning on every run."""
    day = settings.on_day() if today is None else today
    hints = sdk_end_of_life()
    retired: list[str] = []
    unpriced: list[str] = []
    notes: list[str] = []
    cap = settings.cost.max_cost_usd
    for name, model in pinned_models(settings):
        info = model_info(model)
        if info is not None and info.status_on(day) is Status.RETIRED:
            retired.append(f"{name} {model} retired on {info.retires}")
            continue
        note = lifecycle_note(name, model, day)
        if note and (everything or info is None or info.retires is not None):
            notes.append(note)
        sdk_day = hints.get(model) or hints.get(price_id(model))
        table_day = info.retires if info is not None else None
        if sdk_day is not None and (table_day is None or sdk_day < table_day):
            notes.append(
                f"{name} {model}: the installed anthropic SDK lists an end of life on {sdk_day} "
                f"(docmill's table: {table_day or 'none'}); check the model deprecations page"
            )
        if price_on(model, day) is None:
            if cap is not None:
                unpriced.append(f"{name} {model}")
            else:
                notes.append(f"{name} {model} has no price: its tokens are recorded and reported as unpriced")
                note_unpriced(model)  # warned once, here
    if retired:
        raise ConfigError(
            "; ".join(retired),
            hint="pin a current model (DOCMILL_API__MODEL, DOCMILL_API__INTEGRATION_MODEL, "
            "DOCMILL_API__FALLBACK_MODEL); nothing was sent",
        )
    if unpriced:
        first = unpriced[0].split(" ")[-1]
        raise ConfigError(
            f"{', '.join(unpriced)} has no price, so the cost cap of ${cap:.4f} cannot hold; nothing was sent",
            hint=declare_hint(first),
        )
    return list(dict.fromkeys(notes))


def check_served(settings: Settings, sdk: Callable[[], Any]) -> list[str]:
    """Probe each pinned model that is not in docmill's table with one free `count_tokens` call (as
    `doctor` does) through the client `sdk()` makes (made only when a model needs the probe): a 404
    is a `ConfigError` (exit 2) before anything is sent; a served one is a note. Other errors are
    left to the run (its key, endpoint and breaker checks)."""
    notes: list[str] = []
    for name, model in pinned_models(settings):
        if model_info(model) is not None:
            continue
        try:
            sdk().messages.count_tokens(model=model, messages=[{"role": "user", "content": "ping"}])
        except anthropic.NotFoundError as e:
            raise ConfigError(
                f"{name} {model} is neither in docmill's model table (checked {TABLE_CHECKED}) nor served "
                f"by the endpoint (404: {e.message[:120]}); nothing was sent",
                hint="pin a model the API serves (DOCMILL_API__MODEL / --model); `docmill doctor` checks them",
            ) from e
        except anthropic.APIError:
            continue
        notes.append(f"{name} {model} is not in docmill's model table but the endpoint serves it")
    return notes

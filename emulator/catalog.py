"""What the emulator knows about models: docmill's dated model table (`docmill/data/models.json`), the
same one the pipeline checks against, never the SDK's private data.

- Aliases of the generations before 4.6 point at dated ids: an answer to `claude-haiku-4-5` carries
  `model: "claude-haiku-4-5-20251001"` (reference §00.1); the pairs are the table's `dated_id`s.
- A model is retired from 00:00 UTC of its `retires` day (the harsher reading) and answered like a
  model that does not exist. The day is the emulator's `today` knob, else its virtual clock's date.
- A dated id is priced as its alias (`price_id`).
- Served: every model of the table (and its dated id) not retired on the emulator's day; anything
  else answers 404 `not_found_error` (`table_models`).
- A served model with no published price is billed at the dearest published rates of the table on
  that day (`dearest_price`, the harsher case; the `unpriced_price` knob sets another).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date

from docmill.models import MODELS, dated_aliases, model_info, price_id
from docmill.prices import RATE_FIELDS, Price, Rates, price_on

__all__ = ["dated_aliases", "price_id"]


def table_end_of_life() -> dict[str, str]:
    """model -> ISO retirement date, for every model of the table that has one."""
    return {m.id: m.retires.isoformat() for m in MODELS.values() if m.retires is not None}


def retired_on(model: str, end_of_life: Mapping[str, str], day: date) -> str | None:
    """The ISO end-of-life date when `model` has reached it on `day`, else None."""
    when = end_of_life.get(model) or end_of_life.get(price_id(model))
    return when if when is not None and day >= date.fromisoformat(when) else None


def table_models() -> set[str]:
    """Every id of docmill's model table and the dated ids of its aliases (retired ones included:
    `retired_on` refuses them by day)."""
    return set(MODELS) | set(dated_aliases().values())


def dearest_price(day: date) -> Price:
    """A price whose every rate is the dearest any model of the table has on `day` (no bands)."""
    prices = [p for p in (price_on(m, day) for m in MODELS) if p is not None]
    rates = [r for p in prices for r in (p.rates, *(b.rates for b in p.bands))]
    top = {f: max(getattr(r, f) for r in rates) for f in RATE_FIELDS}
    return Price(model="(no published price)", rates=Rates(**top), source="emulator: dearest published rates")


def max_output_tokens(model: str) -> int | None:
    """The model's output limit (docmill's table; None for a model outside it, e.g. `extra_models`)."""
    info = model_info(model)
    return None if info is None else info.max_output_tokens

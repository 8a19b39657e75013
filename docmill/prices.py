"""Model prices as dated data (`docmill/data/prices.json`) and the one cost formula, shared by the
pipeline's cost ledger, the cost cap, `estimate` and the emulator's accounting, so all price a request
the same way.

- `price_on(model, day)`: a model's `Price` on a day, or None when it has none (an explicit "no
  published price" row, or no row at all); a dated id (`-YYYYMMDD`, models before 4.6) is priced as
  its alias (`price_id`).
- User overrides win: `DOCMILL_PRICES='{"model": {"input": 3, "output": 15}}'` over the file named by
  `DOCMILL_PRICES_FILE` (the same JSON shape) over the table. Missing cache rates follow the standard
  multipliers (5-minute write 1.25x, 1-hour write 2x, read 0.1x input), `batch` 0.5. `override_lines`
  says which are in force (`estimate` and `doctor` show them).
- `usd_at(price, usage)`: the formula. A band applies when the request's prompt (input + cache writes
  + cache reads) is above its threshold, to every token of that request, output included.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Any

from docmill.errors import ConfigError
from docmill.logs import get_logger
from docmill.models import price_id

log = get_logger("prices")
_warned: set[str] = set()
_warned_lock = threading.Lock()

# The standard multipliers of input, for overrides that give only input / output.
CACHE_WRITE_5M = 1.25
CACHE_WRITE_1H = 2.0
CACHE_READ = 0.1
BATCH_DISCOUNT = 0.5
RATE_FIELDS = ("input", "output", "cache_write_5m", "cache_write_1h", "cache_read")


@dataclass(frozen=True)
class Rates:
    """USD per million tokens of each kind."""

    input: float
    output: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], where: str) -> Rates:
        try:
            i, o = float(raw["input"]), float(raw["output"])
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(
                f"price {where}: needs numeric `input` and `output` (USD per million tokens)",
                hint='e.g. {"input": 3, "output": 15}',
            ) from e
        get = lambda k, m: float(raw[k]) if raw.get(k) is not None else i * m  # noqa: E731
        return cls(
            i,
            o,
            get("cache_write_5m", CACHE_WRITE_5M),
            get("cache_write_1h", CACHE_WRITE_1H),
            get("cache_read", CACHE_READ),
        )


@dataclass(frozen=True)
class Band:
    above_prompt_tokens: int
    rates: Rates


@dataclass(frozen=True)
class Price:
    """A model's price on a day: base rates, prompt-length bands, the batch multiplier, and where it
    comes from (`source`; `confirmed`: official / third_party / override)."""

    model: str
    rates: Rates
    batch: float = BATCH_DISCOUNT
    bands: tuple[Band, ...] = ()
    effective: date | None = None
    source: str = ""
    confirmed: str = "official"

    def rates_for(self, prompt_tokens: int) -> Rates:
        """The rates of a request whose prompt (input + cache writes + cache reads) has this many tokens."""
        rates = self.rates
        for band in self.bands:
            if prompt_tokens > band.above_prompt_tokens:
                rates = band.rates
        return rates

    @classmethod
    def from_mapping(cls, model: str, raw: Mapping[str, Any], *, source: str, confirmed: str) -> Price:
        bands = tuple(
            Band(int(b["above_prompt_tokens"]), Rates.from_mapping(b, f"{model} band"))
            for b in raw.get("bands") or []
        )
        effective = raw.get("effective")
        return cls(
            model=model,
            rates=Rates.from_mapping(raw, model),
            batch=float(raw.get("batch", BATCH_DISCOUNT)),
            bands=tuple(sorted(bands, key=lambda b: b.above_prompt_tokens)),
            effective=date.fromisoformat(effective) if effective else None,
            source=source,
            confirmed=confirmed,
        )


@dataclass(frozen=True)
class Row:
    """One dated row of the table: a price, or None for "no published price" from `effective` on."""

    effective: date | None
    price: Price | None
    source: str


def _load() -> dict[str, list[Row]]:
    raw = json.loads(resources.files("docmill").joinpath("data/prices.json").read_text(encoding="utf-8"))
    rows: dict[str, list[Row]] = {}
    for item in raw["prices"]:
        model, source = item["model"], item["source"]
        effective = date.fromisoformat(item["effective"]) if item.get("effective") else None
        price = (
            None
            if "price" in item and item["price"] is None
            else Price.from_mapping(model, item, source=source, confirmed=item.get("confirmed", "official"))
        )
        rows.setdefault(model, []).append(Row(effective, price, source))
    for model_rows in rows.values():
        model_rows.sort(key=lambda r: r.effective or date.min)
    return rows


TABLE = _load()


def table_row(model: str, day: date) -> Row | None:
    """The table's row in force for `model` on `day` (the earliest when `day` is before all of them);
    None when the table has no row for the model."""
    rows = TABLE.get(model) or TABLE.get(price_id(model))
    if not rows:
        return None
    now = [r for r in rows if r.effective is None or r.effective <= day]
    return now[-1] if now else rows[0]


_built: tuple[object, dict[str, Price]] | None = None
_built_lock = threading.Lock()


def overrides() -> dict[str, Price]:
    """The user's prices: DOCMILL_PRICES over DOCMILL_PRICES_FILE; built once per settings object."""
    global _built
    from docmill.settings import get_settings

    settings = get_settings()
    with _built_lock:
        if _built is not None and _built[0] is settings:
            return _built[1]
    out: dict[str, Price] = {}
    if settings.prices_file:
        path = Path(settings.prices_file).expanduser()
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ConfigError(
                f"prices file {path}: {e}",
                hint="DOCMILL_PRICES_FILE names a JSON object {model: {input, output}}",
            ) from e
        if not isinstance(raw, dict):
            raise ConfigError(
                f"prices file {path}: not a JSON object", hint='{"model": {"input": 3, "output": 15}}'
            )
        for model, value in raw.items():
            out[model] = Price.from_mapping(model, value, source=f"prices file {path}", confirmed="override")
    for model, value in settings.prices.items():
        out[model] = Price.from_mapping(model, value, source="DOCMILL_PRICES", confirmed="override")
    with _built_lock:
        _built = (settings, out)
    return out


def _today() -> date:
    from docmill.settings import get_settings

    return get_settings().on_day()


_found: tuple[object, dict[tuple[str, date], Price | None]] = (None, {})


def price_on(model: str, day: date | None = None) -> Price | None:
    """The price of `model` on `day` (default settings.on_day()): a user override, else the table's row
    in force; None when there is no price. Remembered per settings and day (every answer is priced a
    few times: looking it up again cost ~10 % of a batch ingest's CPU)."""
    global _found
    own = overrides()
    day = day or _today()
    owner, found = _found
    if owner is not own:
        found = {}
        _found = (own, found)
    try:
        return found[(model, day)]
    except KeyError:
        pass
    hit = own.get(model) or own.get(price_id(model))
    if hit is None:
        row = table_row(model, day)
        hit = None if row is None else row.price
    found[(model, day)] = hit
    return hit


def override_lines() -> list[str]:
    """One line per user override in force (shown by `estimate` and `doctor`)."""
    return [
        f"price override for {m} ({p.source}): input ${p.rates.input:g} / output ${p.rates.output:g} per MTok"
        for m, p in sorted(overrides().items())
    ]


def declare_hint(model: str) -> str:
    """How to declare a price for `model` (the line a refused run prints)."""
    return (
        f'declare one: DOCMILL_PRICES=\'{{"{model}": {{"input": 3, "output": 15}}}}\' (USD per million '
        "tokens), or a JSON file of the same shape named by DOCMILL_PRICES_FILE; or run without --max-cost-usd"
    )


def note_unpriced(model: str) -> None:
    """The run's start already said `model` has no price: no second warning when its answers come."""
    with _warned_lock:
        _warned.add(model)


def priced_usd(
    model: str, usage: Mapping[str, Any] | Any, *, batch: bool = False, day: date | None = None
) -> float | None:
    """`cost_usd`, or None (and one warning per model) when `model` has no price: for every paid
    answer (realtime, batch results, long tasks, compaction), never an error once it is paid."""
    price = price_on(model, day)
    if price is None:
        with _warned_lock:
            first = model not in _warned
            _warned.add(model)
        if first:
            log.warning(
                "no price for model %s: its answers are kept and their tokens recorded as unpriced "
                "(declare a price with DOCMILL_PRICES or DOCMILL_PRICES_FILE)",
                model,
                extra={"model": model},
            )
        return None
    return usd_at(price, usage, batch=batch)


def usage_field(usage: Mapping[str, Any] | Any, name: str) -> Any:
    """A field of an API usage (or iteration) given as the SDK object or its dict."""
    if type(usage) is dict:  # the common case, without an ABC isinstance (~25 of these per answer)
        return usage.get(name)
    return usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, None)


def _get(usage: Mapping[str, Any] | Any, name: str) -> int:
    return int(usage_field(usage, name) or 0)


def cost_usd(
    model: str, usage: Mapping[str, Any] | Any, *, batch: bool = False, day: date | None = None
) -> float:
    """USD for one response's usage, including compaction iterations; ConfigError without a price."""
    price = price_on(model, day)
    if price is None:
        raise ConfigError(f"no price for model {model!r}", hint=declare_hint(model))
    return usd_at(price, usage, batch=batch)


def prompt_tokens(usage: Mapping[str, Any] | Any) -> int:
    """Input + cache writes + cache reads: what a prompt-length band is decided by."""
    return sum(
        _get(usage, k) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )


def _usd(rates: Rates, usage: Mapping[str, Any] | Any) -> float:
    cache_creation = usage_field(usage, "cache_creation")
    w1h = _get(cache_creation, "ephemeral_1h_input_tokens") if cache_creation else 0
    w5m = max(_get(usage, "cache_creation_input_tokens") - w1h, 0)
    return (
        _get(usage, "input_tokens") * rates.input
        + _get(usage, "output_tokens") * rates.output
        + w5m * rates.cache_write_5m
        + w1h * rates.cache_write_1h
        + _get(usage, "cache_read_input_tokens") * rates.cache_read
    ) / 1e6


def usd_at(price: Price, usage: Mapping[str, Any] | Any, *, batch: bool = False) -> float:
    """The cost formula at `price`. Top-level usage fields are priced at the rates of the request's
    prompt length; `usage.iterations` entries of type "compaction" (not included in the top-level
    counts) are priced on top, each at the rates of its own prompt."""
    usd = _usd(price.rates_for(prompt_tokens(usage)), usage)
    for it in usage_field(usage, "iterations") or []:
        if usage_field(it, "type") == "compaction":
            usd += _usd(price.rates_for(prompt_tokens(it)), it)
    return usd * (price.batch if batch else 1.0)


def worst_usd(
    model: str,
    input_tokens: int,
    max_tokens: int,
    *,
    batch: bool = False,
    one_hour: bool = False,
    day: date | None = None,
) -> float | None:
    """What a request can cost at most: every input token a cache write (1-hour when the request
    asks for one), max_tokens of output (thinking included), at the band its prompt reaches; None
    without a price."""
    price = price_on(model, day)
    if price is None:
        return None
    rates = price.rates_for(input_tokens)
    per_in = max(rates.input, rates.cache_write_1h if one_hour else rates.cache_write_5m)
    usd = (input_tokens * per_in + max_tokens * rates.output) / 1e6
    return usd * (price.batch if batch else 1.0)

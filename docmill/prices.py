"""Model price table and the one cost formula, shared by the pipeline's cost ledger
and the emulator's accounting so both price a request the same way.

Prices are USD per million tokens. Cache writes cost 1.25x (5 minute TTL) or 2x (1 hour)
the input price, cache reads 0.1x; the Batch API halves everything. Override or extend the
table with DOCMILL_PRICES='{"model-id": {"input": 3.0, "output": 15.0}}'.

A request is priced by the model it asked for; a `-YYYYMMDD` suffix is dropped first (`price_id`), so
an answer that names the dated id an alias resolved to (models before 4.6) is priced as the alias.
`priced_usd` is the one path for paid answers: a model with no price gives None (the caller records
the tokens as `unpriced`) and one warning per model, never an error after the answer was paid.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from docmill.errors import ConfigError
from docmill.logs import get_logger
from docmill.models import price_id

log = get_logger("prices")
_warned: set[str] = set()
_warned_lock = threading.Lock()

DEFAULT_PRICES: dict[str, dict[str, float]] = {
    "claude-opus-5": {"input": 5.0, "output": 25.0},
    "claude-opus-4-8": {"input": 5.0, "output": 25.0},
    "claude-opus-4-7": {"input": 5.0, "output": 25.0},
    "claude-opus-4-6": {"input": 5.0, "output": 25.0},
    "claude-sonnet-5": {"input": 3.0, "output": 15.0},
    "claude-sonnet-4-6": {"input": 3.0, "output": 15.0},
    "claude-sonnet-4-5": {"input": 3.0, "output": 15.0},
    "claude-haiku-4-5": {"input": 1.0, "output": 5.0},
}

CACHE_WRITE_5M = 1.25
CACHE_WRITE_1H = 2.0
CACHE_READ = 0.1
BATCH_DISCOUNT = 0.5


_built: tuple[object, dict[str, dict[str, float]]] | None = None


def price_table() -> dict[str, dict[str, float]]:
    """Defaults overlaid with the settings' `prices`; built once per settings object (every
    priced response asks for it). Treat the result as read-only."""
    global _built
    from docmill.settings import get_settings

    settings = get_settings()
    if _built is None or _built[0] is not settings:
        table = {k: dict(v) for k, v in DEFAULT_PRICES.items()}
        table.update({k: dict(v) for k, v in settings.prices.items()})
        _built = (settings, table)
    return _built[1]


def price_of(model: str) -> dict[str, float] | None:
    """USD per million tokens of `model` (exact id first, then without a date suffix), or None."""
    table = price_table()
    return table.get(model) or table.get(price_id(model))


def priced_usd(model: str, usage: Mapping[str, Any] | Any, *, batch: bool = False) -> float | None:
    """`cost_usd`, or None (and one warning per model) when `model` has no price. For every paid
    answer: realtime, batch results, long tasks and compaction."""
    if price_of(model) is None:
        with _warned_lock:
            first = model not in _warned
            _warned.add(model)
        if first:
            log.warning(
                "no price for model %s: its answers are kept and their tokens recorded as unpriced "
                "(add the price with DOCMILL_PRICES)",
                model,
                extra={"model": model},
            )
        return None
    return cost_usd(model, usage, batch=batch)


def usage_field(usage: Mapping[str, Any] | Any, name: str) -> Any:
    """A field of an API usage (or iteration) given as the SDK object or its dict."""
    return usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, None)


def _get(usage: Mapping[str, Any] | Any, name: str) -> int:
    return int(usage_field(usage, name) or 0)


def cost_usd(model: str, usage: Mapping[str, Any] | Any, *, batch: bool = False) -> float:
    """USD for one response's usage, including compaction iterations.

    `usage` is the API's usage object or its dict. Top-level fields are priced as usual;
    `usage.iterations` entries of type "compaction" are priced on top (they are not
    included in the top-level counts).
    """
    p = price_of(model)
    if p is None:
        raise ConfigError(f"no price for model {model!r}", hint="add it with DOCMILL_PRICES")
    return usd_at(p, usage, batch=batch)


def usd_at(p: Mapping[str, float], usage: Mapping[str, Any] | Any, *, batch: bool = False) -> float:
    """The cost formula at price `p` ({"input", "output"} USD per million tokens)."""
    per_in, per_out = p["input"] / 1e6, p["output"] / 1e6
    cache_creation = usage_field(usage, "cache_creation")
    w1h = _get(cache_creation, "ephemeral_1h_input_tokens") if cache_creation else 0
    w_total = _get(usage, "cache_creation_input_tokens")
    w5m = max(w_total - w1h, 0)
    usd = (
        _get(usage, "input_tokens") * per_in
        + _get(usage, "output_tokens") * per_out
        + w5m * per_in * CACHE_WRITE_5M
        + w1h * per_in * CACHE_WRITE_1H
        + _get(usage, "cache_read_input_tokens") * per_in * CACHE_READ
    )
    iterations = usage_field(usage, "iterations")
    for it in iterations or []:
        kind = usage_field(it, "type")
        if kind == "compaction":
            usd += _get(it, "input_tokens") * per_in + _get(it, "output_tokens") * per_out
            usd += _get(it, "cache_read_input_tokens") * per_in * CACHE_READ
            usd += _get(it, "cache_creation_input_tokens") * per_in * CACHE_WRITE_5M
    if batch:
        usd *= BATCH_DISCOUNT
    return usd

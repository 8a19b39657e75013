"""Facts about model ids, with no dependencies (a leaf for prices, settings and the emulator).

- `price_id`: a `-YYYYMMDD` suffix dropped. Before the 4.6 generation an alias resolves to a dated id
  and answers name it (`claude-haiku-4-5` -> `claude-haiku-4-5-20251001`); both price the same.
- `CACHE_MIN_TOKENS`: the shortest prompt prefix each model caches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

DATED_SUFFIX = re.compile(r"-\d{8}$")

# Minimum cacheable prompt prefix per model (tokens). Below it the API caches nothing and says nothing.
# Values of the API reference (7.1); where sources differ the larger one: Sonnet 4.6 is documented at
# 1,024 but was seen caching only from ~2,048. The emulator uses this same table.
CACHE_MIN_TOKENS: dict[str, int] = {
    "claude-opus-4-6": 4096,
    "claude-opus-4-5": 4096,
    "claude-haiku-4-5": 4096,
    "claude-opus-4-7": 2048,
    "claude-sonnet-4-6": 2048,
    "claude-sonnet-4-5": 1024,
    "claude-opus-4-8": 1024,
    "claude-sonnet-5": 1024,
    "claude-opus-5": 512,
    "claude-fable-5": 512,
    "claude-mythos-5": 512,
}
CACHE_MIN_TOKENS_UNKNOWN = 4096  # a model outside the table: the largest known minimum


def price_id(model: str) -> str:
    """The id a model is priced under: `claude-haiku-4-5-20251001` -> `claude-haiku-4-5`."""
    return DATED_SUFFIX.sub("", model)


def min_cacheable_tokens(model: str, table: Mapping[str, int] | None = None) -> int:
    """The shortest prefix `model` caches (`table`: settings.api.cache_min_tokens, else the default)."""
    table = CACHE_MIN_TOKENS if table is None else table
    found = table.get(model, table.get(price_id(model)))
    return CACHE_MIN_TOKENS_UNKNOWN if found is None else found

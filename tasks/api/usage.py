"""Token arithmetic shared by every pass (a leaf: it imports only the media measure,
tasks.api.media_tokens): the usage counters of a response summed, and the cheap input-token estimate used
for pacing and budgets (a PDF or image block counted by pages and pixels as the API bills them,
never as characters of base64)."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

from tasks.api.media_tokens import media_block_tokens

USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def add_usage(total: dict[str, int], usage: dict[str, Any] | None) -> dict[str, int]:
    """Sum the integer token counters of one response's usage into `total` (in place)."""
    for name in USAGE_FIELDS:
        value = (usage or {}).get(name) or 0
        total[name] = total.get(name, 0) + int(value)
    return total


def _without_media(request: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The request with base64 media data left out, and what that media costs in tokens."""
    media = 0
    messages = []
    for message in request.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            messages.append(message)
            continue
        blocks = []
        for block in content:
            tokens = media_block_tokens(block)
            if tokens is None:
                blocks.append(block)
            else:
                media += tokens
                blocks.append({**block, "source": {**block["source"], "data": ""}})
        messages.append({**message, "content": blocks})
    return ({**request, "messages": messages} if media else request), media


def estimate_input_tokens(
    request: dict[str, Any], dumps: Callable[[dict[str, Any]], str] = partial(json.dumps, ensure_ascii=False)
) -> int:
    """Cheap input-token estimate for pacing and budgets: chars/4 of the request body, a PDF or
    image block by its pages and pixels (tasks.api.media_tokens). `dumps`: what gives the body's
    JSON text (`RepeatedJson(WIDE).dumps` where many requests share most of it)."""
    body, media = _without_media(request)
    return max(1, len(dumps(body)) // 4 + media)


WIDE = (", ", ": ")  # json.dumps's default separators (what estimate_input_tokens counts)
COMPACT = (",", ":")  # a batch body's
# the keys whose values are the same in every per-file request
REPEATED = ("system", "output_config", "thinking", "tools", "tool_choice")


class RepeatedJson:
    """`json.dumps(obj, ensure_ascii=False, separators=...)` of dicts whose top-level values mostly
    repeat from one call to the next, text for text: a value equal to the last one under its key
    (same types, same key order, `same_json`) reuses that one's text. The per-file requests of a
    batch run repeat their system prompt and schema, ~80% of each request's JSON, in every
    request: encoding them once instead of twice per document (the spooled line, the worst-case
    estimate) was a tenth of the batch driver's CPU at 10,000 documents. Callers hand it values
    they do not change afterwards (a request is built fresh per document; the schema its requests
    share is read-only); safe to call from several threads (a race only encodes a value again)."""

    def __init__(self, separators: tuple[str, str] = WIDE, repeated: tuple[str, ...] = REPEATED) -> None:
        self.separators = separators
        self.repeated = frozenset(repeated)  # the keys whose values repeat (others: encoded each time)
        self._last: dict[str, tuple[Any, str]] = {}

    def dumps(self, obj: dict[str, Any]) -> str:
        item_sep, key_sep = self.separators
        parts = []
        for key, value in obj.items():
            if not isinstance(key, str):  # json.dumps's own rules for such keys
                return json.dumps(obj, ensure_ascii=False, separators=self.separators)
            hit = self._last.get(key) if key in self.repeated else None
            if hit is not None and same_json(hit[0], value):
                text = hit[1]
            else:
                text = json.dumps(value, ensure_ascii=False, separators=self.separators)
            if key in self.repeated:  # the latest value: the next is likely made of the same objects
                self._last[key] = (value, text)
            parts.append(f"{json.dumps(key, ensure_ascii=False)}{key_sep}{text}")
        return "{" + item_sep.join(parts) + "}"


def same_json(a: Any, b: Any) -> bool:
    """Whether `a` and `b` have the same JSON text: `==` is not enough (1 == 1.0 == True, dicts
    equal in another key order, 0.0 == -0.0). The same object is the same text."""
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is str or kind is int or kind is bool:
        return bool(a == b)
    if kind is dict:
        return len(a) == len(b) and all(
            ka == kb and same_json(va, vb) for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
        )
    if kind is list or kind is tuple:
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return False  # floats (-0.0, nan) and anything else: encoded again


def prompt_tokens(usage: dict[str, Any]) -> int:
    """Every input token of a usage: uncached, written to the cache and read from it."""
    return sum(int(usage.get(f) or 0) for f in USAGE_FIELDS if f != "output_tokens")


def as_json(obj: Any) -> dict[str, Any]:
    """An SDK model (or a mapping) as the JSON dict it stands for."""
    return dict(obj.model_dump(mode="json") if hasattr(obj, "model_dump") else obj)


def usage_of(result: Any) -> dict[str, Any] | None:
    """The usage of an SDK result as a dict (None for results without one, e.g. a token count)."""
    usage = getattr(result, "usage", None)
    return None if usage is None else as_json(usage)

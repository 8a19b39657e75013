"""Token arithmetic shared by every pass (a leaf: it imports only the media measure,
tasks.api.media_tokens): the usage counters of a response summed, and the cheap input-token estimate used
for pacing and budgets (a PDF or image block counted by pages and pixels as the API bills them,
never as characters of base64)."""

from __future__ import annotations

import json
from typing import Any

from tasks.api.media_tokens import media_block_tokens

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


def estimate_input_tokens(request: dict[str, Any]) -> int:
    """Cheap input-token estimate for pacing and budgets: chars/4 of the request body, a PDF or
    image block by its pages and pixels (tasks.api.media_tokens)."""
    body, media = _without_media(request)
    return max(1, len(json.dumps(body, ensure_ascii=False)) // 4 + media)


def prompt_tokens(usage: dict[str, Any]) -> int:
    """Every input token of a usage: uncached, written to the cache and read from it."""
    return sum(int(usage.get(f) or 0) for f in USAGE_FIELDS if f != "output_tokens")


def usage_of(result: Any) -> dict[str, Any] | None:
    """The usage of an SDK result as a dict (None for results without one, e.g. a token count)."""
    usage = getattr(result, "usage", None)
    if usage is None:
        return None
    dumped = usage.model_dump(mode="json") if hasattr(usage, "model_dump") else usage
    return dumped if isinstance(dumped, dict) else None

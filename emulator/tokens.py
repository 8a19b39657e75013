"""The one token counter: `count_tokens` answers /v1/messages/count_tokens and feeds `usage`.

A deterministic approximation: ceil(chars / 4) per piece of text, plus a fixed overhead per
block, per message and per request. The request is cut into `Segment`s in the API's cache
order (tools -> output schema -> system -> messages); prompt caching hashes prefixes of them.
A compaction block counts its summary (`content`), never its signature, so a conversation
that starts with one costs the summary, not the history it replaced.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from emulator import media

REQUEST_OVERHEAD = 7
MESSAGE_OVERHEAD = 4
BLOCK_OVERHEAD = 3
IMAGE_TOKENS = 1_000


@dataclass(frozen=True)
class Segment:
    """One cacheable unit of the prompt: a tool, a system block or a message content block."""

    label: str
    value: Any
    tokens: int
    cache_control: Mapping[str, Any] | None

    @property
    def key(self) -> str:
        """Canonical text of the segment (without cache_control), hashed into cache prefixes."""
        return self.label + ":" + _canon(self.value)


def text_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _strip_cc(block: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def block_tokens(block: Any) -> int:
    """Tokens of one content block (without overhead)."""
    if isinstance(block, str):
        return text_tokens(block)
    if not isinstance(block, Mapping):
        return text_tokens(_canon(block))
    kind = block.get("type")
    if kind == "text":
        return text_tokens(str(block.get("text", "")))
    if kind == "tool_use":
        return text_tokens(str(block.get("name", ""))) + text_tokens(_canon(block.get("input", {})))
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            return sum(block_tokens(b) + BLOCK_OVERHEAD for b in content)
        return text_tokens(str(content or ""))
    if kind == "compaction":
        return text_tokens(str(block.get("content") or ""))
    if kind == "thinking":
        return text_tokens(str(block.get("thinking", "")))
    if kind in ("image", "document"):
        found = media.read_media(block)  # PDF pages and images as the API bills them
        if found is not None:
            return found.tokens
    if kind == "image":
        return IMAGE_TOKENS
    if kind == "document":
        source = block.get("source") or {}
        data = source.get("data") if isinstance(source, Mapping) else None
        if isinstance(data, str):
            return text_tokens(data) + text_tokens(str(block.get("title") or ""))
        if isinstance(source, Mapping) and isinstance(source.get("content"), list):
            return sum(block_tokens(b) for b in source["content"])
    return text_tokens(_canon(_strip_cc(block)))


def as_blocks(content: Any) -> list[Any]:
    """Message content as a list of blocks (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content or [])


def segments(body: Mapping[str, Any]) -> list[Segment]:
    """The prompt as segments in cache order: tools, output schema, system, messages."""
    out: list[Segment] = []
    for tool in body.get("tools") or []:
        if isinstance(tool, Mapping):
            out.append(_segment("tool", tool, text_tokens(_canon(_strip_cc(tool))) + BLOCK_OVERHEAD))
    config = body.get("output_config")
    fmt = config.get("format") if isinstance(config, Mapping) else None
    if fmt:
        out.append(Segment("format", fmt, text_tokens(_canon(fmt)) + BLOCK_OVERHEAD, None))
    system = body.get("system")
    for block in as_blocks(system) if system else []:
        out.append(_segment("system", block, block_tokens(block) + BLOCK_OVERHEAD))
    for msg in body.get("messages") or []:
        if not isinstance(msg, Mapping):
            continue
        role = str(msg.get("role"))
        for i, block in enumerate(as_blocks(msg.get("content"))):
            extra = MESSAGE_OVERHEAD if i == 0 else 0
            out.append(_segment(f"{role}:{i}", block, block_tokens(block) + BLOCK_OVERHEAD + extra))
    return out


def _segment(label: str, block: Any, tokens: int) -> Segment:
    """A content block as a segment: its `cache_control` apart from what is hashed."""
    if not isinstance(block, Mapping):
        return Segment(label, block, tokens, None)
    return Segment(label, _strip_cc(block), tokens, block.get("cache_control"))


def total(segs: Iterable[Segment]) -> int:
    """Input tokens of a request already cut into segments."""
    return REQUEST_OVERHEAD + sum(s.tokens for s in segs)


def count_tokens(body: Mapping[str, Any]) -> int:
    """Input tokens of a Messages request body (system + tools + schema + messages)."""
    return total(segments(body))


def output_tokens(content: Iterable[Any]) -> int:
    """Output tokens of a response's content blocks (at least 1 when there is any content)."""
    return sum(block_tokens(b) for b in content)

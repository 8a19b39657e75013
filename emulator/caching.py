"""Prompt caching (reference §7): prefixes up to `cache_control` breakpoints, on the virtual clock.

A breakpoint's prefix is every segment up to and including the marked block, in the order tools ->
output schema -> system -> messages; top-level `cache_control` marks the last segment. Whether the
API counts the output schema in the cached prefix is undocumented: by default its tokens are not
counted (knob `cache_counts_output_schema`): they stay `input_tokens` and do not help reach the
minimum, though the schema is still part of the cache key. A prefix shorter than the model's minimum
(knob `cache_min_tokens_by_model`) is never cached (no error). The longest live prefix is read
(`cache_read_input_tokens`, TTL refreshed); longer breakpoints are written
(`cache_creation_input_tokens`, split by TTL); the rest is `input_tokens`.
Entries are scoped by API key and model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from emulator.tokens import Segment

TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}


@dataclass(frozen=True)
class CacheUsage:
    read: int = 0
    write_5m: int = 0
    write_1h: int = 0
    uncached: int = 0

    @property
    def write(self) -> int:
        return self.write_5m + self.write_1h

    def usage_fields(self) -> dict[str, Any]:
        return {
            "input_tokens": self.uncached,
            "cache_creation_input_tokens": self.write,
            "cache_read_input_tokens": self.read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": self.write_5m,
                "ephemeral_1h_input_tokens": self.write_1h,
            },
        }


@dataclass
class _Entry:
    expires_at: float
    ttl: float


class PromptCache:
    def __init__(self) -> None:
        self.entries: dict[str, _Entry] = {}

    def apply(
        self,
        *,
        scope: str,
        model: str,
        segments: list[Segment],
        total_tokens: int,
        top_level: Mapping[str, Any] | None,
        now: float,
        min_tokens: int,
        counts_schema: bool = False,
        dry_run: bool = False,
    ) -> CacheUsage:
        """Usage split for one request; records writes and refreshes hits (`dry_run`: only the tokens
        it would read, nothing recorded: what admission counts against the input-token limit)."""
        points: list[tuple[int, str]] = [
            (i, str(s.cache_control.get("ttl", "5m"))) for i, s in enumerate(segments) if s.cache_control
        ]
        if top_level and segments and not segments[-1].cache_control:
            points.append((len(segments) - 1, str(top_level.get("ttl", "5m"))))
        if not points:
            return CacheUsage(uncached=total_tokens)
        digest = hashlib.sha256(f"{scope}\x00{model}".encode())
        cumulative: list[int] = []
        hashes: list[str] = []
        running = 0
        for seg in segments:
            digest.update(b"\x00" + seg.key.encode())
            running += seg.tokens if counts_schema or seg.label != "format" else 0
            cumulative.append(running)
            hashes.append(digest.hexdigest())

        read_at = -1
        for idx, _ttl in reversed(points):
            entry = self.entries.get(hashes[idx])
            if entry is not None and entry.expires_at > now:
                if not dry_run:
                    entry.expires_at = now + entry.ttl
                read_at = idx
                break
        read = cumulative[read_at] if read_at >= 0 else 0
        if dry_run:
            return CacheUsage(read=read, uncached=max(total_tokens - read, 0))

        written = {"5m": 0, "1h": 0}
        covered = read
        for idx, ttl in points:
            if idx <= read_at or cumulative[idx] < min_tokens:
                continue
            seconds = TTL_SECONDS.get(ttl, 300.0)
            self.entries[hashes[idx]] = _Entry(now + seconds, seconds)
            written[ttl if ttl in written else "5m"] += cumulative[idx] - covered
            covered = cumulative[idx]
        uncached = max(total_tokens - covered, 0)
        return CacheUsage(read=read, write_5m=written["5m"], write_1h=written["1h"], uncached=uncached)

"""Pinned facts: exact facts a long task must never lose to a summary.

A pinned fact is one line of text owned by code, not by the model: a document id range, a
conflict with every value and its source, an entity. The whole set is re-sent verbatim on every
call as the last system block (outside the range any compaction summarizes) and mirrored in the
task's scratchpad file. After a compaction, `missing_from(request_text)` proves each line is
still in what the next request sends.

Each fact may carry `terms`: strings a summary should keep lines for (they feed the
`KEEP LINES CONTAINING:` line of the compaction contract).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

HEADER = "<pinned_facts>\nExact facts maintained by the pipeline (authoritative; quote them as written):"
FOOTER = "</pinned_facts>"
PREFIX = "FACT: "
_NUMBERED = re.compile(r"^(.*?)(\d+)$")


@dataclass(frozen=True)
class Fact:
    key: str
    text: str
    terms: tuple[str, ...] = ()


@dataclass
class PinnedFacts:
    """An ordered set of exact fact lines, keyed so code can update a fact in place."""

    facts: dict[str, Fact] = field(default_factory=dict)

    def set(self, key: str, text: str, *, terms: Iterable[str] = ()) -> None:
        if "\n" in text:
            raise ValueError("a pinned fact is one line; split it into several facts")
        self.facts[key] = Fact(key, text, tuple(t for t in terms if t))

    def __contains__(self, key: object) -> bool:
        return key in self.facts

    def __len__(self) -> int:
        return len(self.facts)

    def lines(self) -> list[str]:
        """Each fact exactly as it is sent."""
        return [PREFIX + f.text for f in self.facts.values()]

    def render(self) -> str:
        """The pinned block as sent (one `FACT:` line per fact)."""
        return "\n".join([HEADER, *self.lines(), FOOTER])

    def keep_terms(self, limit: int = 200) -> list[str]:
        """Distinct terms of all facts, first seen first, at most `limit` (newest facts win)."""
        seen: dict[str, None] = {}
        for fact in reversed(list(self.facts.values())):
            for term in fact.terms:
                clean = term.replace("|", " ").replace("\n", " ").strip()
                if clean and clean not in seen:
                    seen[clean] = None
            if len(seen) >= limit:
                break
        return list(reversed(list(seen)))[:limit]

    def missing_from(self, sent_text: str) -> list[str]:
        """Fact lines that do not appear verbatim in `sent_text`."""
        return [line for line in self.lines() if line not in sent_text]

    def to_json(self) -> list[dict[str, Any]]:
        return [{"key": f.key, "text": f.text, "terms": list(f.terms)} for f in self.facts.values()]

    @classmethod
    def from_json(cls, data: Iterable[dict[str, Any]]) -> PinnedFacts:
        out = cls()
        for item in data:
            out.set(str(item["key"]), str(item["text"]), terms=item.get("terms") or ())
        return out


def compress_ids(ids: Iterable[str]) -> list[str]:
    """Ids as lossless runs: `doc-0001..doc-0042` stands for every id between, same width.

    Ids without a numeric suffix stay as they are; nothing is lost (tests expand the runs back).
    """
    runs: list[list[str]] = []  # [first, last] of each run
    last: tuple[str, int, int, str] | None = None
    for key in sorted(map(_sort_key, set(ids))):
        stem, width, n, value = key
        if last is not None and width >= 0 and last[:3] == (stem, width, n - 1):
            runs[-1][1] = value
        else:
            runs.append([value, value])
        last = key
    return [first if first == end else f"{first}..{end}" for first, end in runs]


def _sort_key(value: str) -> tuple[str, int, int, str]:
    """(stem, width of its number, the number, the id); width -1 for an id without a number."""
    m = _NUMBERED.match(value)
    if not m:
        return (value, -1, 0, value)
    return (m.group(1), len(m.group(2)), int(m.group(2)), value)

"""Bounded plain-text digests the integration's model calls read (a leaf), and which results
the model reads in full.

- `state_digest`: what is already integrated (counts, largest entities, earlier findings).
- `delta_digest`: the results of this run's delta, summarised by code (values per field with
  counts, numeric ranges, conflicts and duplicates that involve them, gaps by reason).
- `choose_reading`: when the delta holds more than `integration.read_records` results, the model
  reads the delta digest plus that many results in full, chosen by priority (documents in a
  conflict or a duplicate, then those needing review, then an even spread), never all of them, so
  the cost of a run's integration is bounded whatever the corpus size.

Plain text only (no JSON objects with doc ids): the results the model may cite are the ones in
its `<per_file_results>`.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def state_digest(sections: dict[str, Any], documents: int, limit: int) -> str:
    """What is already integrated, in at most `limit` characters."""
    if not documents:
        return "Nothing is integrated yet."
    lines = [f"{documents} documents are already integrated."]
    entities = sorted(sections.get("entities") or [], key=lambda e: -len(e.get("doc_ids") or []))
    if entities:
        name = next((k for k in entities[0] if k != "doc_ids"), "name")
        top = ", ".join(f"{e.get(name)} ({len(e.get('doc_ids') or [])} documents)" for e in entities[:15])
        lines.append(f"{len(entities)} entities, the largest: {top}.")
    for section in ("duplicates", "conflicts", "coverage_gaps"):
        if sections.get(section):
            lines.append(f"{len(sections[section])} {section.replace('_', ' ')} so far.")
    lines += [f"Earlier finding: {f}" for f in (sections.get("key_findings") or [])[:10]]
    return _cut("\n".join(lines), limit)


def _field_lines(records: list[dict[str, Any]]) -> list[str]:
    values: dict[str, list[Any]] = {}
    for r in records:
        for k, v in r.items():
            if k not in ("doc_id", "state") and isinstance(v, str | int | float) and not isinstance(v, bool):
                values.setdefault(k, []).append(v)
    lines = []
    for name, vals in sorted(values.items()):
        nums = [float(v) for v in vals if isinstance(v, int | float)]
        if nums and len(nums) == len(vals):
            lines.append(
                f"- {name}: {len(nums)} values, min {min(nums):g}, median {statistics.median(nums):g}, "
                f"max {max(nums):g}, sum {sum(nums):.2f}"
            )
            continue
        counts = Counter(str(v) for v in vals)
        top = "; ".join(f"{v} ({n})" for v, n in counts.most_common(8))
        lines.append(f"- {name}: {len(counts)} distinct values; most common: {top}")
    return lines


def delta_digest(records: list[dict[str, Any]], facts: dict[str, Any], *, read: int, limit: int) -> str:
    """The delta's results summarised by code, in at most `limit` characters. `facts` holds the
    code-built conflicts and duplicates (each with its doc ids) of the whole corpus."""
    ids = {r["doc_id"] for r in records}
    states = Counter(str(r.get("state")) for r in records)
    lines = [
        f"This run integrates {len(records)} new or changed results "
        f"({', '.join(f'{k} {v}' for k, v in sorted(states.items()))}); {read} of them are shown in full "
        "below (documents in conflicts and duplicates first, then an even spread). Field values of all of them:",
        *_field_lines(records),
    ]
    conflicts = [
        c for c in facts.get("conflicts") or [] if ids & {v.get("doc_id") for v in c.get("values") or []}
    ]
    if conflicts:
        lines.append(f"{len(conflicts)} conflicts involve them, e.g.:")
        lines += [
            f"- {c.get('key')} {c.get('field')}: "
            + " vs ".join(f"{v.get('value')} ({v.get('doc_id')})" for v in c["values"][:4])
            for c in conflicts[:10]
        ]
    dups = [d for d in facts.get("duplicates") or [] if ids & set(d.get("doc_ids") or [])]
    if dups:
        lines.append(f"{len(dups)} duplicated keys involve them.")
    return _cut("\n".join(lines), limit)


def choose_reading(records: list[dict[str, Any]], facts: dict[str, Any], read: int) -> list[dict[str, Any]]:
    """All of `records` when they are at most `read`; else `read` of them by priority: documents in
    a conflict or a duplicate, then those not succeeded, then an even spread of the rest (doc id order)."""
    if len(records) <= read:
        return records
    hot: set[str] = {v.get("doc_id") for c in facts.get("conflicts") or [] for v in c.get("values") or []}
    hot |= {d for dup in facts.get("duplicates") or [] for d in dup.get("doc_ids") or []}
    first = [r for r in records if r["doc_id"] in hot]
    first += [r for r in records if r["doc_id"] not in hot and r.get("state") != "succeeded"]
    chosen = first[:read]
    taken = {r["doc_id"] for r in chosen}
    rest = [r for r in records if r["doc_id"] not in taken]
    room = read - len(chosen)
    if room > 0 and rest:
        step = len(rest) / room
        chosen += [rest[int(i * step)] for i in range(room)]
    return sorted(chosen, key=lambda r: r["doc_id"])

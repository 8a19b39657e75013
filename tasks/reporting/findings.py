"""Findings of a review recipe (code-review) gathered from every document's output (a leaf):
grouped by file, most severe first, each with its lines and the quoted code.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, TypedDict

SEVERITIES = ("critical", "high", "medium", "low", "info")


class FindingView(TypedDict):
    file: str
    doc_id: str
    lines: str  # "17" or "17-19"
    line_start: int
    severity: str
    category: str
    message: str
    quote: str


def _rank(severity: str) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


def findings_of(outcomes: list[dict[str, Any]]) -> list[FindingView]:
    """Every finding of every document (any state: a needs_review document's findings are shown
    too), sorted by file, then severity, then line."""
    out: list[FindingView] = []
    for o in outcomes:
        for f in (o.get("output") or {}).get("findings") or []:
            if not isinstance(f, dict) or "severity" not in f:
                continue
            start = int(f.get("line_start") or 0)
            end = int(f.get("line_end") or start)
            out.append(
                {
                    "file": str(f.get("file") or o["doc_id"]),
                    "doc_id": o["doc_id"],
                    "lines": str(start) if end <= start else f"{start}-{end}",
                    "line_start": start,
                    "severity": str(f.get("severity")),
                    "category": str(f.get("category") or ""),
                    "message": str(f.get("message") or ""),
                    "quote": str(f.get("quote") or ""),
                }
            )
    out.sort(key=lambda f: (f["file"], _rank(f["severity"]), f["line_start"]))
    return out


def by_file(findings: list[FindingView]) -> dict[str, list[FindingView]]:
    """The findings grouped by file, in their order."""
    groups: dict[str, list[FindingView]] = defaultdict(list)
    for f in findings:
        groups[f["file"]].append(f)
    return groups


def severity_counts(findings: list[FindingView]) -> dict[str, int]:
    c = Counter(f["severity"] for f in findings)
    return {s: c.get(s, 0) for s in SEVERITIES} | {s: n for s, n in c.items() if s not in SEVERITIES}


def has_findings(outcomes: list[dict[str, Any]]) -> bool:
    return any(isinstance((o.get("output") or {}).get("findings"), list) for o in outcomes)

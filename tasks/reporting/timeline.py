"""A run's timeline (a leaf): work submitted, in flight, ended and ingested from the run's start to
its end, the same picture for realtime and batch runs. Realtime: a document is submitted when its
first request was sent and ended (and ingested: gated at once) when its last answer came (cost-ledger
entries keep both times). Batch: a batch's requests are submitted, ended and ingested when the batch
was created, ended and collected (the batch records keep the three times). In flight = submitted -
ended; the x axis is wall-clock time (UTC) with offsets from the run's start, scaled to the span.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from datetime import datetime
from typing import Any, TypedDict

GRID = 300  # points per line in the chart


class Timeline(TypedDict):
    mode: str
    unit: str  # "documents" (realtime) or "requests" (batch)
    start: float | None
    end: float | None
    submitted: list[float]  # one time per unit of work, sorted
    ended: list[float]
    ingested: list[float]


def realtime_timeline(entries: list[dict[str, Any]], start: float | None, end: float | None) -> Timeline:
    sent: dict[str, float] = {}
    answered: dict[str, float] = {}
    for x in entries:
        if x.get("pass_name") == "integration" or x.get("batch") or x.get("at") is None:
            continue
        d = str(x["doc_id"])
        answered[d] = max(answered.get(d, 0.0), float(x["at"]))
        if x.get("sent_at") is not None:
            sent[d] = min(sent.get(d, float("inf")), float(x["sent_at"]))
    ended = sorted(answered.values())
    return {
        "mode": "realtime",
        "unit": "documents",
        "start": start,
        "end": end,
        "submitted": sorted(sent.values()),
        "ended": ended,
        "ingested": ended,
    }


def batch_timeline(batches: list[dict[str, Any]], start: float | None, end: float | None) -> Timeline:
    def times(field: str) -> list[float]:  # one time per request of each batch
        return sorted(
            float(b[field])
            for b in batches
            if b.get(field) is not None
            for _ in range(int(b.get("request_count") or 0))
        )

    return {
        "mode": "batch",
        "unit": "requests",
        "start": start,
        "end": end,
        "submitted": times("submitted_at"),
        "ended": times("ended_at"),
        "ingested": times("collected_at"),
    }


def bounds(t: Timeline) -> tuple[float, float] | None:
    times = [x for s in (t["submitted"], t["ended"], t["ingested"]) for x in (s[:1] + s[-1:])]
    times += [x for x in (t["start"], t["end"]) if x is not None]
    if len(times) < 2 or max(times) <= min(times):
        return None
    return min(times), max(times)


def span_text(seconds: float) -> str:
    """A duration scaled to its size: 250ms, 12.3s, 4m05s, 2h07m."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    total = round(seconds)
    h, rest = divmod(total, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def clock(t: float, span: float) -> str:
    text = time.strftime("%H:%M:%S", time.gmtime(t))
    return text if span >= 2 else f"{text}.{int(t * 1000) % 1000:03d}"


def timeline_svg(t: Timeline, width: int = 1000, height: int = 240) -> str:
    """The timeline as an inline SVG: submitted, ended, ingested (cumulative lines) and in flight
    (area), with wall-clock ticks."""
    b = bounds(t)
    if b is None or not (t["ended"] or t["submitted"]):
        return '<p class="muted" id="timeline-none">Not enough timed events for a timeline.</p>'
    t0, t1 = b
    span = t1 - t0
    left, right, top, bottom = 56, 48, 26, 40
    w, h = width - left - right, height - top - bottom
    grid = [t0 + span * i / (GRID - 1) for i in range(GRID)]
    lines = {k: [bisect_right(t[k], g) for g in grid] for k in ("submitted", "ended", "ingested")}  # type: ignore[literal-required]
    flight = [max(s - e, 0) for s, e in zip(lines["submitted"], lines["ended"], strict=True)]
    peak = max([1, *lines["submitted"], *lines["ended"], *lines["ingested"]])

    def xy(i: int, v: int) -> str:
        return f"{left + i / (GRID - 1) * w:.1f},{top + h - v / peak * h:.1f}"

    def poly(values: list[int], color: str, dash: str = "") -> str:
        pts = " ".join(xy(i, v) for i, v in enumerate(values))
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        return f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"{extra}/>'

    area = " ".join([xy(0, 0), *(xy(i, v) for i, v in enumerate(flight)), xy(GRID - 1, 0)])
    parts = [f'<polygon points="{area}" fill="#ffd8b5" stroke="none"/>']
    legend = [("#f08c00", "in flight", "")]
    if t["submitted"]:
        parts.append(poly(lines["submitted"], "#8250df", "5,3"))
        legend.append(("#8250df", "submitted", "5,3"))
    parts.append(poly(lines["ended"], "#1f6feb"))
    legend.append(("#1f6feb", "answered" if t["mode"] == "realtime" else "ended", ""))
    if t["mode"] == "batch":
        parts.append(poly(lines["ingested"], "#1a7f37", "2,2"))
        legend.append(("#1a7f37", "ingested", "2,2"))
    ticks = "".join(
        f'<text x="{left + f * w:.1f}" y="{height - 22}" font-size="11" text-anchor="middle" fill="#5b6478">'
        f"{clock(t0 + span * f, span)}</text>"
        f'<text x="{left + f * w:.1f}" y="{height - 8}" font-size="10" text-anchor="middle" fill="#8a93a6">'
        f"+{span_text(span * f)}</text>"
        for f in (0, 0.25, 0.5, 0.75, 1)
    )
    keys = "".join(
        f'<line x1="{left + 8 + i * 120}" y1="14" x2="{left + 28 + i * 120}" y2="14" stroke="{c}" '
        f'stroke-width="{6 if n == "in flight" else 2}"' + (f' stroke-dasharray="{d}"' if d else "") + "/>"
        f'<text x="{left + 32 + i * 120}" y="18" font-size="12" fill="#1d2330">{n}</text>'
        for i, (c, n, d) in enumerate(legend)
    )
    return (
        f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{t["unit"]} submitted, in flight, ended over time">'
        f'<line x1="{left}" y1="{top + h}" x2="{left + w}" y2="{top + h}" stroke="#8a93a6"/>'
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + h}" stroke="#8a93a6"/>'
        + "".join(parts)
        + f'<text x="{left - 6}" y="{top + 4}" font-size="11" text-anchor="end" fill="#5b6478">{peak}</text>'
        f'<text x="{left - 6}" y="{top + h}" font-size="11" text-anchor="end" fill="#5b6478">0</text>'
        f"{ticks}{keys}</svg>"
    )


def timeline_text(t: Timeline) -> str:
    """One paragraph of the same facts for report.md."""
    b = bounds(t)
    if b is None:
        return "Not enough timed events for a timeline."
    t0, _ = b

    def at(series: list[float]) -> str:
        if not series:
            return "-"
        return f"{len(series)} {t['unit']}, first +{span_text(series[0] - t0)}, last +{span_text(series[-1] - t0)}"

    flight = run = 0
    for _, d in sorted([(x, 1) for x in t["submitted"]] + [(x, -1) for x in t["ended"]]):
        run += d
        flight = max(flight, run)
    rows = [
        f"- submitted: {at(t['submitted'])}",
        f"- {'answered' if t['mode'] == 'realtime' else 'ended'}: {at(t['ended'])}",
    ]
    if t["mode"] == "batch":
        rows.append(f"- ingested: {at(t['ingested'])}")
    if t["submitted"]:
        rows.append(f"- most in flight at once: {flight} {t['unit']}")
    return "\n".join(rows)


def epoch(value: Any) -> float | None:
    """Unix seconds of a manifest timestamp (ISO text or number)."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return None


def run_timeline(
    manifest: dict[str, Any], entries: list[dict[str, Any]], batches: list[dict[str, Any]] | None
) -> Timeline:
    """The timeline of a run: from its batch records in batch mode, else from its cost entries."""
    start, end = epoch(manifest.get("created_at")), epoch(manifest.get("updated_at"))
    if manifest.get("mode") == "batch" and batches:
        return batch_timeline(batches, start, end)
    return realtime_timeline(entries, start, end)


def span_texts(t: Timeline) -> tuple[str, str, str]:
    """When the run started (created) and ended (the last of its manifest update and its last
    event), and how long it took ("?" where unknown)."""
    start = t["start"]
    ends = [x for x in (t["end"], *t["ingested"][-1:], *t["ended"][-1:]) if x]
    end = max(ends) if ends else None
    fmt = "%Y-%m-%d %H:%M:%SZ"
    took = span_text(end - start) if start and end and end >= start else "?"
    started, ended = (time.strftime(fmt, time.gmtime(x)) if x else "?" for x in (start, end))
    return started, ended, took

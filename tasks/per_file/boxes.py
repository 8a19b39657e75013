"""Evidence on the page: each verified evidence span of a PDF's text layer gets the boxes of its
characters (`boxes`: `[page, left, top, right, bottom]`, one per line segment, as shares of the page
as shown, origin top left) and their union on its page (`bbox`), stored with the rest of its
provenance (`{start, end, page, verified}`, tasks.per_file.gate) and exported as
`value.<field>.bbox`.

Only spans the gate found in the text layer are boxed; evidence on a page without a text layer
(a scan: `verified: false`) keeps the model's page citation and gets no box (never a made-up one).
"""

from __future__ import annotations

from typing import Any

from tasks.request import Payload
from tasks.source.readers.pdf_text import span_boxes


def union(boxes: list[list[float]]) -> list[float]:
    """The smallest box holding every `[page, left, top, right, bottom]` given (without the page)."""
    return [
        min(b[1] for b in boxes),
        min(b[2] for b in boxes),
        max(b[3] for b in boxes),
        max(b[4] for b in boxes),
    ]


def with_boxes(payload: Payload, offsets: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """`offsets` (path -> where an excerpt sits) with `boxes` and `bbox` added to every span found in
    a PDF's text layer; unchanged for other documents."""
    if payload.pdf is None or not payload.content.pages or payload.first_page != 1:
        return offsets
    items = [
        (path, where)
        for path, where in offsets.items()
        if where.get("verified") and where.get("start") is not None and where.get("end") is not None
    ]
    if not items:
        return offsets
    spans = [(int(w["start"]), int(w["end"])) for _, w in items]
    try:
        found = span_boxes(payload.pdf, payload.content.text, payload.content.pages, spans)
    except Exception:  # boxes are an aid: a PDF pdfium cannot reopen keeps its offsets and pages
        return offsets
    out = dict(offsets)
    for (path, where), boxes in zip(items, found, strict=True):
        if boxes:
            listed = [list(b) for b in boxes]
            on_page = [b for b in listed if b[0] == where.get("page")] or listed
            out[path] = {**where, "boxes": listed, "bbox": union(on_page)}
    return out

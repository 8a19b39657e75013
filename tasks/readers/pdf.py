"""PDFs, read with pypdf (BSD-3-Clause, pure Python, already docmill's PDF library).

The text layer is extracted page by page (pages joined by a form feed, so the long-document path
cuts at pages and every offset maps to its page). A page whose text layer has fewer than
`min_chars` visible characters is *textless* (a scan, a photo of a page, a chart): such a PDF is
sent to the API as what it is, a `document` block (tasks.per_file.media). What each page costs as
an image is computed from its size with the API's image rule, so estimates count pages as the API
bills them.

Refused, each with its reason: encrypted (the API takes no encrypted PDF), corrupt (pypdf cannot
parse it), empty (no pages, or pages with neither text nor images), over_limit (more pages than
`max_pages`).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable
from typing import Any

from docmill.api_media import RENDER_SCALE
from tasks.readers.content import PDF_MEDIA_TYPE, Content, Unreadable, image_tokens, paged

DEFAULT_MIN_CHARS = 40
DEFAULT_MAX_PAGES = 1000


def _quiet() -> None:
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # broken files are reported by us, not logged


def open_pdf(data: bytes) -> Any:
    """A pypdf reader, or Unreadable (corrupt, encrypted)."""
    from pypdf import PdfReader

    _quiet()
    try:
        reader = PdfReader(io.BytesIO(data))
        encrypted = reader.is_encrypted
    except Exception as e:  # pypdf raises many kinds on broken files; a bad file must never crash a run
        raise Unreadable("corrupt", f"invalid PDF: {type(e).__name__}: {e}".splitlines()[0][:200]) from e
    if encrypted:
        raise Unreadable("encrypted", "PDF is encrypted (password protected); the API takes no encrypted PDF")
    return reader


def _visible(text: str) -> int:
    return sum(1 for ch in text if not ch.isspace())


def _has_marks(page: Any) -> bool:
    """Whether a page without text draws anything (an image or a non-empty content stream)."""
    try:
        resources = page.get("/Resources")
        xobjects = resources.get_object().get("/XObject") if resources is not None else None
        if xobjects is not None and len(xobjects.get_object()) > 0:
            return True
        contents = page.get_contents()
        return contents is not None and len(contents.get_data().strip()) > 0
    except Exception:
        return True  # cannot tell: assume it shows something (sent as a PDF, never silently dropped)


def _page_tokens(page: Any) -> int:
    box = page.mediabox
    w, h = float(box.width), float(box.height)
    return image_tokens(w * RENDER_SCALE, h * RENDER_SCALE)


def read_pdf(
    data: bytes, *, min_chars: int = DEFAULT_MIN_CHARS, max_pages: int = DEFAULT_MAX_PAGES
) -> Content:
    """The text layer page by page, textless pages, and what the pages cost as images."""
    reader = open_pdf(data)
    try:
        n = len(reader.pages)
        if n == 0:
            raise Unreadable("empty", "PDF has no pages")
        if n > max_pages:
            raise Unreadable(
                "over_limit", f"PDF has {n} pages, more than formats.max_pdf_pages ({max_pages}); split it"
            )
        texts: list[str] = []
        textless: list[int] = []
        tokens = 0
        marks = False
        for i, page in enumerate(reader.pages, start=1):
            text = (page.extract_text() or "").strip()
            texts.append(text)
            tokens += _page_tokens(page)
            if _visible(text) < min_chars:
                textless.append(i)
                marks = marks or _has_marks(page)
            else:
                marks = True
    except Unreadable:
        raise
    except Exception as e:
        raise Unreadable("corrupt", f"invalid PDF: {type(e).__name__}: {e}".splitlines()[0][:200]) from e
    if not marks:
        raise Unreadable("empty", f"PDF has {n} page(s) with neither text nor images")
    text, pages = paged(texts)
    return Content(text, pages, "page", PDF_MEDIA_TYPE, n, tuple(textless), tokens)


def page_range(data: bytes, pages: Iterable[int]) -> bytes:
    """A PDF of the given pages (1-based, in order) of `data`: one part of a long PDF."""
    from pypdf import PdfWriter

    reader = open_pdf(data)
    writer = PdfWriter()
    for number in pages:
        writer.add_page(reader.pages[number - 1])
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue()

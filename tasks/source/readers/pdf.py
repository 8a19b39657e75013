"""PDFs: the text layer read with pdfium (pypdfium2, tasks.source.readers.pdf_text), page ranges written with
pypdf (BSD-3-Clause).

The text layer is read page by page (pages joined by a form feed, so the long-document path cuts at
pages and every offset maps to its page). A page with fewer than `min_chars` visible characters, or
a *poor* layer, is *textless* (a scan, a chart, a garbled layer): its text is left out, and such a
PDF goes to the API as a `document` block (tasks.request) so the model reads the page itself. Each
page's cost as an image is computed from its size with the API's image rule.

Refused, each with its reason: encrypted (the API takes none), corrupt (neither pdfium nor pypdf
can parse it), empty (no pages, or pages with neither text nor images), over_limit (more pages than
`max_pages`).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable
from typing import Any

from docmill.api_media import RENDER_SCALE
from tasks.source.readers.content import PDF_MEDIA_TYPE, Content, Unreadable, corrupt, image_tokens, paged
from tasks.source.readers.pdf_text import PDFIUM_LOCK, open_document, page_text, poor_text, visible_chars

DEFAULT_MIN_CHARS = 40
DEFAULT_MAX_PAGES = 1000
ENCRYPTED = "PDF is encrypted (password protected); the API takes no encrypted PDF"


def open_pdf(data: bytes) -> Any:
    """A pypdf reader, or Unreadable (corrupt, encrypted)."""
    from pypdf import PdfReader

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # broken files are reported by us, not logged
    try:
        reader = PdfReader(io.BytesIO(data))
        encrypted = reader.is_encrypted
    except Exception as e:  # pypdf raises many kinds on broken files; a bad file must never crash a run
        raise corrupt("PDF", e) from e
    if encrypted:
        raise Unreadable("encrypted", ENCRYPTED)
    return reader


def _refusal(data: bytes, e: Exception) -> Unreadable:
    """Why pdfium could not open `data`, as pypdf tells it: encrypted, empty, corrupt (pdfium's own
    error code is not reset between calls, and it refuses a PDF without pages as a format error)."""
    try:
        reader = open_pdf(data)
        if len(reader.pages) == 0:
            return Unreadable("empty", "PDF has no pages")
    except Unreadable as refused:
        return refused
    except Exception as e2:  # pypdf raises many kinds on broken files
        return corrupt("PDF", e2)
    return corrupt("PDF", e)


def read_pdf(
    data: bytes, *, min_chars: int = DEFAULT_MIN_CHARS, max_pages: int = DEFAULT_MAX_PAGES
) -> Content:
    """The text layer page by page, textless (or poor) pages, and what the pages cost as images."""
    import pypdfium2.raw as raw

    texts: list[str] = []
    textless: list[int] = []
    tokens = 0
    marks = False
    with PDFIUM_LOCK:
        try:
            doc = open_document(data)
        except Exception as e:  # pdfium's PdfiumError, or a ctypes error on hostile input
            raise _refusal(data, e) from e
        try:
            if raw.FPDF_GetSecurityHandlerRevision(doc) != -1:
                raise Unreadable("encrypted", ENCRYPTED)
            n = len(doc)
            if n == 0:
                raise Unreadable("empty", "PDF has no pages")
            if n > max_pages:
                raise Unreadable(
                    "over_limit",
                    f"PDF has {n} pages, more than formats.max_pdf_pages ({max_pages}); split it",
                )
            for i in range(n):
                page = doc[i]
                try:
                    w, h = page.get_size()
                    tokens += image_tokens(w * RENDER_SCALE, h * RENDER_SCALE)
                    textpage = page.get_textpage()
                    try:
                        text, map_errors = page_text(textpage)
                    finally:
                        textpage.close()
                    poor = poor_text(text, map_errors)
                    if poor or visible_chars(text) < min_chars:
                        textless.append(i + 1)
                        marks = marks or poor or raw.FPDFPage_CountObjects(page) > 0
                        text = "" if poor else text  # a garbled layer says nothing: the model reads the page
                    else:
                        marks = True
                    texts.append(text)
                finally:
                    page.close()
        except Unreadable:
            raise
        except Exception as e:
            raise corrupt("PDF", e) from e
        finally:
            doc.close()
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

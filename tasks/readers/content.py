"""What a reader gives back, and why it may refuse (a leaf: standard library only).

`Content` is one document as docmill can send it: its text layer (pages joined by a form feed, with
their spans), and for PDFs and images what the API needs to receive them as they are (media type,
pages, pixels, and what those cost as images by the API's published rule). `Part` is an e-mail
attachment; the inventory makes each one its own document.

`Unreadable` carries the inventory's skip reason (its `reason`) and a one-line detail: a file that
is encrypted, corrupt, over a limit, macro-enabled, or a forwarding loop is reported with that
reason and never stops a run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# The API's image rule (docs, vision and PDF support): an image whose long edge passes 1,568 px, or
# that would cost more than ~1,600 tokens, is scaled down first; an image costs width x height / 750
# tokens. A PDF page is sent as its text plus an image of the page.
IMAGE_LONG_EDGE = 1568
IMAGE_MAX_TOKENS = 1600
PIXELS_PER_TOKEN = 750
# What the API takes per request (docs; reference 000.5): 100 PDF pages, 32 MB the whole request,
# 8,000 px a side (2,000 with more than 20 images), 5 MB an image, jpeg/png/gif/webp.
API_MAX_PDF_PAGES = 100
API_MAX_REQUEST_BYTES = 32 * 1024 * 1024
API_MAX_IMAGE_SIDE = 8000
API_MAX_IMAGE_BYTES = 5 * 1024 * 1024
API_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
PDF_MEDIA_TYPE = "application/pdf"


def image_tokens(width: float, height: float) -> int:
    """Tokens of one image (or one rendered PDF page) as the API bills it."""
    if width <= 0 or height <= 0:
        return 0
    scale = min(1.0, IMAGE_LONG_EDGE / max(width, height))
    w, h = width * scale, height * scale
    return min(IMAGE_MAX_TOKENS, max(1, math.ceil(w * h / PIXELS_PER_TOKEN)))


class ExtractError(ValueError):
    """The bytes cannot be turned into text of their type (skip reason `undecodable`)."""

    reason = "undecodable"


class BinaryContent(ExtractError):
    """NUL bytes in a text type: the file is binary whatever its name says."""

    reason = "binary"


class Unreadable(ExtractError):
    """A file refused with a named reason: encrypted, corrupt, over_limit, macro_enabled,
    forward_loop, empty, unsupported_type."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class OverLimit(Unreadable):
    """Reading stopped at a bound (tasks.readers.bounded): `limit` is "memory" (bytes of address
    space) or "time" (seconds), `value` the bound; the reason is `over_limit`."""

    def __init__(self, limit: str, value: float, detail: str) -> None:
        super().__init__("over_limit", detail)
        self.limit = limit
        self.value = value

    def __reduce__(self) -> tuple[type[OverLimit], tuple[str, float, str]]:
        return (OverLimit, (self.limit, self.value, str(self)))


@dataclass(frozen=True)
class Page:
    """One page (slide, sheet) of the text layer: `text[start:end]`, numbered from 1."""

    number: int
    start: int
    end: int


@dataclass(frozen=True)
class Part:
    """One attachment of an e-mail: its file name, MIME type and bytes (decoded)."""

    name: str
    content_type: str
    data: bytes


@dataclass(frozen=True)
class Content:
    """A document as read: the text layer and, for PDFs and images, what the API receives."""

    text: str
    pages: tuple[Page, ...] = ()
    unit: str = "page"  # what a page is called: page, slide, sheet
    media_type: str | None = None  # PDFs and images (what a document / image block carries)
    page_count: int = 0  # PDF pages, slides, sheets; 1 for an image
    textless_pages: tuple[int, ...] = ()  # PDF pages whose text layer is missing or poor
    image_tokens: int = 0  # the pages (or the image) as the API bills them as images
    width: int = 0  # images: pixels
    height: int = 0
    encoding: str | None = None  # text read in another encoding than UTF-8
    guessed: bool = False  # `encoding` was detected (charset-normalizer), not declared
    parts: tuple[Part, ...] = field(default=(), repr=False)  # e-mail attachments
    message_id: str | None = None  # e-mail: its Message-ID (forwarding loops)

    def page_of(self, offset: int) -> int | None:
        """The page (slide, sheet) whose span holds character `offset`, or None without pages."""
        for page in self.pages:
            if page.start <= offset < max(page.end, page.start + 1):
                return page.number
        return None


def paged(texts: list[str], unit: str = "page") -> tuple[str, tuple[Page, ...]]:
    """Page texts joined by a form feed, with each page's span in the joined text."""
    spans: list[Page] = []
    pos = 0
    for i, t in enumerate(texts, start=1):
        spans.append(Page(i, pos, pos + len(t)))
        pos += len(t) + 1
    return "\f".join(texts), tuple(spans)


def sent_as(content: Content, pdf_send_as: str = "auto") -> str | None:
    """How a document goes to the API by default (settings.formats.pdf_send_as): "image" for an
    image, "pdf" for a PDF with a textless page (or no text at all), or when `pdf_send_as` is "pdf";
    "text" for other PDFs; None for formats that only have text."""
    if content.media_type is None:
        return None
    if content.media_type != PDF_MEDIA_TYPE:
        return "image"
    if not content.text.strip() or pdf_send_as == "pdf":
        return "pdf"
    if pdf_send_as == "text":
        return "text"
    return "pdf" if content.textless_pages else "text"

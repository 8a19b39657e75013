"""What a reader gives back, and why it may refuse (a leaf: the standard library and docmill.api_media).

`Content` is one document as docmill can send it: its text layer (pages joined by a form feed, with
their spans) and, for PDFs and images, what the API needs to receive them as they are and what they
cost as images. `Part` is an e-mail attachment (the inventory makes each its own document).
`Unreadable` carries the inventory's skip reason and a one-line detail; every reader's message
passes through `ExtractError`, which drops memory addresses, so a reason reads the same run to run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# The API's image rule (docmill.api_media), re-exported under the readers' names
from docmill.api_media import PDF_MEDIA_TYPE as PDF_MEDIA_TYPE
from docmill.api_media import image_tokens as image_tokens

# What the API takes per request (docs; reference 000.5): 100 PDF pages, 32 MB the whole request,
# 8,000 px a side (2,000 with more than 20 images), 5 MB an image, jpeg/png/gif/webp.
API_MAX_PDF_PAGES = 100
API_MAX_REQUEST_BYTES = 32 * 1024 * 1024
API_MAX_IMAGE_SIDE = 8000
API_MAX_IMAGE_BYTES = 5 * 1024 * 1024

_OBJECT_REPR = re.compile(r"\s*<[^<>]*\bat 0x[0-9a-fA-F]+>")
_ADDRESS = re.compile(r"\s*\bat 0x[0-9a-fA-F]+\b|\b0x[0-9a-fA-F]{8,}\b")


def stable_detail(message: str) -> str:
    """`message` without memory addresses: an object's repr (`<_io.BytesIO object at 0x...>`) goes,
    a bare long hex address becomes `0x?`. Reasons are shown to users and compared run to run."""
    message = _OBJECT_REPR.sub("", message)
    return _ADDRESS.sub(lambda m: "" if "at" in m.group(0) else "0x?", message)


class ExtractError(ValueError):
    """The bytes cannot be turned into text of their type (skip reason `undecodable`). Its message
    is made stable (`stable_detail`): the one place every reader's reason is built."""

    reason = "undecodable"

    def __init__(self, message: object = "") -> None:
        super().__init__(stable_detail(str(message)))


class BinaryContent(ExtractError):
    """NUL bytes in a text type: the file is binary whatever its name says."""

    reason = "binary"


class Unreadable(ExtractError):
    """A file refused with a named reason: encrypted, corrupt, over_limit, macro_enabled,
    forward_loop, empty, no_text, unsupported_type."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def corrupt(what: str, e: BaseException) -> Unreadable:
    """`corrupt`: what a library raised on a broken file, in one line (`invalid PDF: <type>: <message>`)."""
    return Unreadable("corrupt", f"invalid {what}: {type(e).__name__}: {e}".splitlines()[0][:200])


class OverLimit(Unreadable):
    """Reading stopped at a bound (tasks.source.readers.bounded): `limit` is "memory" (bytes of address
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


def paged(texts: list[str]) -> tuple[str, tuple[Page, ...]]:
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

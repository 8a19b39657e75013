"""PDF `document` blocks and `image` blocks as the API takes them: checked, billed, read.

Checks, with the API's messages where they are known (reference 000.5; public issue threads):
a base64 PDF must be a valid, unencrypted PDF ("The PDF specified was not valid.", "encrypted PDFs
are not supported"), at most 100 PDF pages in one request ("A maximum of 100 PDF pages may be
provided."); an image must be jpeg/png/gif/webp, match its media type, be at most 5 MB and 8,000 px
a side (2,000 with more than 20 images; `image_dimensions_too_large`), at most 100 in one request.
URL and Files API sources are refused: the emulator is offline and has no Files API.

Billing (the API's published rule): a PDF page costs its text (4 characters a token) plus an image of
the page (rendered with its long edge at 1,568 px: width x height / 750 tokens, at most 1,600); an
image costs width x height / 750 tokens after the same scaling. Written here apart from
`docmill.api_media` on purpose: the bill that docmill's estimate is measured against must not be
computed by the estimate's own code.

Reading: a page's text layer is what the model reads of it; a page without one is read from the OCR
hint a test embedded in the file (the PDF's `/DocmillOCR` information entry, pages split by form
feeds; a PNG `DocmillOCR` text chunk; a JPEG comment `DocmillOCR:...`). The emulator cannot look at
pixels; a real model would. Without a hint a scanned page reads as nothing.
"""

from __future__ import annotations

import base64
import io
import logging
import math
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

IMAGE_LONG_EDGE = 1568
IMAGE_MAX_TOKENS = 1600
PIXELS_PER_TOKEN = 750
PAGE_RENDER_SCALE = 1568 / 792  # a Letter page rendered with its long edge at 1,568 px
MAX_PDF_PAGES = 100
MAX_IMAGES = 100
MAX_IMAGE_SIDE = 8000
MAX_IMAGE_SIDE_MANY = 2000  # with more than 20 images in one request
MAX_IMAGE_BYTES = 5 * 1024 * 1024
IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
PIL_TYPES = {"JPEG": "image/jpeg", "PNG": "image/png", "GIF": "image/gif", "WEBP": "image/webp"}
OCR_KEY = "DocmillOCR"


def image_tokens(width: float, height: float) -> int:
    if width <= 0 or height <= 0:
        return 0
    scale = min(1.0, IMAGE_LONG_EDGE / max(width, height))
    return min(IMAGE_MAX_TOKENS, max(1, math.ceil(width * scale * height * scale / PIXELS_PER_TOKEN)))


class MediaError(ValueError):
    """Why the API would refuse a block; `field` is the path suffix the message names."""

    def __init__(
        self, field: str, message: str, *, code: str | None = None, extra: dict[str, Any] | None = None
    ):
        super().__init__(message)
        self.field, self.message, self.code, self.extra = field, message, code, extra or {}


@dataclass(frozen=True)
class Pdf:
    pages: tuple[str, ...]  # what the model reads of each page (text layer, else the OCR hint)
    tokens: int  # billed input tokens


@dataclass(frozen=True)
class Picture:
    width: int
    height: int
    text: str  # the OCR hint
    tokens: int


def _b64(data: Any, field: str) -> bytes:
    if not isinstance(data, str):
        raise MediaError(field, "Input should be a valid string")
    try:
        return base64.b64decode(data, validate=True)
    except ValueError as e:  # binascii.Error included
        raise MediaError(field, "Invalid base64 data") from e


@lru_cache(maxsize=16)
def read_pdf(data: str) -> Pdf:
    """The pages of a base64 PDF (MediaError when the API would refuse it)."""
    from pypdf import PdfReader

    raw = _b64(data, "pdf.source.base64.data")
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(raw))
        if reader.is_encrypted:
            raise MediaError("pdf.source.base64.data", "encrypted PDFs are not supported")
        info: Any = reader.metadata or {}
        hint = str(info.get("/" + OCR_KEY) or "").split("\f")
        pages, tokens = [], 0
        for i, page in enumerate(reader.pages):
            text = (page.extract_text() or "").strip()
            box = page.mediabox
            tokens += math.ceil(len(text) / 4) + image_tokens(
                float(box.width) * PAGE_RENDER_SCALE, float(box.height) * PAGE_RENDER_SCALE
            )
            seen = text if len("".join(text.split())) >= 20 else (hint[i] if i < len(hint) else text)
            pages.append(seen)
    except MediaError:
        raise
    except Exception as e:
        raise MediaError("pdf.source.base64.data", "The PDF specified was not valid.") from e
    if not pages:
        raise MediaError("pdf.source.base64.data", "The PDF specified was not valid.")
    return Pdf(tuple(pages), tokens)


@lru_cache(maxsize=16)
def read_image(media_type: str, data: str) -> Picture:
    """A base64 image (MediaError when the API would refuse it)."""
    from PIL import Image

    if media_type not in IMAGE_TYPES:
        raise MediaError(
            "image.source.base64.media_type",
            "Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'",
        )
    raw = _b64(data, "image.source.base64.data")
    if len(data) > MAX_IMAGE_BYTES:
        raise MediaError(
            "image.source.base64", f"image exceeds 5 MB maximum: {len(data)} bytes > {MAX_IMAGE_BYTES} bytes"
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(raw)) as im:
                fmt, (w, h) = str(im.format), im.size
                text = str(im.info.get(OCR_KEY) or "")
                comment = im.info.get("comment")
    except Image.DecompressionBombError as e:  # far past 8,000 x 8,000 px (never decoded)
        raise MediaError(
            "image",
            f"image dimensions exceed max allowed size: {MAX_IMAGE_SIDE} pixels",
            code="image_dimensions_too_large",
            extra={"max_side_length_pixels": MAX_IMAGE_SIDE},
        ) from e
    except Exception as e:
        raise MediaError("image.source.base64.data", "Could not process image") from e
    if PIL_TYPES.get(fmt) != media_type:
        raise MediaError(
            "image.source.base64.data", f"Image does not match the provided media type {media_type}"
        )
    if isinstance(comment, bytes) and comment.startswith(OCR_KEY.encode() + b":"):
        text = comment[len(OCR_KEY) + 1 :].decode("utf-8", "replace")
    return Picture(w, h, text, image_tokens(w, h))


def read_media(block: Any) -> Pdf | Picture | None:
    """The base64 PDF or image a block holds, read (None: not one, or not readable)."""
    source = block.get("source") if isinstance(block, dict) else None
    if not isinstance(source, dict) or source.get("type") != "base64":
        return None
    try:
        if block.get("type") == "document" and source.get("media_type") == "application/pdf":
            return read_pdf(str(source.get("data")))
        if block.get("type") == "image":
            return read_image(str(source.get("media_type")), str(source.get("data")))
    except MediaError:
        return None
    return None


def _base64_source(block: dict[str, Any], other: tuple[str, ...]) -> dict[str, Any] | None:
    """A media block's base64 source (None: one of the `other` source types, which hold no media)."""
    source = block.get("source")
    if not isinstance(source, dict):
        raise MediaError("source", "Field required")
    kind = source.get("type")
    if kind in other:
        return None
    if kind in ("url", "file"):
        raise MediaError("source", f"{kind} sources are not available in the offline emulator; send base64")
    if kind != "base64":
        allowed = "".join(f"'{k}', " for k in ("base64", *other))
        raise MediaError("source.type", f"Input should be {allowed}'url' or 'file'")
    return source


def check_request(messages: list[Any]) -> None:
    """Every document and image block of a request, and the request's page and image limits.
    Raises MediaError with `field` the full path (messages.i.content.j....)."""
    pages = 0
    images: list[tuple[str, Picture]] = []
    for i, msg in enumerate(messages):
        content = msg.get("content") if isinstance(msg, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else []):
            if not isinstance(block, dict) or block.get("type") not in ("document", "image"):
                continue
            path = f"messages.{i}.content.{j}"
            try:
                document = block["type"] == "document"
                source = _base64_source(block, ("text", "content") if document else ())
                if source is None:
                    continue
                data = source.get("data") if isinstance(source.get("data"), str) else ""
                if not document:
                    images.append((path, read_image(str(source.get("media_type")), str(data))))
                    continue
                if source.get("media_type") != "application/pdf":
                    raise MediaError("source.media_type", "Input should be 'application/pdf'")
                pages += len(read_pdf(str(data)).pages)
                if pages > MAX_PDF_PAGES:
                    raise MediaError("pdf.source.base64.data", "A maximum of 100 PDF pages may be provided.")
            except MediaError as e:
                e.field = f"{path}.{e.field}"
                raise
    if len(images) > MAX_IMAGES:
        raise MediaError(images[MAX_IMAGES][0], f"A maximum of {MAX_IMAGES} images may be provided.")
    side = MAX_IMAGE_SIDE_MANY if len(images) > 20 else MAX_IMAGE_SIDE
    too_large = [path for path, pic in images if max(pic.width, pic.height) > side]
    if too_large:
        raise MediaError(
            too_large[0],
            f"image dimensions exceed max allowed size: {side} pixels",
            code="image_dimensions_too_large",
            extra={"max_side_length_pixels": side, "paths": too_large},
        )

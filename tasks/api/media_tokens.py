"""What a base64 `document` (PDF) or `image` block costs in input tokens, as the API bills it:
every PDF page as its text (4 characters a token) plus an image of the page, an image by its
pixels (docmill.api_media.image_tokens). Used by the request estimate that paces and budgets
every call (tasks.api.usage) and by `docmill estimate` (tasks.cost.sizing), so a PDF is never counted as
characters of base64.
Measured once per distinct block (the data string is the cache key).
"""

from __future__ import annotations

import base64
import binascii
import io
import math
from functools import lru_cache
from typing import Any

from docmill.api_media import PDF_MEDIA_TYPE, RENDER_SCALE, image_tokens

FALLBACK_PAGE_TOKENS = 1600  # a PDF that cannot be measured here: the API's per-page image at most


@lru_cache(maxsize=64)
def _measure(media_type: str, data: str) -> int:
    try:
        raw = base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        return math.ceil(len(data) / 4)
    if media_type == PDF_MEDIA_TYPE:
        return _pdf_tokens(raw)
    return _image_tokens(raw)


def _pdf_tokens(raw: bytes) -> int:
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(raw))
        total = 0
        for page in reader.pages:
            text = (page.extract_text() or "").strip()
            box = page.mediabox
            total += math.ceil(len(text) / 4) + image_tokens(
                float(box.width) * RENDER_SCALE, float(box.height) * RENDER_SCALE
            )
        return total
    except Exception:
        return FALLBACK_PAGE_TOKENS


def _image_tokens(raw: bytes) -> int:
    import warnings

    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(raw)) as im:
                w, h = im.size
    except Exception:
        return FALLBACK_PAGE_TOKENS
    return image_tokens(w, h)


def media_block_tokens(block: Any) -> int | None:
    """Tokens of a base64 PDF `document` block or `image` block; None for any other block."""
    if not isinstance(block, dict) or block.get("type") not in ("document", "image"):
        return None
    source = block.get("source")
    if (
        not isinstance(source, dict)
        or source.get("type") != "base64"
        or not isinstance(source.get("data"), str)
    ):
        return None
    return _measure(str(source.get("media_type")), source["data"])

"""The API's published rule for what media costs (a leaf: standard library only), shared by the readers
(what a document will cost as images) and the request estimate that paces and budgets every call
(tasks.api.media_tokens), so both count an image or a PDF page the same way.

An image whose long edge passes 1,568 px, or that would cost more than ~1,600 tokens, is scaled down
first; an image costs width x height / 750 tokens. A PDF page is sent as its text plus an image of the
page, rendered with its long edge at 1,568 px (a Letter page: 1568 / 792 of its points).
"""

from __future__ import annotations

import math

IMAGE_LONG_EDGE = 1568
IMAGE_MAX_TOKENS = 1600
PIXELS_PER_TOKEN = 750
RENDER_SCALE = 1568 / 792  # a Letter page rendered with its long edge at the API's 1,568 px
PDF_MEDIA_TYPE = "application/pdf"


def image_tokens(width: float, height: float) -> int:
    """Tokens of one image (or one rendered PDF page) as the API bills it."""
    if width <= 0 or height <= 0:
        return 0
    scale = min(1.0, IMAGE_LONG_EDGE / max(width, height))
    w, h = width * scale, height * scale
    return min(IMAGE_MAX_TOKENS, max(1, math.ceil(w * h / PIXELS_PER_TOKEN)))

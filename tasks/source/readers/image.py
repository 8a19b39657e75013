"""Images (png, jpg/jpeg, gif, webp), read with Pillow (MIT-CMU): header only, never decoded.

An image has no text layer; it is sent as an `image` block. What docmill checks before sending:
the format is one the API takes, the bytes are a valid image (`verify`), the long side is within
the API's 8,000 px and the file within its 5 MB (base64) per image. A 20,000 x 20,000 px image is
refused as `over_limit` from its header, without decoding 400 megapixels.
"""

from __future__ import annotations

import io
import warnings

from tasks.source.readers.content import (
    API_MAX_IMAGE_BYTES,
    API_MAX_IMAGE_SIDE,
    Content,
    Unreadable,
    corrupt,
    image_tokens,
)

MEDIA_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}


def read_image(data: bytes) -> Content:
    """Media type, pixels and tokens of an image; Unreadable when the API would refuse it."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DecompressionBombWarning: the size check below decides
            with Image.open(io.BytesIO(data)) as im:
                fmt, (w, h) = str(im.format), im.size
                im.verify()
    except Image.DecompressionBombError as e:
        why = str(e).split(",")[0]
        raise Unreadable(
            "over_limit",
            f"{why}: over the API's {API_MAX_IMAGE_SIDE} x {API_MAX_IMAGE_SIDE} px; never decoded",
        ) from e
    except Exception as e:
        raise corrupt("image", e) from e
    media_type = MEDIA_TYPES.get(fmt)
    if media_type is None:
        raise Unreadable(
            "unsupported_type", f"{fmt} images are not taken by the API; convert it to PNG or JPEG"
        )
    if max(w, h) > API_MAX_IMAGE_SIDE:
        raise Unreadable(
            "over_limit",
            f"image is {w}x{h} px; the API takes at most {API_MAX_IMAGE_SIDE} px a side (scale it down)",
        )
    if (len(data) + 2) // 3 * 4 > API_MAX_IMAGE_BYTES:
        raise Unreadable(
            "over_limit", f"image is {len(data):,} bytes; the API takes at most 5 MB per image (base64)"
        )
    return Content("", (), "image", media_type, 1, (1,), image_tokens(w, h), w, h)

"""`Document`: one input as the pipeline sees it, and why it may be skipped (a leaf).

Besides its id, hash and type, a document carries what its reader found (tasks.source.readers): pages,
visible characters of its text layer, textless pages, what its pages or pixels cost as images, a
guessed encoding; and, for an e-mail attachment, the message it came from (`parent`). These decide
how it is sent (tasks.request) and what it costs (tasks.cost.estimate) without reading it again.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class SkipReason(StrEnum):
    """Why a document is not sent to the model."""

    EMPTY = "empty"
    # an Office file of only pictures, charts or embedded objects (the detail counts them)
    NO_TEXT = "no_text"
    BINARY = "binary"
    UNDECODABLE = "undecodable"
    OVERSIZED = "oversized"
    DUPLICATE = "duplicate"
    UNSUPPORTED_TYPE = "unsupported_type"
    UNREADABLE = "unreadable"
    OUTSIDE_SOURCE = "outside_source"  # a symlink resolving outside the source (--follow-symlinks reads it)
    SYMLINKED_FOLDER = "symlinked_folder"  # not walked without --follow-symlinks
    ENCRYPTED = "encrypted"  # a password-protected PDF (the API takes none)
    CORRUPT = "corrupt"  # a PDF, image, Office file or e-mail its library cannot parse
    OVER_LIMIT = "over_limit"  # too many pages, pixels, attachments or nesting levels; a zip bomb
    MACRO_ENABLED = "macro_enabled"  # an Office file with a VBA project (formats.allow_macros reads it)
    FORWARD_LOOP = "forward_loop"  # an attached message that is one of the messages it is attached in


class Document(BaseModel):
    """One input file (or e-mail attachment) as the pipeline sees it."""

    model_config = ConfigDict(frozen=True)

    doc_id: str
    source_uri: str
    sha256: str
    size: int
    doc_type: str
    status: Literal["ok", "skipped"] = "ok"
    skip_reason: SkipReason | None = None
    skip_detail: str | None = None
    duplicate_of: str | None = None
    # what the reader found (tasks.source.readers.Content); None / 0 when it does not apply
    pages: int | None = None  # PDF pages, slides, sheets, explicit .docx pages; 1 for an image
    text_chars: int | None = None  # visible characters of the text layer
    textless_pages: int = 0  # PDF pages without a usable text layer (scanned)
    media_type: str | None = None  # PDFs and images: what the API receives them as
    image_tokens: int = 0  # the pages (PDF) or the image as the API bills them as images
    # PDFs and images: "pdf", "image" or "text" (tasks.source.readers.content.sent_as)
    send_as: str | None = None
    encoding: str | None = None  # a text read in a guessed legacy encoding (charset-normalizer)
    parent: str | None = None  # an e-mail attachment: the doc id of its message


def duplicate(base: dict[str, Any], sha256: str, size: int, first: str) -> Document:
    """The record of a file with the same content as the earlier `ok` document `first`."""
    return Document(
        **base,
        sha256=sha256,
        size=size,
        status="skipped",
        skip_reason=SkipReason.DUPLICATE,
        skip_detail=f"same content as {first}",
        duplicate_of=first,
    )


class FirstOfContent:
    """sha256 (hex) -> the doc id of the first `ok` document with that content: how an inventory
    marks the later ones `duplicate`. It lives as long as the inventory and holds one entry per
    document, so the hash is kept as its first 16 bytes (a 64-character hex string costs 113 bytes,
    16 bytes 49; a chance collision of 128 bits is far below a disk's bit error rate)."""

    def __init__(self) -> None:
        self._first: dict[bytes, str] = {}

    @staticmethod
    def _short(sha256: str) -> bytes:
        return bytes.fromhex(sha256[:32])

    def get(self, sha256: str) -> str | None:
        return self._first.get(self._short(sha256))

    def __setitem__(self, sha256: str, doc_id: str) -> None:
        self._first[self._short(sha256)] = doc_id

"""A document's bytes and content, read again after the inventory (checked against its sha256).

`load_bytes` reads a file (local or s3://), or an e-mail attachment from its message (the source
URI ends in `#part=2/1`: the attachment's index path through nested messages). `load_content` gives
what the reader makes of them (tasks.source.readers.Content), `load_text` its text layer. Every parse of
the bytes runs in a bounded reader process (tasks.source.readers.bounded, settings.formats.read_*).
"""

from __future__ import annotations

import hashlib
import os
import urllib.parse
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from checkpoints.store import open_store
from docmill.errors import DocmillError, InputError
from docmill.settings import Settings, get_settings
from tasks.source.readers import Content, ExtractError, Limits
from tasks.source.readers.bounded import Bounds, part_bytes_bounded, read_bounded
from tasks.source.readers.office import ZipLimits

if TYPE_CHECKING:
    from tasks.source.document import Document

PART_MARK = "#part="


def read_limits(settings: Settings) -> Limits:
    """The readers' limits from settings.formats."""
    f = settings.formats
    return Limits(
        pdf_min_chars=f.pdf_text_min_chars,
        pdf_max_pages=f.max_pdf_pages,
        zip=ZipLimits(f.max_unzipped_bytes, f.max_zip_ratio, f.allow_macros),
    )


def read_bounds(settings: Settings) -> Bounds:
    """How the readers are bounded (settings.formats.read_*): memory, time, processes."""
    f = settings.formats
    return Bounds(f.read_memory_bytes, f.read_seconds, f.read_processes, f.read_bounded)


def part_uri(parent_uri: str, index: int) -> str:
    """The source URI of attachment `index` (1-based) of the message at `parent_uri`."""
    base, mark, path = parent_uri.partition(PART_MARK)
    return f"{base}{PART_MARK}{path}/{index}" if mark else f"{base}{PART_MARK}{index}"


@lru_cache(maxsize=16)
def open_source_store(uri: str, endpoint_url: str | None) -> Any:
    return open_store(uri, endpoint_url=endpoint_url)


def load_bytes(doc: Document, settings: Settings | None = None) -> bytes:
    """The raw bytes of `doc`, checked against the sha256 taken at inventory time."""
    settings = settings or get_settings()
    uri, mark, path = doc.source_uri.partition(PART_MARK)
    try:
        if uri.startswith("s3://"):
            root, _, key = uri.rpartition("/")
            data: bytes = open_source_store(root, settings.s3_endpoint_url).get(key)
        else:
            local = urllib.parse.unquote_to_bytes(urllib.parse.urlsplit(uri).path)  # a file:// URI
            data = Path(os.fsdecode(local)).read_bytes()
        if mark:
            data = part_bytes_bounded(data, [int(i) for i in path.split("/")], read_bounds(settings))
    except (OSError, DocmillError, ExtractError, ValueError) as e:
        raise InputError(f"cannot read {doc.doc_id}: {e}", doc_id=doc.doc_id) from e
    if hashlib.sha256(data).hexdigest() != doc.sha256:
        raise InputError(
            f"{doc.doc_id} changed since the inventory (sha256 differs)",
            hint="start a new run so the new content gets its own results",
            doc_id=doc.doc_id,
        )
    return data


def load_content(doc: Document, settings: Settings | None = None) -> tuple[Content, bytes]:
    """(what the reader makes of an `ok` document, its bytes). Raises InputError with one line."""
    if doc.status != "ok":
        reason = doc.skip_reason.value if doc.skip_reason else "unknown"
        raise InputError(f"{doc.doc_id} was skipped ({reason}); it has no content", doc_id=doc.doc_id)
    settings = settings or get_settings()
    data = load_bytes(doc, settings)
    try:
        return read_bounded(doc.doc_type, data, read_limits(settings), read_bounds(settings)), data
    except ExtractError as e:
        raise InputError(f"cannot read {doc.doc_id}: {e}", doc_id=doc.doc_id) from e


def load_text(doc: Document, settings: Settings | None = None) -> str:
    """The text layer of an `ok` document (empty for an image). Raises InputError with a one-line reason."""
    return load_content(doc, settings)[0].text

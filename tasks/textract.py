"""Compatibility names: text extraction moved to `tasks.readers` (one reader per format).

Import from `tasks.readers`; this module only re-exports what older callers use.
"""

from __future__ import annotations

from tasks.readers import (
    ALL_TYPES,
    CODE_TYPES,
    DOCUMENT_TYPES,
    EXTENSIONS,
    TEXT_TYPES,
    BinaryContent,
    DocType,
    ExtractError,
    decode_utf8,
    doc_type_for,
    extract_text,
    html_to_text,
    json_depth_exceeds,
)
from tasks.readers.text import MAX_JSON_DEPTH

__all__ = [
    "ALL_TYPES",
    "CODE_TYPES",
    "DOCUMENT_TYPES",
    "EXTENSIONS",
    "MAX_JSON_DEPTH",
    "TEXT_TYPES",
    "BinaryContent",
    "DocType",
    "ExtractError",
    "decode_utf8",
    "doc_type_for",
    "extract_text",
    "html_to_text",
    "json_depth_exceeds",
]

"""Readers: one per document format, behind one interface, `read(doc_type, data, limits) -> Content`
(each format's reader and library: docs/formats.md).

Types docmill knows but does not read (`NOT_READ`: .msg, legacy binary Office) are refused with the
reason why; a recipe that lists one, or a type nobody reads, is refused at load
(tasks.recipes.Recipe). What the inventory does with a refusal: tasks.source.inventory. Does not: decide
how a document is sent (tasks.request) or talk to the store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from tasks.source.readers.content import BinaryContent, Content, ExtractError, Unreadable
from tasks.source.readers.image import read_image
from tasks.source.readers.mail import read_eml
from tasks.source.readers.office import ZipLimits, read_docx, read_pptx, read_xlsx
from tasks.source.readers.pdf import DEFAULT_MAX_PAGES, DEFAULT_MIN_CHARS, read_pdf
from tasks.source.readers.text import html_to_text, json_depth_exceeds, read_html, read_json, read_plain


class DocType(StrEnum):
    """The document types docmill reads (besides source code, read as text)."""

    TXT = "txt"
    MD = "md"
    HTML = "html"
    JSON = "json"
    CSV = "csv"
    PDF = "pdf"
    DOCX = "docx"
    DOCM = "docm"
    XLSX = "xlsx"
    XLSM = "xlsm"
    PPTX = "pptx"
    PPTM = "pptm"
    EML = "eml"
    PNG = "png"
    JPG = "jpg"
    GIF = "gif"
    WEBP = "webp"


EXTENSIONS: dict[str, DocType] = {
    **{t.value: t for t in DocType},
    "text": DocType.TXT,
    "markdown": DocType.MD,
    "htm": DocType.HTML,
    "jpeg": DocType.JPG,
}

IMAGE_TYPES = frozenset({DocType.PNG, DocType.JPG, DocType.GIF, DocType.WEBP})

# Source code and config files: read as plain text (their doc_type is the extension).
CODE_TYPES = frozenset(
    {"py", "pyi", "js", "ts", "tsx", "jsx", "go", "rs", "java", "kt", "rb", "php", "sh", "sql", "swift"}
    | {"c", "h", "cc", "cpp", "hpp", "cs", "scala"}
    | {"toml", "yaml", "yml", "ini", "cfg", "xml"}
)

DOCUMENT_TYPES = frozenset(t.value for t in DocType)
ALL_TYPES = DOCUMENT_TYPES | CODE_TYPES

# Types docmill knows and does not read, with the reason a skipped file (or a recipe listing one) gets.
NOT_READ: dict[str, str] = {
    "msg": "Outlook .msg is not read (its only Python reader, extract-msg, is GPL-3.0 and pulls 7 "
    "packages); save the message as .eml",
    "doc": "legacy binary Word (.doc) is not read; save it as .docx or PDF",
    "xls": "legacy binary Excel (.xls) is not read; save it as .xlsx or CSV",
    "ppt": "legacy binary PowerPoint (.ppt) is not read; save it as .pptx or PDF",
    "tif": "TIFF images are not taken by the API; convert them to PNG or PDF",
    "tiff": "TIFF images are not taken by the API; convert them to PNG or PDF",
    "bmp": "BMP images are not taken by the API; convert them to PNG",
}


@dataclass(frozen=True)
class Limits:
    """What a reader refuses (docmill.settings.FormatSettings fills it)."""

    pdf_min_chars: int = DEFAULT_MIN_CHARS
    pdf_max_pages: int = DEFAULT_MAX_PAGES
    zip: ZipLimits = field(default_factory=ZipLimits)


def doc_type_for(name: str) -> str:
    """'txt', 'pdf', 'jpg', ... for known extensions, else the lower-cased extension ('none' if none)."""
    base = name.rsplit("/", 1)[-1]
    ext = base.rsplit(".", 1)[-1].lower() if "." in base.lstrip(".") else ""
    known = EXTENSIONS.get(ext)
    if known is not None:
        return known.value
    return ext or "none"


# a macro-enabled Office file (docm, xlsm, pptm) is read as its plain twin; office.py decides on its macros
READERS: dict[DocType, Callable[[bytes, Limits], Content]] = {
    **dict.fromkeys((DocType.TXT, DocType.MD, DocType.CSV), lambda d, _l: read_plain(d)),
    DocType.HTML: lambda d, _l: read_html(d),
    DocType.JSON: lambda d, _l: read_json(d),
    DocType.PDF: lambda d, lim: read_pdf(d, min_chars=lim.pdf_min_chars, max_pages=lim.pdf_max_pages),
    **dict.fromkeys((DocType.DOCX, DocType.DOCM), lambda d, lim: read_docx(d, lim.zip)),
    **dict.fromkeys((DocType.XLSX, DocType.XLSM), lambda d, lim: read_xlsx(d, lim.zip)),
    **dict.fromkeys((DocType.PPTX, DocType.PPTM), lambda d, lim: read_pptx(d, lim.zip)),
    DocType.EML: lambda d, _l: read_eml(d),
    **dict.fromkeys(IMAGE_TYPES, lambda d, _l: read_image(d)),
}


def read(doc_type: str, data: bytes, limits: Limits | None = None) -> Content:
    """`data` read as `doc_type`. Raises ExtractError: BinaryContent (NUL bytes), Unreadable with a
    named reason, or plain ExtractError (undecodable)."""
    limits = limits or Limits()
    if doc_type in CODE_TYPES:
        return read_plain(data)
    if doc_type in NOT_READ:
        raise Unreadable("unsupported_type", NOT_READ[doc_type])
    try:
        kind = DocType(doc_type)
    except ValueError as e:
        raise Unreadable("unsupported_type", f"unsupported document type {doc_type!r}") from e
    try:
        return READERS[kind](data, limits)
    except ExtractError:
        raise
    except (RecursionError, MemoryError, ValueError) as e:  # no input may stop the run
        raise ExtractError(f"cannot extract {doc_type}: {type(e).__name__}") from e


def extract_text(doc_type: str, data: bytes) -> str:
    """The text layer of `data` read as `doc_type` (empty for an image)."""
    return read(doc_type, data).text


__all__ = [
    "ALL_TYPES",
    "CODE_TYPES",
    "DOCUMENT_TYPES",
    "NOT_READ",
    "BinaryContent",
    "Content",
    "DocType",
    "ExtractError",
    "Limits",
    "Unreadable",
    "doc_type_for",
    "extract_text",
    "html_to_text",
    "json_depth_exceeds",
    "read",
]

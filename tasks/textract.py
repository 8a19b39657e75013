"""Text extraction per document type: bytes in, plain text out.

Each extractor raises `ExtractError` (a ValueError) with a short reason when the bytes are
not what the type promises; the inventory turns that into a `skipped` document and
`load_text` into an `InputError`.

Text types (txt, md, html, json, csv) must be UTF-8 (a leading BOM is dropped), or UTF-16 /
UTF-32 announced by their byte-order mark. There is no latin-1 fallback: a fallback decodes
anything, so a mis-encoded file would go to the model as mojibake instead of being reported as
`undecodable`. NUL bytes (in the decoded text) mean `binary`.

Every parser is bounded: JSON nested deeper than `MAX_JSON_DEPTH` is `undecodable` (checked before
parsing, so no input reaches Python's recursion limit), and any other failure of a parser is an
`ExtractError`, never an exception that stops the run.
"""

from __future__ import annotations

import codecs
import io
import json
import logging
from collections.abc import Callable
from enum import StrEnum
from html.parser import HTMLParser


class DocType(StrEnum):
    """The document types docmill extracts text from."""

    TXT = "txt"
    MD = "md"
    HTML = "html"
    JSON = "json"
    CSV = "csv"
    PDF = "pdf"


EXTENSIONS: dict[str, DocType] = {
    "txt": DocType.TXT,
    "text": DocType.TXT,
    "md": DocType.MD,
    "markdown": DocType.MD,
    "html": DocType.HTML,
    "htm": DocType.HTML,
    "json": DocType.JSON,
    "csv": DocType.CSV,
    "pdf": DocType.PDF,
}

TEXT_TYPES = frozenset({DocType.TXT, DocType.MD, DocType.HTML, DocType.JSON, DocType.CSV})

# Source code and config files: read as plain UTF-8 text (their doc_type is the extension).
CODE_TYPES = frozenset(
    {"py", "pyi", "js", "ts", "tsx", "jsx", "go", "rs", "java", "kt", "rb", "php", "sh", "sql", "c", "h",
     "cc", "cpp", "hpp", "cs", "swift", "scala", "toml", "yaml", "yml", "ini", "cfg", "xml"}
)  # fmt: skip

DOCUMENT_TYPES = frozenset(t.value for t in DocType)
ALL_TYPES = DOCUMENT_TYPES | CODE_TYPES


class ExtractError(ValueError):
    """The bytes cannot be turned into text of their type."""


class BinaryContent(ExtractError):
    """NUL bytes in a text type: the file is binary whatever its name says."""


def doc_type_for(name: str) -> str:
    """'txt', 'md', ... for known extensions, else the lower-cased extension ('none' if there is none)."""
    base = name.rsplit("/", 1)[-1]
    ext = base.rsplit(".", 1)[-1].lower() if "." in base.lstrip(".") else ""
    known = EXTENSIONS.get(ext)
    if known is not None:
        return known.value
    return ext or "none"


# Byte-order marks, longest first (the UTF-32-LE mark starts with the UTF-16-LE one).
BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
MAX_JSON_DEPTH = 512  # deeper JSON is undecodable (json.loads would hit the recursion limit)


def decode_utf8(data: bytes) -> str:
    """Strict text: UTF-8, or UTF-8/16/32 after their byte-order mark (the mark is dropped).
    Raises BinaryContent on NUL characters, ExtractError on bytes invalid in the encoding."""
    encoding, body = "utf-8", data
    for bom, name in BOMS:
        if data.startswith(bom):
            encoding, body = name, data[len(bom) :]
            break
    if encoding == "utf-8" and b"\x00" in body:
        raise BinaryContent("contains NUL bytes (binary content)")
    try:
        text = body.decode(encoding)
    except UnicodeDecodeError as e:
        raise ExtractError(f"not valid {encoding.upper()} at byte {e.start}") from e
    if "\x00" in text:
        raise BinaryContent("contains NUL characters (binary content)")
    return text


def json_depth_exceeds(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when brackets outside strings nest deeper than `limit` (a linear scan, no recursion)."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
    return False


_SKIP_TAGS = frozenset({"script", "style", "noscript", "template"})
_BLOCK_TAGS = frozenset(
    {
        "p",
        "div",
        "br",
        "li",
        "tr",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "table",
        "ul",
        "ol",
        "section",
        "article",
        "header",
        "footer",
        "title",
        "pre",
        "blockquote",
        "dt",
        "dd",
        "hr",
    }
)


class _TextCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP_TAGS:
            self._skip_depth += 1
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TAGS:
            self._skip_depth = max(0, self._skip_depth - 1)
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._skip_depth == 0:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    """Visible text of an HTML page: tags, scripts and styles removed, one line per block element."""
    parser = _TextCollector()
    parser.feed(html)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line)


def _plain(data: bytes) -> str:
    return decode_utf8(data)


def _html(data: bytes) -> str:
    return html_to_text(decode_utf8(data))


def _json(data: bytes) -> str:
    text = decode_utf8(data)
    if json_depth_exceeds(text):
        raise ExtractError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise ExtractError(f"invalid JSON: {e.msg} at line {e.lineno} column {e.colno}") from e
    except (RecursionError, ValueError) as e:  # a bound we did not foresee: still only this file
        raise ExtractError(f"invalid JSON: {type(e).__name__}") from e
    return json.dumps(obj, indent=2, ensure_ascii=False)


def _pdf(data: bytes) -> str:
    from pypdf import PdfReader

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # broken files are reported by us, not logged by pypdf
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise ExtractError("PDF is encrypted")
        pages = [page.extract_text() or "" for page in reader.pages]
    except ExtractError:
        raise
    except Exception as e:  # pypdf raises many kinds on broken files; a bad file must never crash a run
        raise ExtractError(f"invalid PDF: {type(e).__name__}: {e}".splitlines()[0][:200]) from e
    return "\n\n".join(page.strip() for page in pages).strip()


EXTRACTORS: dict[DocType, Callable[[bytes], str]] = {
    DocType.TXT: _plain,
    DocType.MD: _plain,
    DocType.CSV: _plain,
    DocType.HTML: _html,
    DocType.JSON: _json,
    DocType.PDF: _pdf,
}


def extract_text(doc_type: str, data: bytes) -> str:
    """Text of `data` read as `doc_type`. Raises ExtractError (BinaryContent for NUL bytes)."""
    if doc_type in CODE_TYPES:
        return decode_utf8(data)
    try:
        kind = DocType(doc_type)
    except ValueError as e:
        raise ExtractError(f"unsupported document type {doc_type!r}") from e
    try:
        return EXTRACTORS[kind](data)
    except ExtractError:
        raise
    except (RecursionError, MemoryError, ValueError) as e:  # no input may stop the run
        raise ExtractError(f"cannot extract {doc_type}: {type(e).__name__}") from e

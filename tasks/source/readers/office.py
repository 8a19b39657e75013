"""Office files: .docx (python-docx), .xlsx (openpyxl), .pptx (python-pptx); all MIT-licensed.

A password-protected file is an OLE2 (CFB) container holding an `EncryptionInfo` stream: `encrypted`
(any other OLE2 file named .docx/.xlsx/.pptx is legacy binary Office: `unsupported_type`).

Before any library opens a file, its zip directory is checked: at most `max_unzipped` bytes
unpacked, a compression ratio of at most `max_ratio`, at most MAX_MEMBERS members (a zip bomb is
`over_limit`). The directory may lie, so the members are then inflated in bounded chunks to the same
limits, and the library opens that checked copy (`unpacked`), never the original. Active content (a
VBA project or its signature, a macro-enabled main part, Excel 4.0 macro sheets, ActiveX controls,
found by member name or `[Content_Types].xml`) is `macro_enabled` unless `allow_macros` (then the
text is read; macros never run). A file without text is `no_text` naming what it holds instead
(`3 pictures, 1 chart`), or `empty` when it holds nothing.

Text: .docx paragraphs and tables in body order, headers and footers first, explicit page breaks as
pages; .xlsx one page per sheet, rows as CSV of cached cell values; .pptx one page per slide: text
frames, tables and speaker notes.
"""

from __future__ import annotations

import csv
import io
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tasks.source.readers.content import Content, Unreadable, corrupt, paged

MAX_MEMBERS = 10_000
CHUNK = 1024 * 1024  # bytes inflated per read of a member
MACRO_PARTS = ("vbaproject.bin",)
CFB_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
ENCRYPTION_INFO = "EncryptionInfo".encode("utf-16-le")  # the stream's name in the CFB directory
CONTENT_TYPES = "[Content_Types].xml"
MAX_CONTENT_TYPES_BYTES = 1024 * 1024
# Content types (in [Content_Types].xml) of parts that carry or drive code, and what to call them.
ACTIVE_TYPES = (
    ("application/vnd.ms-office.vbaproject", "a VBA macro project"),
    ("vbaprojectsignature", "a signed VBA macro project"),
    ("macroenabled", "a macro-enabled main part"),
    ("application/vnd.ms-excel.macrosheet", "an Excel 4.0 macro sheet"),
    ("application/vnd.ms-excel.intlmacrosheet", "an Excel 4.0 macro sheet"),
    ("application/vnd.ms-office.activex", "ActiveX controls"),
)
# What a broken or hostile zip raises from zipfile (a member's inflation included).
ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, ValueError, OSError, EOFError)
_CONTENT_TYPE = re.compile(rb'ContentType\s*=\s*"([^"]*)"', re.IGNORECASE)


@dataclass(frozen=True)
class ZipLimits:
    max_unzipped: int = 200 * 1024 * 1024
    max_ratio: int = 100
    allow_macros: bool = False


def check_ole2(data: bytes, kind: str) -> None:
    """Refuse an OLE2 (CFB) container named as an Office Open XML file: encrypted or legacy."""
    if not data.startswith(CFB_MAGIC):
        return
    if ENCRYPTION_INFO in data:
        raise Unreadable(
            "encrypted",
            f"a password-protected .{kind} (an encrypted OLE2 container); save it without a password",
        )
    raise Unreadable(
        "unsupported_type", f"a legacy binary Office file (OLE2) named .{kind}; save it as .{kind} or PDF"
    )


def _content_types(z: zipfile.ZipFile) -> bytes:
    """[Content_Types].xml, at most MAX_CONTENT_TYPES_BYTES of it (read as a stream: the directory's
    size is not trusted)."""
    try:
        with z.open(CONTENT_TYPES) as f:
            return f.read(MAX_CONTENT_TYPES_BYTES)
    except (KeyError, *ZIP_ERRORS):
        return b""


def active_content(z: zipfile.ZipFile, infos: list[zipfile.ZipInfo]) -> str | None:
    """What in the package carries or drives code (a VBA project, macro sheets, ActiveX), else None."""
    if any(i.filename.rsplit("/", 1)[-1].lower() in MACRO_PARTS for i in infos):
        return "a VBA macro project (vbaProject.bin)"
    if any("/activex/" in f"/{i.filename.lower()}" for i in infos):
        return "ActiveX controls"
    declared = [t.decode("latin-1").lower() for t in _CONTENT_TYPE.findall(_content_types(z))]
    for needle, what in ACTIVE_TYPES:
        if any(needle in t for t in declared):
            return what
    return None


def check_zip(data: bytes, kind: str, limits: ZipLimits) -> None:
    """Refuse a zip bomb or a macro-enabled file from the zip directory (and content types) alone."""
    check_ole2(data, kind)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            infos = z.infolist()
            active = None if limits.allow_macros or len(infos) > MAX_MEMBERS else active_content(z, infos)
    except (zipfile.BadZipFile, ValueError, OSError) as e:
        raise Unreadable("corrupt", f"not a valid .{kind} (zip): {e}"[:200]) from e
    if len(infos) > MAX_MEMBERS:
        raise Unreadable("over_limit", f".{kind} holds {len(infos):,} zip members (> {MAX_MEMBERS:,})")
    unpacked = sum(i.file_size for i in infos)
    packed = max(1, sum(i.compress_size for i in infos))
    if unpacked > limits.max_unzipped or unpacked / packed > limits.max_ratio:
        raise Unreadable(
            "over_limit",
            f".{kind} unpacks to {unpacked:,} bytes from {packed:,} (ratio {unpacked // packed}:1); "
            f"limits {limits.max_unzipped:,} bytes and {limits.max_ratio}:1 (a zip bomb?)",
        )
    if active is not None:
        raise Unreadable(
            "macro_enabled",
            f".{kind} contains {active}; save it without macros "
            "(or set DOCMILL_FORMATS__ALLOW_MACROS=true to read its text)",
        )


# What a package holds besides text, by member path: (pattern, singular, plural).
HELD = (
    (re.compile(r"^(?:word|ppt|xl)/media/"), "picture", "pictures"),
    (re.compile(r"^(?:word|ppt|xl)/charts/chart[^/]*\.xml$"), "chart", "charts"),
    (re.compile(r"^(?:word|ppt|xl)/diagrams/data[^/]*\.xml$"), "diagram", "diagrams"),
    (re.compile(r"^(?:word|ppt|xl)/embeddings/"), "embedded object", "embedded objects"),
)


def held_without_text(data: bytes) -> str:
    """What a package holds besides text (`3 pictures, 1 chart`), or "" when nothing."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, ValueError, OSError):
        return ""
    counts = [sum(1 for name in names if pattern.match(name)) for pattern, _, _ in HELD]
    counts[3] = max(0, counts[3] - counts[1])  # a chart keeps its data in an embedded workbook
    return ", ".join(
        f"{n} {one if n == 1 else many}" for (_, one, many), n in zip(HELD, counts, strict=True) if n
    )


def unpacked(data: bytes, kind: str, limits: ZipLimits) -> bytes:
    """The same archive with every member stored uncompressed, each read in bounded chunks: never
    more than `max_unzipped` bytes in all, nor more than `max_ratio` times the packed size,
    whatever the directory says. A library then opening it reads exactly what was checked; given
    the original, Python's zipfile inflates a member in one call (`ZipFile.read`), so a member
    whose directory entry understates its size inflated to gigabytes before any check."""
    out = io.BytesIO()
    total = 0
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
            infos = src.infolist()
            packed = max(1, sum(i.compress_size for i in infos))
            budget = min(limits.max_unzipped, packed * limits.max_ratio)
            for info in infos:
                if info.is_dir():
                    continue
                with (
                    src.open(info) as member,
                    dst.open(zipfile.ZipInfo(info.filename, info.date_time), "w") as copy,
                ):
                    while chunk := member.read(CHUNK):
                        total += len(chunk)
                        if total > budget:
                            raise Unreadable(
                                "over_limit",
                                f".{kind} unpacks to more than {budget:,} bytes from {packed:,} (limits "
                                f"{limits.max_unzipped:,} bytes and {limits.max_ratio}:1; a zip bomb?)",
                            )
                        copy.write(chunk)
    except Unreadable:
        raise
    except ZIP_ERRORS as e:
        raise Unreadable("corrupt", f"not a valid .{kind} (zip): {type(e).__name__}: {e}"[:200]) from e
    return out.getvalue()


def _opened(kind: str, fn: Callable[[bytes], Content]) -> Callable[[bytes, ZipLimits], Content]:
    def read(data: bytes, limits: ZipLimits) -> Content:
        check_zip(data, kind, limits)
        data = unpacked(data, kind, limits)
        try:
            content = fn(data)
        except Unreadable:
            raise
        except Exception as e:  # a library's parse error on a broken file: this file only
            raise corrupt(f".{kind}", e) from e
        if not content.text.strip():
            held = held_without_text(data)
            if held:
                raise Unreadable("no_text", f"no text: {held} (send it as a PDF to have them read)")
            raise Unreadable("empty", f"a .{kind} with no text, pictures, charts or embedded objects")
        return content

    return read


def _docx(data: bytes) -> Content:
    import docx
    from docx.oxml.ns import qn

    document = docx.Document(io.BytesIO(data))
    pages: list[list[str]] = [[]]
    section = document.sections[0] if document.sections else None
    if section is not None:
        for part in (section.header, section.footer):
            pages[0] += [p.text for p in part.paragraphs if p.text.strip()]
    for block in document.element.body.iterchildren():
        if block.tag == qn("w:p"):
            line: list[str] = []
            for node in block.iter(qn("w:t"), qn("w:br"), qn("w:tab")):
                if node.tag == qn("w:br") and node.get(qn("w:type")) == "page":
                    pages[-1].append("".join(line))
                    pages.append([])
                    line = []
                elif node.tag == qn("w:tab"):
                    line.append("\t")
                elif node.tag == qn("w:t"):
                    line.append(node.text or "")
            pages[-1].append("".join(line))
        elif block.tag == qn("w:tbl"):
            table = docx.table.Table(block, document)
            for row in table.rows:
                pages[-1].append(" | ".join(cell.text.strip() for cell in row.cells))
    texts = ["\n".join(line for line in p if line.strip()) for p in pages]
    text, spans = paged(texts)
    return Content(text, spans if len(spans) > 1 else (), "page", page_count=len(spans))


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _xlsx(data: bytes) -> Content:
    import openpyxl

    book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        texts = []
        for sheet in book.worksheets:
            buf = io.StringIO()
            writer = csv.writer(buf, lineterminator="\n")
            writer.writerow([f"Sheet: {sheet.title}"])
            for row in sheet.iter_rows(values_only=True):
                cells = [_cell(v) for v in row]
                while cells and not cells[-1]:
                    cells.pop()
                if cells:
                    writer.writerow(cells)
            texts.append(buf.getvalue().strip())
    finally:
        book.close()
    text, spans = paged(texts)
    return Content(text, spans, "sheet", page_count=len(spans))


def _shape_lines(shape: Any) -> list[str]:
    lines: list[str] = []
    if getattr(shape, "has_text_frame", False):
        lines += [p.text for p in shape.text_frame.paragraphs]
    if getattr(shape, "has_table", False):
        for row in shape.table.rows:
            lines.append(" | ".join(cell.text.strip() for cell in row.cells))
    for child in getattr(shape, "shapes", ()):  # group shapes
        lines += _shape_lines(child)
    return lines


def _pptx(data: bytes) -> Content:
    from pptx import Presentation

    deck = Presentation(io.BytesIO(data))
    texts = []
    for slide in deck.slides:
        lines: list[str] = []
        for shape in slide.shapes:
            lines += _shape_lines(shape)
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame
            if notes is not None and notes.text.strip():
                lines += ["Notes:", notes.text]
        texts.append("\n".join(line for line in lines if line.strip()))
    text, spans = paged(texts)
    return Content(text, spans, "slide", page_count=len(spans))


read_docx = _opened("docx", _docx)
read_xlsx = _opened("xlsx", _xlsx)
read_pptx = _opened("pptx", _pptx)

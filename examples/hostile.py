"""Hostile documents, generated: small files a mail server or a shared drive would accept that cost a
naive reader gigabytes or minutes. Used by the suite (at small sizes, with small bounds) and by
bench/hostile.py (at the sizes that broke docmill). Deterministic: the same arguments give the same
bytes. Nothing here is ever sent anywhere; the files only have to be read.

    lying_zip_docx()        a .docx whose zip directory understates a member: 2.4 GB inflated
    paragraph_flood_docx()  195 MiB of `<w:p/>` beside a stored random member (ratio 82:1): an lxml
                            tree of gigabytes
    quadratic_html()        `<a<a<a...`: Python 3.11's HTMLParser is quadratic on it
    form_flood_pdf()        one page drawing a form XObject 5,000 times
    shared_stream_pdf()     999 pages sharing one content stream of 600,000 operations
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Callable, Iterable

from examples.formats import _pdf, _stream

BLOCK = 1 << 20
DOCX_TYPES = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    b'<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    b'<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    b'<Default Extension="xml" ContentType="application/xml"/>'
    b'<Default Extension="bin" ContentType="application/octet-stream"/>'
    b'<Override PartName="/word/document.xml" '
    b'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>'
    b"</Types>"
)
DOCX_RELS = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    b'<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    b'<Relationship Id="rId1" '
    b'Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" '
    b'Target="word/document.xml"/></Relationships>'
)
W_NS = b"http://schemas.openxmlformats.org/wordprocessingml/2006/main"
DOC_HEAD = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="' + W_NS + b'"><w:body>'
)
DOC_TAIL = b"</w:body></w:document>"


def _repeated_deflate(head: bytes, unit: bytes, total: int, tail: bytes) -> tuple[bytes, int, int]:
    """(raw deflate stream, crc32, size) of head + unit repeated to `total` bytes + tail, built from
    one compressed block repeated (each ends with a full flush, so the pieces join), in O(1) zlib work."""
    per = max(1, BLOCK // len(unit))
    block = unit * per
    count, rest = divmod(max(0, total), len(block))
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    start = comp.compress(head) + comp.flush(zlib.Z_FULL_FLUSH)
    piece = comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH)
    end = comp.compress(unit * (rest // len(unit)) + tail) + comp.flush(zlib.Z_FINISH)
    crc = zlib.crc32(head)
    for _ in range(count):
        crc = zlib.crc32(block, crc)
    crc = zlib.crc32(unit * (rest // len(unit)) + tail, crc)
    size = len(head) + count * len(block) + (rest // len(unit)) * len(unit) + len(tail)
    return start + piece * count + end, crc, size


def _zip(members: Iterable[tuple[str, bytes, int, int, int, int]]) -> bytes:
    """A zip of (name, stored bytes, method, crc, size in the headers, true size) members; the headers
    say what they are given, true or not (ZIP32 fields)."""
    out = bytearray()
    central = bytearray()
    entries = 0
    for name, body, method, crc, said, _true in members:
        fname = name.encode()
        offset = len(out)
        out += struct.pack(
            "<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x5C21, crc, len(body), said, len(fname), 0
        )
        out += fname + body
        central += struct.pack(
            "<IHHHHHHIIIHHHHHII",
            0x02014B50,
            20,
            20,
            0,
            method,
            0,
            0x5C21,
            crc,
            len(body),
            said,
            len(fname),
            0,
            0,
            0,
            0,
            0,
            offset,
        )
        central += fname
        entries += 1
    cd_offset = len(out)
    out += central
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, entries, entries, len(central), cd_offset, 0)
    return bytes(out)


def _small(name: str, body: bytes) -> tuple[str, bytes, int, int, int, int]:
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    packed = comp.compress(body) + comp.flush()
    return name, packed, 8, zlib.crc32(body), len(body), len(body)


def lying_zip_docx(inflated: int = 2_460_000_000, claimed: int = 40_000) -> bytes:
    """A .docx whose word/document.xml inflates to `inflated` bytes while its zip headers claim
    `claimed`: the directory passes every bomb check, and a reader that trusts it inflates it all."""
    stream, crc, size = _repeated_deflate(DOC_HEAD, b"<w:p/>", inflated, DOC_TAIL)
    return _zip(
        [
            _small("[Content_Types].xml", DOCX_TYPES),
            _small("_rels/.rels", DOCX_RELS),
            ("word/document.xml", stream, 8, crc, min(claimed, size), size),
        ]
    )


def paragraph_flood_docx(paragraph_bytes: int = 195 << 20, ratio: int = 82) -> bytes:
    """A valid .docx of `paragraph_bytes` of empty paragraphs (`<w:p/>`), beside a stored random
    member that keeps the whole archive's compression ratio at `ratio`:1 (under the bomb limit):
    every zip check passes, and the XML becomes an lxml tree of about 23x its size."""
    stream, crc, size = _repeated_deflate(DOC_HEAD, b"<w:p/>", paragraph_bytes, DOC_TAIL)
    filler = max(0, size // ratio - len(stream))
    noise = random.Random(32).randbytes(filler)
    return _zip(
        [
            _small("[Content_Types].xml", DOCX_TYPES),
            _small("_rels/.rels", DOCX_RELS),
            ("word/document.xml", stream, 8, crc, size, size),
            ("word/media/noise.bin", noise, 0, zlib.crc32(noise), len(noise), len(noise)),
        ]
    )


def quadratic_html(size: int = 360_000) -> bytes:
    """`<a<a<a...` of `size` bytes: each unclosed tag makes Python 3.11's HTMLParser rescan the rest."""
    return b"<html><body><p>Hostile page</p>" + b"<a" * (size // 2)


def form_flood_pdf(draws: int = 5000, form_ops: int = 2000) -> bytes:
    """One page that draws a form XObject `draws` times; the form shows `form_ops` strings."""
    form = b"BT /F1 9 Tf 0 0 Td " + b"(x) Tj " * form_ops + b"ET"
    page = b"q /Fm0 Do Q\n" * draws
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 6 0 R >> /XObject << /Fm0 5 0 R >> >> >>",
        _stream(zlib.compress(page, 9), b"/Filter /FlateDecode "),
        _stream(
            zlib.compress(form, 9),
            b"/Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << /Font << /F1 6 0 R >> >> "
            b"/Filter /FlateDecode ",
        ),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    return _pdf(objects)


def shared_stream_pdf(pages: int = 999, operations: int = 600_000) -> bytes:
    """`pages` pages that all draw one content stream of `operations` text operations."""
    ops = b"BT /F1 9 Tf 20 700 Td " + b"(ab) Tj " * operations + b"ET"
    n = pages
    kids = " ".join(f"{3 + i} 0 R" for i in range(n))
    content, font = 3 + n, 4 + n
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode()]
    objects += [
        f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {content} 0 R "
        f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
    ] * n
    objects.append(_stream(zlib.compress(ops, 9), b"/Filter /FlateDecode "))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return _pdf(objects)


# name -> (file name, generator at the sizes that broke docmill)
HOSTILE: dict[str, tuple[str, Callable[[], bytes]]] = {
    "lying_zip": ("lying-zip.docx", lying_zip_docx),
    "paragraph_flood": ("paragraph-flood.docx", paragraph_flood_docx),
    "quadratic_html": ("quadratic.html", quadratic_html),
    "form_flood": ("form-flood.pdf", form_flood_pdf),
    "shared_stream": ("shared-stream.pdf", shared_stream_pdf),
}

"""Documents in the formats people send, generated: text PDFs, scanned PDFs (page images only),
PDFs whose text layer is garbage (a font without a Unicode map),
PNG / JPEG images, .docx, .xlsx, .pptx and .eml with attachments. Small and deterministic (the
same lines give the same bytes), so tests and the example corpus never download a binary fixture.

Scans and images carry what is written on them as an embedded OCR hint that only the offline
emulator reads (it cannot look at pixels; the real API reads the pixels): the PDF's document
information entry `/DocmillOCR` (pages joined by a form feed), a PNG `tEXt` chunk `DocmillOCR`, or a
JPEG comment starting `DocmillOCR:`. docmill itself never reads these, so a scan has no text layer
for it, exactly as a real scan.

    from examples import formats
    formats.text_pdf([["Invoice number: INV-1", "Total: 5.00"]])
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Sequence
from email.message import EmailMessage
from email.policy import SMTP

OCR_KEY = "DocmillOCR"
FIXED_ZIP_TIME = (2026, 1, 1, 0, 0, 0)
PAGE_W, PAGE_H = 612, 792  # PDF points (US Letter)


# ---------------------------------------------------------------- PDF (hand-written, minimal)


def _pdf_string(text: str) -> bytes:
    raw = text.encode("latin-1", "replace")
    return b"(" + raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def _pdf(objects: list[bytes], info: dict[str, str] | None = None, *, encrypt: bool = False) -> bytes:
    """A PDF file of the given objects (object 1 is the catalog), with an xref table."""
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    extra = []
    if info:
        entries = b"".join(b"/" + k.encode() + b" " + _pdf_string(v) + b" " for k, v in info.items())
        extra.append(b"<< " + entries + b">>")
    if encrypt:  # an /Encrypt dictionary is what readers and the API check; its keys are never used
        extra.append(
            b"<< /Filter /Standard /V 1 /R 2 /O <" + b"00" * 32 + b"> /U <" + b"00" * 32 + b"> /P -4 >>"
        )
    allobjs = objects + extra
    for n, body in enumerate(allobjs, start=1):
        offsets.append(out.tell())
        out.write(f"{n} 0 obj\n".encode() + body + b"\nendobj\n")
    xref = out.tell()
    out.write(f"xref\n0 {len(allobjs) + 1}\n0000000000 65535 f \n".encode())
    for off in offsets:
        out.write(f"{off:010d} 00000 n \n".encode())
    trailer = f"<< /Size {len(allobjs) + 1} /Root 1 0 R".encode()
    n_info = len(objects) + 1 if info else None
    if n_info:
        trailer += f" /Info {n_info} 0 R".encode()
    if encrypt:
        trailer += f" /Encrypt {len(allobjs)} 0 R /ID [<{'ab' * 16}> <{'ab' * 16}>]".encode()
    out.write(b"trailer\n" + trailer + f" >>\nstartxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


def _stream(data: bytes, head: bytes = b"") -> bytes:
    return b"<< " + head + f"/Length {len(data)} >>\nstream\n".encode() + data + b"\nendstream"


def _text_ops(lines: Sequence[str]) -> bytes:
    ops = [b"BT /F1 11 Tf 14 TL 56 740 Td"]
    for line in lines:
        ops.append(_pdf_string(line) + b" Tj T*")
    ops.append(b"ET")
    return b"\n".join(ops)


def text_pdf(
    pages: Sequence[Sequence[str]],
    *,
    info: dict[str, str] | None = None,
    encrypt: bool = False,
    share_content: bool = False,
) -> bytes:
    """A PDF with a real text layer (Helvetica), one list of lines per page. `share_content` makes
    every page draw the first page's content stream (a 2,000-page PDF in a few hundred KB)."""
    n = len(pages)
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(n))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode()]
    font = 3 + 2 * n
    for i, lines in enumerate(pages):
        content = 4 if share_content else 4 + 2 * i
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {PAGE_W} {PAGE_H}] /Contents {content} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        objects.append(_stream(_text_ops(pages[0] if share_content else lines)))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return _pdf(objects, info, encrypt=encrypt)


def table_pdf(rows: Sequence[Sequence[tuple[float, str]]]) -> bytes:
    """A one-page PDF laid out as invoices lay out tables: each row's cells `(x, text)` drawn at
    their own position on one baseline (`Tm`), with no space character between cells."""
    ops = [b"BT /F1 10 Tf"]
    for r, cells in enumerate(rows):
        for x, text in cells:
            ops.append(f"1 0 0 1 {x:g} {740 - 16 * r} Tm ".encode() + _pdf_string(text) + b" Tj")
    ops.append(b"ET")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {PAGE_W} {PAGE_H}] /Contents 4 0 R "
        "/Resources << /Font << /F1 5 0 R >> >> >>".encode(),
        _stream(b"\n".join(ops)),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    return _pdf(objects)


def garbled_pdf(pages: Sequence[Sequence[str]], *, ocr_hint: bool = True) -> bytes:
    """A PDF whose text layer is garbage, as some producers write it: a Type3 font without a ToUnicode
    map whose glyphs have names no reader knows (`/g1`...), drawn with codes 1-27 (letters a-z, then
    anything else), so a text extractor gets control characters. The pages show boxes for letters;
    the emulator's OCR hint carries the lines (see `scanned_pdf`)."""
    n = len(pages)
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(n))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode()]
    font, glyph = 3 + 2 * n, 4 + 2 * n
    for i, lines in enumerate(pages):
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {PAGE_W} {PAGE_H}] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        ops = [b"BT /F1 11 Tf 14 TL 56 740 Td"]
        for line in lines:
            codes = bytes(ord(c) - 96 if "a" <= c <= "z" else 27 for c in line.lower())
            ops.append(b"<" + codes.hex().encode() + b"> Tj T*")
        ops.append(b"ET")
        objects.append(_stream(b"\n".join(ops)))
    names = " ".join(f"/g{c}" for c in range(1, 28))
    procs = " ".join(f"/g{c} {glyph} 0 R" for c in range(1, 28))
    objects.append(
        f"<< /Type /Font /Subtype /Type3 /FontBBox [0 0 600 700] /FontMatrix [0.001 0 0 0.001 0 0] "
        f"/CharProcs << {procs} >> /Encoding << /Type /Encoding /Differences [1 {names}] >> "
        f"/FirstChar 1 /LastChar 27 /Widths [{' '.join(['600'] * 27)}] /Resources << >> >>".encode()
    )
    objects.append(_stream(b"600 0 0 0 500 700 d1 50 0 400 700 re f"))
    info = {OCR_KEY: "\f".join("\n".join(p) for p in pages)} if ocr_hint else None
    return _pdf(objects, info)


def empty_pdf() -> bytes:
    """A PDF whose page tree has no page."""
    return _pdf([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] /Count 0 >>"])


def page_image(lines: Sequence[str], *, width: int = 850, height: int = 1100, size: int = 26):
    """A grey page with the lines drawn on it (Pillow's built-in font), like a 100 dpi scan."""
    from PIL import Image, ImageDraw, ImageFont

    img = Image.new("L", (width, height), 250)
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=size)
    y = 60
    for line in lines:
        draw.text((60, y), line, fill=20, font=font)
        y += int(size * 1.5)
    return img


def _jpeg(img, comment: str | None = None) -> bytes:  # type: ignore[no-untyped-def]
    buf = io.BytesIO()
    kw = {"comment": comment.encode("utf-8")} if comment is not None else {}
    img.save(buf, "JPEG", quality=60, optimize=False, **kw)
    return buf.getvalue()


def scanned_pdf(pages: Sequence[Sequence[str]], *, ocr_hint: bool = True) -> bytes:
    """A PDF of page images only (no text layer), as a scanner makes it; the emulator's OCR hint
    in the document information unless `ocr_hint` is False."""
    n = len(pages)
    kids = " ".join(f"{3 + 3 * i} 0 R" for i in range(n))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode()]
    for i, lines in enumerate(pages):
        img = page_image(lines)
        data = _jpeg(img)
        w, h = img.size
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {PAGE_W} {PAGE_H}] /Contents {5 + 3 * i} 0 R "
            f"/Resources << /XObject << /Im0 {4 + 3 * i} 0 R >> >> >>".encode()
        )
        head = f"/Type /XObject /Subtype /Image /Width {w} /Height {h} /ColorSpace /DeviceGray ".encode()
        objects.append(_stream(data, head + b"/BitsPerComponent 8 /Filter /DCTDecode "))
        objects.append(_stream(f"q {PAGE_W} 0 0 {PAGE_H} 0 0 cm /Im0 Do Q".encode()))
    info = {OCR_KEY: "\f".join("\n".join(p) for p in pages)} if ocr_hint else None
    return _pdf(objects, info)


# ---------------------------------------------------------------- images


def png_image(lines: Sequence[str], *, ocr_hint: bool = True, width: int = 850, height: int = 500) -> bytes:
    from PIL.PngImagePlugin import PngInfo

    meta = PngInfo()
    if ocr_hint:
        meta.add_text(OCR_KEY, "\n".join(lines))
    buf = io.BytesIO()
    page_image(lines, width=width, height=height).save(buf, "PNG", pnginfo=meta, optimize=False)
    return buf.getvalue()


def jpg_image(lines: Sequence[str], *, ocr_hint: bool = True, width: int = 850, height: int = 500) -> bytes:
    comment = f"{OCR_KEY}:" + "\n".join(lines) if ocr_hint else None
    return _jpeg(page_image(lines, width=width, height=height), comment)


def huge_png_header(width: int = 20_000, height: int = 20_000) -> bytes:
    """A PNG that claims `width` x `height` pixels (its IDAT holds one row; never decoded)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    head = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", head)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )


# ---------------------------------------------------------------- Office


def stable_zip(data: bytes) -> bytes:
    """The same zip with fixed member times and document dates (byte-identical on every run)."""
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            body = src.read(info)
            if info.filename == "docProps/core.xml":
                body = re.sub(
                    rb"(<dcterms:(?:created|modified)[^>]*>)[^<]*", rb"\g<1>2026-01-01T00:00:00Z", body
                )
            dst.writestr(zipfile.ZipInfo(info.filename, FIXED_ZIP_TIME), body, zipfile.ZIP_DEFLATED)
    return out.getvalue()


def docx_bytes(
    paragraphs: Sequence[str], *, table: Sequence[Sequence[str]] = (), page_break_after: int = -1
) -> bytes:
    import docx
    from docx.enum.text import WD_BREAK

    d = docx.Document()
    for i, text in enumerate(paragraphs):
        run = d.add_paragraph().add_run(text)
        if i == page_break_after:
            run.add_break(WD_BREAK.PAGE)
    if table:
        t = d.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                t.cell(r, c).text = value
    buf = io.BytesIO()
    d.save(buf)
    return stable_zip(buf.getvalue())


def xlsx_bytes(sheets: dict[str, Sequence[Sequence[object]]]) -> bytes:
    import openpyxl

    wb = openpyxl.Workbook()
    wb.remove(wb.active)
    for title, rows in sheets.items():
        ws = wb.create_sheet(title)
        for row in rows:
            ws.append(list(row))
    buf = io.BytesIO()
    wb.save(buf)
    return stable_zip(buf.getvalue())


def pptx_bytes(slides: Sequence[Sequence[str]], *, notes: Sequence[str] = ()) -> bytes:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    for i, lines in enumerate(slides):
        slide = deck.slides.add_slide(deck.slide_layouts[5])  # title only
        slide.shapes.title.text = lines[0]
        box = slide.shapes.add_textbox(Inches(0.5), Inches(1.5), Inches(9), Inches(5)).text_frame
        box.text = "\n".join(lines[1:])
        if i < len(notes):
            slide.notes_slide.notes_text_frame.text = notes[i]
    buf = io.BytesIO()
    deck.save(buf)
    return stable_zip(buf.getvalue())


def with_macros(office: bytes, member: str = "word/vbaProject.bin") -> bytes:
    """The same Office file with a VBA project added (what .docm/.xlsm/.pptm files carry)."""
    out = io.BytesIO(office)
    with zipfile.ZipFile(out, "a", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo(member, FIXED_ZIP_TIME), b"\xd0\xcf\x11\xe0" + b"\x00" * 508)
    return out.getvalue()


def zip_bomb_docx(unpacked: int = 64 << 20) -> bytes:
    """A .docx whose document part unpacks to `unpacked` bytes of spaces (ratio about 1,000:1)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("[Content_Types].xml", FIXED_ZIP_TIME), b"<Types/>")
        info = zipfile.ZipInfo("word/document.xml", FIXED_ZIP_TIME)
        info.compress_type = zipfile.ZIP_DEFLATED
        with z.open(info, "w", force_zip64=True) as f:
            block = b" " * (1 << 20)
            for _ in range(unpacked // len(block)):
                f.write(block)
    return out.getvalue()


# ---------------------------------------------------------------- e-mail


def eml_bytes(
    subject: str,
    body: str,
    attachments: Sequence[tuple[str, str, bytes]] = (),
    *,
    message_id: str = "<msg-1@example.test>",
    sender: str = "billing@example.test",
    to: str = "ap@example.test",
    date: str = "Mon, 05 Jan 2026 09:00:00 +0000",
) -> bytes:
    """An RFC 5322 message with a plain-text body and attachments (name, MIME type, bytes); an
    attachment of type message/rfc822 is attached as a forwarded message."""
    msg = EmailMessage(policy=SMTP)
    msg["From"], msg["To"], msg["Date"] = sender, to, date
    msg["Subject"], msg["Message-ID"] = subject, message_id
    msg.set_content(body)
    for name, ctype, data in attachments:
        if ctype == "message/rfc822":
            from email import message_from_bytes
            from email.policy import default

            msg.add_attachment(message_from_bytes(data, policy=default), filename=name)
        else:
            main, sub = ctype.split("/", 1)
            msg.add_attachment(data, maintype=main, subtype=sub, filename=name)
    for i, part in enumerate(p for p in msg.walk() if p.is_multipart()):
        part.set_boundary(f"docmill-boundary-{i}")
    return msg.as_bytes()

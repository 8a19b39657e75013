"""A PDF page's text layer as pdfium (pypdfium2, Apache-2.0 / BSD-3-Clause) gives it: the text, where
each character of it sits among pdfium's characters (so offsets map to character boxes), and whether
the layer is *poor*. pdfium was chosen by measurement (bench/pdf_readers.py): on public invoices it
keeps every labelled value a whole token where pypdf glues tokens, and it reads pages an order of
magnitude faster.

A page's text is pdfium's characters with its generated line breaks (`\\r\\n`) as `\\n`, its line-end
hyphen marker as `-`, and a character no text can carry (a control, an unmapped glyph: code 0) as
U+FFFD, stripped. It is *poor* when most of its visible characters are unmapped glyphs (a font
without a ToUnicode map), controls, U+FFFD or private-use code points: it says nothing a reader
could check, so the page goes to the model as a page, like a scan.

pdfium is not thread-safe: every call into it holds `PDFIUM_LOCK` (one per process), and every
pdfium object is closed before the lock is released, so no finalizer runs pdfium code in another
thread.
"""

from __future__ import annotations

import ctypes
import re
import threading
from typing import Any

PDFIUM_LOCK = threading.RLock()
POOR_SHARE = 0.5  # a page is poor when more than this share of its visible characters is unreadable
HYPHEN_MARK = 0xFFFE  # pdfium's marker for a hyphen that ends a line


_UNREADABLE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ue000-\uf8ff\ufffd"
    "\U000f0000-\U000ffffd\U00100000-\U0010fffd]"
)
_SPACE = re.compile(r"\s")
# what a character code becomes in the text: controls and surrogates U+FFFD, the hyphen marker "-"
_CONTROLS = [c for c in range(0x20) if c not in (0x09, 0x0A)] + [*range(0x7F, 0xA0), *range(0xD800, 0xE000)]
_TRANSLATE: dict[int, str] = {**dict.fromkeys(_CONTROLS, "\ufffd"), HYPHEN_MARK: "-"}


def unreadable_char(ch: str) -> bool:
    """A character that carries no text: control, surrogate, private use, U+FFFD."""
    return _UNREADABLE.match(ch) is not None


def visible_chars(text: str) -> int:
    return len(text) - len(_SPACE.findall(text))


def poor_text(text: str, map_errors: int = 0) -> bool:
    """Whether a page's text layer is mostly unreadable (see the module docstring); `map_errors`:
    visible characters pdfium could not map to Unicode that the text shows as something else."""
    visible = visible_chars(text)
    if not visible:
        return False
    return len(_UNREADABLE.findall(text)) + map_errors > POOR_SHARE * visible


_SURROGATE = re.compile("[\ud800-\udfff]")


def _chars(textpage: Any, n: int) -> str:
    """pdfium's `n` characters, one string character each: one bulk read of the page's UTF-16 text,
    or one call per character when that does not line up (a character beyond the BMP)."""
    import pypdfium2.raw as raw

    buf = ctypes.create_string_buffer(2 * (n + 1))
    written = raw.FPDFText_GetText(textpage, 0, n, ctypes.cast(buf, ctypes.POINTER(ctypes.c_ushort)))
    text = buf.raw[: 2 * max(0, written - 1)].decode("utf-16-le", "surrogatepass")  # without the NUL
    if len(text) == n and not _SURROGATE.search(text):
        return text
    codes = (raw.FPDFText_GetUnicode(textpage, i) for i in range(n))  # a line-end hyphen reads as 2 here
    return "".join(chr(HYPHEN_MARK if c == 2 else min(c, 0x10FFFF)) for c in codes)


def _map_error_share(textpage: Any, chars: str) -> float:
    """The share of readable visible characters pdfium flags as unmapped, asked of at most ~96 of
    them spread over the page (enough to tell "most"; a call per character is the slow part)."""
    import pypdfium2.raw as raw

    step = max(1, len(chars) // 96)
    sample = [i for i in range(0, len(chars), step) if chars[i] > " " and not unreadable_char(chars[i])]
    if not sample:
        return 0.0
    return sum(1 for i in sample if raw.FPDFText_HasUnicodeMapError(textpage, i) == 1) / len(sample)


def _normalise(raw_text: str) -> str:
    return raw_text.replace("\r\n", "\n").replace("\r", "\n").translate(_TRANSLATE).strip()


def page_text(textpage: Any) -> tuple[str, int]:
    """(the page's text, the visible characters pdfium flags as unmapped but shows as readable ones).
    Call with PDFIUM_LOCK held."""
    import pypdfium2.raw as raw

    n = max(0, raw.FPDFText_CountChars(textpage))
    if not n:
        return "", 0
    chars = _chars(textpage, n)
    text = _normalise(chars)
    share = _map_error_share(textpage, chars)
    readable = visible_chars(text) - len(_UNREADABLE.findall(text)) if share else 0
    return text, round(share * readable)


def page_index(textpage: Any) -> tuple[str, list[int]]:
    """The page's text as `page_text` gives it, with the pdfium character index of each of its
    characters (what maps an offset to a character box). Call with PDFIUM_LOCK held."""
    import pypdfium2.raw as raw

    n = max(0, raw.FPDFText_CountChars(textpage))
    chars = _chars(textpage, n) if n else ""
    out: list[str] = []
    index: list[int] = []
    for i, ch in enumerate(chars):
        if ch == "\r" and i + 1 < n and chars[i + 1] == "\n":
            continue  # pdfium's generated line break is "\r\n": only the "\n" is kept
        out.append("\n" if ch == "\r" else ch.translate(_TRANSLATE))
        index.append(i)
    text = "".join(out)
    lead = len(text) - len(text.lstrip())
    stripped = text.strip()
    return stripped, index[lead : lead + len(stripped)]


def open_document(data: bytes) -> Any:
    """A pypdfium2 PdfDocument of `data` (call with PDFIUM_LOCK held; close it before releasing)."""
    import pypdfium2 as pdfium

    return pdfium.PdfDocument(data)


Box = tuple[int, float, float, float, float]  # page (from 1), left, top, right, bottom in 0..1 of the page


def _rects(page: Any, textpage: Any, first: int, count: int) -> list[tuple[float, float, float, float]]:
    """The rectangles (one per line segment) of pdfium characters first..first+count-1, as shares of
    the page as it is shown (rotation and crop box applied; origin top left)."""
    import pypdfium2.raw as raw

    scale = 1_000_000
    out = []
    for r in range(raw.FPDFText_CountRects(textpage, first, count)):
        left, top, right, bottom = (ctypes.c_double() for _ in range(4))
        if not raw.FPDFText_GetRect(textpage, r, left, top, right, bottom):
            continue
        corners = []
        for x, y in ((left.value, top.value), (right.value, bottom.value)):
            dx, dy = ctypes.c_int(), ctypes.c_int()
            raw.FPDF_PageToDevice(page, 0, 0, scale, scale, 0, x, y, dx, dy)
            corners.append((dx.value / scale, dy.value / scale))
        (x0, y0), (x1, y1) = corners
        box = (min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1))
        out.append(tuple(round(min(1.0, max(0.0, v)), 4) for v in box))
    return _merge_lines(out)  # type: ignore[arg-type]


def _merge_lines(rects: list[tuple[float, float, float, float]]) -> list[tuple[float, float, float, float]]:
    """Rectangles that continue one line (their vertical centres within 3/4 of the taller one's height,
    the gap between them under twice that height) merged into one: a producer that draws each
    character as its own text object gives one rectangle per character (a hyphen or an underscore a
    thin one off the centre line), a reader wants one per line."""
    out: list[tuple[float, float, float, float]] = []
    for r in rects:
        if out:
            p = out[-1]
            height = max(p[3] - p[1], r[3] - r[1])
            centres = abs((p[1] + p[3]) / 2 - (r[1] + r[3]) / 2)
            if height > 0 and centres < 0.75 * height and -height < r[0] - p[2] < 2 * height:
                out[-1] = (min(p[0], r[0]), min(p[1], r[1]), max(p[2], r[2]), max(p[3], r[3]))
                continue
        out.append(r)
    return out


def span_boxes(data: bytes, text: str, pages: Any, spans: list[tuple[int, int]]) -> list[list[Box]]:
    """For each `(start, end)` character span of a PDF's text layer (`text`, `pages`: what
    tasks.source.readers.pdf.read_pdf gave for `data`), the boxes of its characters on their page(s), one
    per line segment. A span on a page whose text is not the page's text layer (a poor page, left
    out) gets no box there: never a made-up box."""
    out: list[list[Box]] = [[] for _ in spans]
    with PDFIUM_LOCK:
        doc = open_document(data)
        try:
            for page_span in pages:
                start, end = page_span.start, page_span.end
                wanted = [  # each span's part on this page, as offsets in the page's text
                    (k, max(s, start) - start, min(e, end) - start)
                    for k, (s, e) in enumerate(spans)
                    if s < end and e > start
                ]
                if not wanted:
                    continue
                page = doc[page_span.number - 1]
                textpage = page.get_textpage()
                try:
                    page_str, index = page_index(textpage)
                    if page_str != text[start:end]:
                        continue
                    for k, s, e in wanted:
                        local = [i for i in range(s, e) if not page_str[i].isspace()]
                        if not local:
                            continue
                        first, last = index[local[0]], index[local[-1]]
                        for box in _rects(page, textpage, first, last - first + 1):
                            out[k].append((page_span.number, *box))
                finally:
                    textpage.close()
                    page.close()
        finally:
            doc.close()
    return out

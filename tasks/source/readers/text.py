"""Text formats: txt, md, csv, html, json and source code, decoded.

Decoding: UTF-8 (a leading BOM is dropped) or UTF-16 / UTF-32 announced by their byte-order mark;
anything else goes to charset-normalizer, a well-kept detector (Latin-1, Windows-1252, Shift-JIS,
...), and the result is marked as guessed (`Content.encoding`, `Content.guessed`), never sent as
mojibake unmarked. Bytes no encoding explains stay `undecodable`. NUL bytes mean `binary`.

Every parser is bounded: JSON nested deeper than `MAX_JSON_DEPTH` is `undecodable` (checked before
parsing, so no input reaches Python's recursion limit).
"""

from __future__ import annotations

import codecs
import json

from tasks.source.readers.content import BinaryContent, Content, ExtractError

# Byte-order marks, longest first (the UTF-32-LE mark starts with the UTF-16-LE one).
BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
MAX_JSON_DEPTH = 512  # deeper JSON is undecodable (json.loads would hit the recursion limit)
GUESS_MAX_CHAOS = 0.25  # charset-normalizer's "mess" above this: not text in any encoding


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


# Never guessed: a UTF-16/32 text without its byte-order mark is far rarer than a short Latin text
# these decodings turn into CJK (charset-normalizer's own guess for "Müller" in Latin-1 is UTF-16).
NOT_GUESSED = ["utf_16", "utf_16_le", "utf_16_be", "utf_32", "utf_32_le", "utf_32_be", "utf_7"]
PREFERRED = "cp1252"  # the usual legacy encoding of Western text (Latin-1's printable superset)


def guess_encoding(data: bytes) -> tuple[str, str] | None:
    """(text, encoding) by charset-normalizer, or None. Between single-byte code pages that read the
    bytes equally well (no more chaos, as coherent), Windows-1252 wins: charset-normalizer reports
    one of equal decodings (cp1250 for a German Latin-1 text), and 1252 is what legacy Western
    files are; Cyrillic, Greek, Polish or Shift-JIS texts read better in their own and keep it."""
    from charset_normalizer import from_bytes

    best = from_bytes(data, cp_exclusion=NOT_GUESSED).best()
    if best is None or best.chaos > GUESS_MAX_CHAOS:
        return None
    western = from_bytes(data, cp_isolation=[PREFERRED]).best()
    single_byte = len(data.decode(str(best.encoding), "replace")) == len(data)
    if (
        western is not None
        and single_byte
        and western.chaos <= best.chaos
        and western.coherence >= best.coherence - 0.1
    ):
        return str(western), PREFERRED
    return str(best), str(best.encoding)


def decode(data: bytes) -> tuple[str, str | None]:
    """(text, encoding guessed or None). UTF-8 and byte-order marks first; then charset-normalizer."""
    try:
        return decode_utf8(data), None
    except BinaryContent:
        raise
    except ExtractError as strict:
        guessed = guess_encoding(data)
        if guessed is None:
            raise ExtractError(f"{strict}; no other encoding reads it (charset-normalizer)") from strict
        text, encoding = guessed
        if "\x00" in text:
            raise BinaryContent("contains NUL characters (binary content)") from strict
        return text, encoding


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
    {"p", "div", "br", "li", "tr", "table", "ul", "ol", "section", "article", "header", "footer", "title"}
    | {"pre", "blockquote", "dt", "dd", "hr", "h1", "h2", "h3", "h4", "h5", "h6"}
)


class _TextCollector:
    """An lxml parser target: the visible text, one line break around each block element."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self._skip_depth = 0

    def start(self, tag: str, attrib: object) -> None:
        tag = tag.lower()
        if tag in _SKIP_TAGS:
            self._skip_depth += 1
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def end(self, tag: str) -> None:
        tag = tag.lower()
        if tag in _SKIP_TAGS:
            self._skip_depth = max(0, self._skip_depth - 1)
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def data(self, data: str) -> None:
        if self._skip_depth == 0:
            self.parts.append(data)

    def close(self) -> str:
        return "".join(self.parts)


def html_to_text(html: str) -> str:
    """Visible text of an HTML page: tags, scripts and styles removed, one line per block element.

    libxml2's HTML parser (lxml), fed through a target that keeps no tree: linear in the page's
    size. The standard library's HTMLParser is quadratic on unclosed tags (`<a<a<a...`: a 360 KB
    page took minutes) and raises AssertionError on others (`<![<![`)."""
    from lxml import etree

    if not html.strip():
        return ""
    parser = etree.HTMLParser(target=_TextCollector(), recover=True, no_network=True)
    try:
        parser.feed(html)
        collected: str = parser.close()
    except etree.LxmlError as e:
        raise ExtractError(f"invalid HTML: {e}".splitlines()[0][:200]) from e
    lines = (" ".join(line.split()) for line in collected.splitlines())
    return "\n".join(line for line in lines if line)


def _decoded(text: str, guess: str | None) -> Content:
    return Content(text, encoding=guess, guessed=guess is not None)


def read_plain(data: bytes) -> Content:
    return _decoded(*decode(data))


def read_html(data: bytes) -> Content:
    text, guess = decode(data)
    return _decoded(html_to_text(text), guess)


def read_json(data: bytes) -> Content:
    text, guess = decode(data)
    if json_depth_exceeds(text):
        raise ExtractError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise ExtractError(f"invalid JSON: {e.msg} at line {e.lineno} column {e.colno}") from e
    except (RecursionError, ValueError) as e:  # a bound we did not foresee: still only this file
        raise ExtractError(f"invalid JSON: {type(e).__name__}") from e
    return _decoded(json.dumps(obj, indent=2, ensure_ascii=False), guess)

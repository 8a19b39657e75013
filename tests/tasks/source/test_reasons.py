"""Mail and Office inputs each end with a document or a named, stable reason: a message that is
one attachment, encoded attachment names, password-protected OOXML, Office files of only pictures
or charts, deep MIME nesting, active content beyond `vbaProject.bin`, reasons without addresses.
Every file is generated here (no third-party document)."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import docx
import pytest
from PIL import Image

from docmill.settings import Settings
from examples import formats as F
from tasks.source.inventory import inventory
from tasks.source.readers import Unreadable, read
from tasks.source.readers.mail import read_eml

HEAD = "From: billing@example.test\r\nTo: ap@example.test\r\nSubject: invoice\r\nMIME-Version: 1.0\r\n"


def _reason(doc_type: str, data: bytes) -> tuple[str, str]:
    with pytest.raises(Unreadable) as e:
        read(doc_type, data)
    return e.value.reason, str(e.value)


def _png(color: str = "white") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), color).save(buf, "PNG")
    return buf.getvalue()


def _with_members(office: bytes, members: dict[str, bytes], content_types: bytes | None = None) -> bytes:
    """`office` with members added (and its [Content_Types].xml replaced when given)."""
    src = zipfile.ZipFile(io.BytesIO(office))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for info in src.infolist():
            body = src.read(info)
            if info.filename == "[Content_Types].xml" and content_types is not None:
                body = content_types
            z.writestr(info.filename, body)
        for name, body in members.items():
            z.writestr(name, body)
    return out.getvalue()


def test_a_message_whose_whole_body_is_one_attachment_yields_that_attachment(tmp_path: Path) -> None:
    gz = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xcbH\xcd\xc9\xc9\x07\x00\x86\xa6\x106\x05\x00\x00\x00"
    body = "H4sIAAAAAAAAA8tIzcnJBwCGphA2BQAAAA==\r\n"
    msg = (
        HEAD
        + "Content-Type: application/gzip; name=blah.gz\r\nContent-Disposition: attachment; filename=blah.gz\r\n"
    )
    (tmp_path / "only.eml").write_bytes((msg + "Content-Transfer-Encoding: base64\r\n\r\n" + body).encode())
    docs = {d.doc_id: d for d in inventory(str(tmp_path), Settings())}
    assert list(docs) == ["only.eml", "only.eml/1-blah.gz"]
    part = docs["only.eml/1-blah.gz"]
    assert part.parent == "only.eml" and part.sha256 == hashlib.sha256(gz).hexdigest()
    assert part.skip_reason is not None and part.skip_reason.value == "unsupported_type"
    assert "blah.gz" in read_eml((tmp_path / "only.eml").read_bytes()).text


@pytest.mark.parametrize(
    ("content_type", "disposition"),
    [
        ("application/pdf; name==?UTF-8?B?RmFrdHVyYSDDpMO2w7wucGRm?=", "attachment"),  # unquoted RFC 2047
        ("application/pdf", 'attachment; filename="=?UTF-8?B?RmFrdHVyYSDDpMO2w7wucGRm?="'),
        ("application/pdf", 'attachment; filename="=?iso-8859-1?Q?Faktura_=E4=F6=FC.pdf?="'),
        ("application/pdf", "attachment; filename*=UTF-8''Faktura%20%C3%A4%C3%B6%C3%BC.pdf"),  # RFC 2231
        ("application/pdf", "attachment; filename*0*=UTF-8''Faktura%20%C3%A4; filename*1*=%C3%B6%C3%BC.pdf"),
    ],
)
def test_encoded_attachment_names_are_decoded(content_type: str, disposition: str) -> None:
    msg = (
        f"{HEAD}Content-Type: multipart/mixed; boundary=XX\r\n\r\n--XX\r\nContent-Type: text/plain\r\n\r\n"
        f"see attached\r\n--XX\r\nContent-Type: {content_type}\r\nContent-Disposition: {disposition}\r\n"
        "Content-Transfer-Encoding: base64\r\n\r\nJVBERi0=\r\n--XX--\r\n"
    )
    assert [p.name for p in read_eml(msg.encode()).parts] == ["Faktura äöü.pdf"]


def _nested(levels: int) -> bytes:
    sections = "".join(
        f"Content-Type: multipart/mixed; boundary=b{i}\r\n\r\n--b{i}\r\n" for i in range(levels)
    )
    return (HEAD + sections + "Content-Type: text/plain\r\n\r\nx\r\n").encode()


def test_ten_thousand_nested_multiparts_are_over_limit() -> None:
    reason, detail = _reason("eml", _nested(10_000))
    assert reason == "over_limit" and "10,000 multipart sections" in detail
    assert read("eml", _nested(100)).text.startswith("From:")  # deep but within the limit: read


def _cfb(*streams: str) -> bytes:
    """An OLE2 (CFB) container's header and directory sector naming `streams` (what an encrypted
    OOXML file is: EncryptionInfo + EncryptedPackage)."""
    header = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
    entries = b""
    for name in ("Root Entry", *streams):
        raw = name.encode("utf-16-le") + b"\x00\x00"
        entries += raw.ljust(64, b"\x00") + len(raw).to_bytes(2, "little") + b"\x02" + b"\x00" * 61
    return header + b"\x00" * 504 + entries.ljust(512, b"\x00") + b"\x00" * 1024


@pytest.mark.parametrize("kind", ["docx", "xlsx", "pptx"])
def test_password_protected_ooxml_is_encrypted_and_other_ole2_is_legacy(kind: str) -> None:
    reason, detail = _reason(kind, _cfb("EncryptionInfo", "EncryptedPackage"))
    assert reason == "encrypted" and "password" in detail
    reason, detail = _reason(kind, _cfb("WordDocument", "1Table"))
    assert reason == "unsupported_type" and "legacy binary Office" in detail


def test_office_files_of_only_pictures_or_charts_name_what_they_hold() -> None:
    d = docx.Document()  # a generated .docx of three pictures and no text
    for color in ("red", "green", "blue"):  # three different pictures (one file each)
        d.add_picture(io.BytesIO(_png(color)))
    buf = io.BytesIO()
    d.save(buf)
    assert _reason("docx", buf.getvalue()) == (
        "no_text",
        "no text: 3 pictures (send it as a PDF to have them read)",
    )
    chart_deck = _with_members(
        F.pptx_bytes([[" "]]),
        {"ppt/charts/chart1.xml": b"<c:chartSpace/>", "ppt/embeddings/Sheet1.xlsx": b"x"},
    )
    reason, detail = _reason("pptx", chart_deck)
    assert reason == "no_text" and detail.startswith("no text: 1 chart (")
    reason, detail = _reason("docx", F.docx_bytes([" "]))
    assert reason == "empty" and "only whitespace" not in detail


def test_reasons_carry_no_memory_address() -> None:
    reason, detail = _reason("png", b"\x89PNG\r\n\x1a\n not an image at all")
    assert reason == "corrupt" and "0x" not in detail and " at " not in detail


MACRO_CT = b'<Types><Override PartName="/word/document.xml" ContentType="application/vnd.ms-word.document.macroEnabled.main+xml"/></Types>'
VBA_CT = b'<Types><Default Extension="bin" ContentType="application/vnd.ms-office.vbaProject"/></Types>'
SHEET_CT = b'<Types><Override PartName="/xl/macrosheets/sheet1.xml" ContentType="application/vnd.ms-excel.macrosheet+xml"/></Types>'


def test_active_content_is_found_beyond_a_member_named_vbaproject_bin() -> None:
    doc = F.docx_bytes(["Invoice 7"])
    cases = {
        "macro-enabled main part": _with_members(doc, {}, MACRO_CT),
        "VBA macro project": _with_members(doc, {"word/renamed.bin": b"\xd0\xcf\x11\xe0"}, VBA_CT),
        "ActiveX": _with_members(doc, {"word/activeX/activeX1.xml": b"<ax/>"}),
    }
    for what, data in cases.items():
        reason, detail = _reason("docx", data)
        assert reason == "macro_enabled" and what in detail, (what, detail)
    reason, detail = _reason("xlsx", _with_members(F.xlsx_bytes({"S": [["a"]]}), {}, SHEET_CT))
    assert reason == "macro_enabled" and "Excel 4.0 macro sheet" in detail
    assert "Invoice 7" in read("docx", doc).text  # an ordinary .docx is read

"""E-mail (.eml, RFC 5322 / MIME), read with the standard library's `email` package.

The message's text is its headers (From, To, Cc, Date, Subject, Message-ID), its body (the plain
alternative, else the HTML one as text) and the list of its attachments. Each attachment is a `Part`
the inventory makes its own document (an attached message, message/rfc822, is read the same way in
turn); a message whose whole body is one non-text part has that part as its one attachment.
`part_bytes` finds a part again through `read_eml` itself, so what is loaded is what the inventory
saw. Attachment names are decoded (RFC 2231, and RFC 2047 words, also the unquoted ones the
standard parser drops). More than MAX_MULTIPARTS multipart sections is `over_limit` before parsing:
the parser's cost grows with the open boundaries, and it recurses once per level.
"""

from __future__ import annotations

import email
import email.errors
import email.policy
import mimetypes
import re
from email.header import decode_header, make_header
from email.message import EmailMessage, Message
from typing import Any

from tasks.source.readers.content import Content, Part, Unreadable
from tasks.source.readers.text import html_to_text

HEADERS = ("From", "To", "Cc", "Date", "Subject", "Message-ID")
TYPE_EXTENSIONS = {
    "message/rfc822": "eml",
    "application/pdf": "pdf",
    "text/plain": "txt",
    "text/html": "html",
    "text/csv": "csv",
    "image/png": "png",
    "image/jpeg": "jpg",
}


MAX_MULTIPARTS = 200  # 200 nested sections parse in ~0.5 s on a busy core; 10,000 recurse too deep
_MULTIPART = re.compile(rb"^content-type:[ \t]*multipart/", re.IGNORECASE | re.MULTILINE)
_RAW_NAME = re.compile(r"""(?:^|;)\s*(?:file)?name\s*=\s*(?:"([^"]*)"|([^;]*))""", re.IGNORECASE)


def parse(data: bytes) -> EmailMessage:
    """The message, or over_limit when its multipart sections are too many to parse safely."""
    sections = len(_MULTIPART.findall(data))
    if sections > MAX_MULTIPARTS:
        raise Unreadable(
            "over_limit",
            f"{sections:,} multipart sections (limit {MAX_MULTIPARTS}): MIME nested or repeated too deep to read",
        )
    try:
        msg = email.message_from_bytes(data, policy=email.policy.default)
    except RecursionError as e:
        raise Unreadable("over_limit", "MIME parts nested too deep to read") from e
    assert isinstance(msg, EmailMessage)
    return msg


def _is_lone_attachment(msg: Message) -> bool:
    """A message that is not multipart and whose one body is a file, not text to read (a multipart
    whose boundary never comes is a broken message, not a file)."""
    if msg.is_multipart() or msg.get_content_maintype() in ("multipart", "message"):
        return False
    return msg.get_content_disposition() == "attachment" or msg.get_content_maintype() != "text"


def _attachments(msg: EmailMessage) -> list[Message]:
    if _is_lone_attachment(msg):
        return [msg]
    try:
        return list(msg.iter_attachments())
    except RecursionError as e:
        raise Unreadable("over_limit", "MIME parts nested too deep to read") from e
    except Exception as e:  # a malformed multipart: this message only
        raise Unreadable("corrupt", f"invalid MIME structure: {type(e).__name__}: {e}"[:200]) from e


def _decoded(text: str) -> str:
    """RFC 2047 encoded words in `text` decoded (as they are when they do not decode)."""
    if "=?" not in text:
        return text
    try:
        return str(make_header(decode_header(text)))
    except (LookupError, UnicodeError, ValueError, email.errors.HeaderParseError):
        return text


def _raw_filename(part: Message) -> str:
    """The file name as the raw headers write it, for the names the parser cannot read (an
    unquoted RFC 2047 word: `filename==?utf-8?B?...?=`)."""
    for header in ("Content-Disposition", "Content-Type"):
        for key, value in part.raw_items():
            if key.lower() != header.lower():
                continue
            for m in _RAW_NAME.finditer(" ".join(str(value).split())):
                if found := (m.group(1) or m.group(2) or "").strip():
                    return found
    return ""


def _name(part: Message, i: int) -> str:
    raw = _decoded(part.get_filename() or _raw_filename(part))
    name = raw.replace("/", "_").replace("\\", "_").strip() or f"part-{i}"
    if "." not in name.lstrip("."):
        ctype = part.get_content_type()
        ext = TYPE_EXTENSIONS.get(ctype) or (mimetypes.guess_extension(ctype) or ".bin").lstrip(".")
        name = f"{name}.{ext}"
    return name


def _payload(part: Message) -> bytes:
    if part.get_content_type() == "message/rfc822":
        inner: Any = part.get_payload()
        inner = inner[0] if isinstance(inner, list) and inner else inner
        return bytes(inner.as_bytes(policy=email.policy.default)) if isinstance(inner, Message) else b""
    data = part.get_payload(decode=True)
    return bytes(data) if isinstance(data, bytes) else b""


def _body(msg: EmailMessage) -> str:
    if _is_lone_attachment(msg):
        return ""  # the message's one body is its attachment
    body = msg.get_body(preferencelist=("plain", "html"))
    if body is None:
        return ""
    try:
        text = str(body.get_content())
    except (LookupError, UnicodeError, ValueError):
        payload = body.get_payload(decode=True)
        text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
    return html_to_text(text) if body.get_content_type() == "text/html" else text.strip()


def read_eml(data: bytes) -> Content:
    """Headers, body and the attachment list as text; the attachments as parts."""
    msg = parse(data)
    lines = [f"{h}: {msg[h]}" for h in HEADERS if msg[h] is not None]
    parts: list[Part] = []
    for i, part in enumerate(_attachments(msg), start=1):
        parts.append(Part(_name(part, i), part.get_content_type(), _payload(part)))
    body = _body(msg)
    if not lines and not body.strip() and not parts:
        raise Unreadable("empty", "no e-mail headers, body or attachments")
    text = "\n".join(lines) + "\n\n" + body
    if parts:
        listed = [f"{i}. {p.name} ({p.content_type}, {len(p.data):,} bytes)" for i, p in enumerate(parts, 1)]
        text += "\n\nAttachments:\n" + "\n".join(listed)
    message_id = str(msg["Message-ID"]).strip() if msg["Message-ID"] else None
    return Content(text.strip() + "\n", parts=tuple(parts), message_id=message_id)


def part_bytes(data: bytes, path: list[int]) -> bytes:
    """The bytes of the attachment at `path` (1-based indices, nested through attached messages),
    found by `read_eml` itself: the parts the inventory made documents of are the parts loaded."""
    for index in path:
        parts = read_eml(data).parts
        if not 1 <= index <= len(parts):
            raise Unreadable("corrupt", f"attachment {index} is not in the message any more")
        data = parts[index - 1].data
    return data

"""E-mail (.eml, RFC 5322 / MIME), read with the standard library's `email` package.

The message's own text is its headers (From, To, Cc, Date, Subject, Message-ID), its body (the
plain-text alternative, else the HTML one as text) and a list of its attachments. Each attachment
is a `Part` the inventory makes into its own document, linked to the message (tasks.inventory); an
attached message (message/rfc822, a forward) is a part of type eml, read the same way in turn.
`part_bytes` finds a part again from its index path, so an attachment is re-read from its message
and checked against the sha256 taken at inventory time.
"""

from __future__ import annotations

import email
import email.policy
import mimetypes
from email.message import EmailMessage, Message
from typing import Any

from tasks.readers.content import Content, Part, Unreadable
from tasks.readers.text import html_to_text

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


def parse(data: bytes) -> EmailMessage:
    msg = email.message_from_bytes(data, policy=email.policy.default)
    assert isinstance(msg, EmailMessage)
    return msg


def _attachments(msg: EmailMessage) -> list[Message]:
    try:
        return list(msg.iter_attachments())
    except Exception as e:  # a malformed multipart: this message only
        raise Unreadable("corrupt", f"invalid MIME structure: {type(e).__name__}: {e}"[:200]) from e


def _name(part: Message, i: int) -> str:
    raw = part.get_filename() or ""
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
    """The bytes of the attachment at `path` (1-based indices, nested through attached messages)."""
    for index in path:
        parts = _attachments(parse(data))
        if not 1 <= index <= len(parts):
            raise Unreadable("corrupt", f"attachment {index} is not in the message any more")
        data = _payload(parts[index - 1])
    return data

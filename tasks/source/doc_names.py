"""Names of documents: the doc id of a path relative to the source, and the include/exclude globs
that select paths (`**` spans directories, `*` and `?` stay inside one segment; a pattern without
`/` matches the file name at any depth).

Doc ids are one-to-one: two different files never share one, whatever their names. Three disjoint
namespaces:

- **plain**: a name that is already a safe store key (`checkpoints.keys.safe_key` leaves it as it
  is) is its own id, unless it could be mistaken for one of the others: its last segment ends in
  `~` + 8 hex digits (+ an extension) or in `~` + 12 hex digits (the mark of a store key
  shortened by `checkpoints.keys.fitted_key`), or a folder in it ends in `.eml`.
- **escaped** (every other name): each segment is escaped reversibly (`%` and characters a key
  cannot hold become `%XX` / `%uXXXX`; an empty segment is `%`; a leading `.` of `.`, `..` or `.~x`,
  the `:` of a drive letter and the `.` of a folder ending in `.eml` become `%2E` / `%3A`), and the
  last segment gets `~` + 8 hex digits of the name's sha256 before its extension:
  `x<newline>y.txt` -> `x%0Ay~513166a9.txt`. The raw name can be read back from the id, so two names
  never share one; a plain name never has that last segment.
- **hashed**: a name whose escaped id would not fit the key length limits becomes
  `unsafe/<56 hex>~<8 hex>.<ext>` (a sha256 of the name, the extension kept when short and
  alphanumeric); no escaped id has exactly one `~` and no `%` in its last segment, and hashes of
  names and of attachments (below) are taken over distinct prefixes.

An e-mail attachment's id is `<message id>/<n>-<file name>` (`attachment_doc_id`): its folder is the
message's id, which ends in `.eml`, so no plain or escaped name lands there; `n` keeps the
attachments of one message apart whatever their names (which are made safe lossily).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import unicodedata
from collections.abc import Iterable
from functools import lru_cache

from checkpoints.keys import MAX_KEY_BYTES, safe_key
from docmill.errors import UnsafeKey


@lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        c = pattern[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def glob_match(path: str, pattern: str) -> bool:
    """True if relative `path` matches `pattern` (see the module docstring for the rules)."""
    target = path if "/" in pattern else path.rsplit("/", 1)[-1]
    return _glob_regex(pattern.lstrip("/") if "/" in pattern else pattern).fullmatch(target) is not None


def selected(path: str, include: Iterable[str], exclude: Iterable[str]) -> bool:
    """Included by some include pattern and by no exclude pattern."""
    return any(glob_match(path, p) for p in include) and not any(glob_match(path, p) for p in exclude)


_UNSAFE_CHAR = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff\\]")
# What a key segment cannot hold as it is (checkpoints.keys refuses these categories and the bidi
# controls), plus `%`, the escape character itself.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})
_ESCAPED_CHARS = frozenset("%\\\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# The last segment of an escaped or hashed id: `~` + 8 hex digits, then at most one extension.
ID_MARK = re.compile(r"~[0-9a-f]{8}(?:\.[^.]*)?$")
# The last segment of a store key `checkpoints.keys.fitted_key` shortened (`<cut>~<12 hex>`, then
# its suffix): a plain id shaped like one would share that key (a review item) with a long id.
FITTED_MARK = re.compile(r"~[0-9a-f]{12}$")
MESSAGE_SUFFIX = ".eml"
HASHED_FOLDER = "unsafe"
_DRIVE = re.compile(r"[A-Za-z]:")
_SHORT_EXT = re.compile(r"[A-Za-z0-9]{1,16}")


def _safe_key(name: str) -> str:
    """The store's `safe_key` of `name`, over the floor of a doc id's own rules (no empty, absolute,
    dot or control-character names)."""
    if _UNSAFE_CHAR.search(name) or any(p in ("", ".", "..") for p in name.split("/")):
        raise UnsafeKey(f"unsafe key {name!r}")
    return safe_key(name)


def _is_plain(name: str) -> bool:
    """A name that is its own id: a safe key as it is, and not shaped like an escaped, hashed or
    attachment id."""
    try:
        if _safe_key(name) != name:
            return False
    except UnsafeKey:
        return False
    parts = name.split("/")
    if ID_MARK.search(parts[-1]) or FITTED_MARK.search(parts[-1]):
        return False
    return not any(p.lower().endswith(MESSAGE_SUFFIX) for p in parts[:-1])


def _escape_char(ch: str) -> str:
    if ch in _ESCAPED_CHARS or unicodedata.category(ch) in _ESCAPED_CATEGORIES:
        cp = ord(ch)
        return f"%{cp:02X}" if cp < 0x100 else f"%u{cp:04X}"
    return ch


def _escape_segment(seg: str, first: bool, last: bool) -> str:
    if not seg:
        return "%"
    out = "".join(map(_escape_char, seg))
    if seg in (".", "..") or seg.startswith(".~"):
        out = "%2E" + out[1:]
    if not last and out.lower().endswith(MESSAGE_SUFFIX):
        out = out[: -len(MESSAGE_SUFFIX)] + "%2E" + out[-3:]
    if first and _DRIVE.fullmatch(out):
        out = out[0] + "%3A"
    return out


def _marked(segment: str, mark: str) -> str:
    """`segment` with `~<mark>` before its extension (or at its end)."""
    stem, dot, ext = segment.rpartition(".")
    return f"{stem}~{mark}.{ext}" if dot and stem else f"{segment}~{mark}"


def _hashed_id(digest: str, name: str) -> str:
    ext = name.rsplit("/", 1)[-1].rpartition(".")[2] if "." in name.rsplit("/", 1)[-1] else ""
    tail = f".{ext}" if _SHORT_EXT.fullmatch(ext) else ""
    return f"{HASHED_FOLDER}/{digest[:56]}~{digest[56:64]}{tail}"


def make_doc_id(name: str) -> str:
    """The doc id of a raw relative name: the name itself when it is plain, else its escaped form,
    else (too long) its hashed form. One-to-one (see the module docstring)."""
    if _is_plain(name):
        return name
    digest = hashlib.sha256(b"name\0" + name.encode("utf-8", "surrogatepass")).hexdigest()
    parts = name.split("/")
    n = len(parts) - 1
    escaped = [_escape_segment(p, i == 0, i == n) for i, p in enumerate(parts)]
    escaped[-1] = _marked(escaped[-1], digest[:8])
    doc_id = "/".join(escaped)
    with contextlib.suppress(UnsafeKey):
        if safe_key(doc_id) == doc_id:
            return doc_id
    return _hashed_id(digest, name)


_ATTACHMENT_NAME_BYTES = 200
_ATTACHMENT_SEGMENT = re.compile(r"[0-9]+-")


def _shortened(name: str, room: int) -> str:
    """`name` cut to `room` UTF-8 bytes on a character boundary, its extension (<= 16 chars) kept."""
    if len(name.encode("utf-8")) <= room:
        return name
    stem, dot, ext = name.rpartition(".")
    ext = f".{ext}" if dot and stem and len(ext) <= 16 else ""
    base = stem if ext else name
    return base.encode("utf-8")[: max(0, room - len(ext))].decode("utf-8", "ignore") + ext


def attachment_doc_id(message_id: str, index: int, name: str) -> str:
    """The id of attachment `index` (1-based) of the message whose id is `message_id`:
    `<message id>/<index>-<name>`, the name made safe (characters a key cannot hold become `_`,
    shortened to fit a key, at most 200 bytes, its extension kept); a hashed id only when the
    message's own id leaves no room."""
    clean = "".join("_" if _escape_char(c) != c or c == "/" else c for c in name) or "_"
    head = f"{message_id}/{index}-"
    room = min(_ATTACHMENT_NAME_BYTES, MAX_KEY_BYTES - len(head.encode("utf-8", "surrogatepass")))
    doc_id = head + _shortened(clean, room)
    with contextlib.suppress(UnsafeKey):
        if room >= 20 and safe_key(doc_id) == doc_id:
            return doc_id
    digest = hashlib.sha256(f"attachment\0{message_id}\0{index}".encode("utf-8", "surrogatepass")).hexdigest()
    return _hashed_id(digest, clean)


def parent_of(doc_id: str) -> str | None:
    """The message an attachment's id names (`a.eml/2-x.pdf` -> `a.eml`), else None. Exact: only an
    attachment's id has a folder ending in `.eml` (a hashed attachment id names none)."""
    head, sep, last = doc_id.rpartition("/")
    if sep and head.lower().endswith(MESSAGE_SUFFIX) and _ATTACHMENT_SEGMENT.match(last):
        return head
    return None

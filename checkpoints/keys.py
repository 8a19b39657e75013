"""Object keys: sanitizing names into safe keys, content hashes and idempotency keys.

Everything here is a pure function of its inputs, so a key computed in one run, a later run
or a resume is the same key.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
import unicodedata
from typing import Any

from docmill.errors import UnsafeKey

# Object names starting with this are the local backend's temp and lock files; no key may use it.
RESERVED_PREFIX = ".~"
MAX_SEGMENT_BYTES = 255
MAX_KEY_BYTES = 1024
IDEMPOTENCY_KEY_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SLUG_LEN = 12
_HASH_LEN = 50  # base32 chars (250 bits); slug + "_" + hash stays <= 63 chars
_BAD_CATEGORIES = {"Cc", "Cs", "Zl", "Zp"}
_BIDI_CONTROLS = set("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def sha256_hex(data: bytes) -> str:
    """Hex sha256 of bytes (document hashes)."""
    return hashlib.sha256(data).hexdigest()


def source_digest(source_id: str) -> str:
    """What names a source (a folder, an s3:// prefix) in keys: its inventory cache, its chunk map."""
    return hashlib.sha256(source_id.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def canonical_json(obj: Any) -> bytes:
    """The one byte encoding of JSON-able data that hashes use: sorted keys, no spaces, UTF-8.

    Raises TypeError/ValueError for data that is not plain JSON (sets, objects, NaN): a hash of
    an unstable encoding would make keys unstable, so that is a bug to fix at the caller.
    """
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
        "utf-8"
    )


def content_hash(obj: Any) -> str:
    """Stable sha256 hex of JSON-able data (prompt and schema hashes)."""
    return sha256_hex(canonical_json(obj))


def idempotency_key(
    pass_name: str,
    recipe_version: str,
    prompt_hash: str,
    schema_hash: str,
    model: str,
    doc_sha256: str,
    params: dict[str, Any],
) -> str:
    """The key of one logical request: `<pass slug>_<base32 sha256 of all inputs>`.

    1-64 chars of `[A-Za-z0-9_-]`, so it doubles as a Message Batches custom_id. The slug is only
    for humans reading the store; the hash covers every input in full.
    """
    inputs = {
        "pass": pass_name,
        "recipe_version": recipe_version,
        "prompt_hash": prompt_hash,
        "schema_hash": schema_hash,
        "model": model,
        "doc_sha256": doc_sha256,
        "params": params,
    }
    digest = hashlib.sha256(canonical_json(inputs)).digest()
    b32 = base64.b32encode(digest).decode("ascii").rstrip("=").lower()[:_HASH_LEN]
    slug = re.sub(r"[^A-Za-z0-9-]+", "-", pass_name).strip("-")[:_SLUG_LEN].strip("-") or "k"
    return f"{slug}_{b32}"


def _refuse(name: str, why: str, hint: str) -> UnsafeKey:
    return UnsafeKey(f"unsafe object key {name!r}: {why}", hint=hint, key=name)


def safe_key(name: str) -> str:
    """An object key made from a (document) name, or `UnsafeKey`.

    Pure, and called on every store operation: answers are cached (errors are not).

    Backslashes become `/`, repeated `/` and `.` segments collapse. Refused: empty names, absolute
    paths (`/x`, `C:\\x`), `..` segments, control and bidi-override characters, the reserved `.~`
    prefix, and over-long segments. Unicode letters are kept as they are.
    """
    if not isinstance(name, str):
        raise _refuse(repr(name), "not a string", "pass the document name as text")
    return _safe_key(name)


@functools.lru_cache(maxsize=65536)
def _safe_key(name: str) -> str:
    # printable ASCII has no control or bidi characters: skip the per-character check (hot path)
    if not (name.isascii() and name.isprintable()):
        for ch in name:
            if unicodedata.category(ch) in _BAD_CATEGORIES or ch in _BIDI_CONTROLS:
                raise _refuse(name, f"contains control character U+{ord(ch):04X}", "rename the document")
    text = name.replace("\\", "/")
    if text.startswith("/") or re.match(r"^[A-Za-z]:(/|$)", text):
        raise _refuse(name, "absolute path", "use a path relative to the source root")
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if not parts:
        raise _refuse(name, "empty after normalizing", "give the object a name")
    for part in parts:
        if part == "..":
            raise _refuse(name, "'..' segment", "use a path inside the source root")
        if part.startswith(RESERVED_PREFIX):
            raise _refuse(name, f"segment starts with reserved {RESERVED_PREFIX!r}", "rename the document")
        if len(part.encode("utf-8")) > MAX_SEGMENT_BYTES:
            raise _refuse(name, f"a segment is over {MAX_SEGMENT_BYTES} bytes", "shorten the name")
    key = "/".join(parts)
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise _refuse(name, f"over {MAX_KEY_BYTES} bytes", "shorten the name")
    return key


def fitted_key(name: str, suffix: str = "") -> str:
    """`safe_key(name) + suffix`, with the last segment shortened (on a character boundary) and
    marked with a hash of the whole name when the suffix would push it over MAX_SEGMENT_BYTES:
    any name that is a safe key can carry a suffix (`review/<run>/<doc id>.json`)."""
    key = safe_key(name)
    head, _, last = key.rpartition("/")
    room = MAX_SEGMENT_BYTES - len(suffix.encode("utf-8"))
    if len(last.encode("utf-8")) <= room:
        return key + suffix
    mark = "~" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
    cut = last.encode("utf-8")[: room - len(mark)].decode("utf-8", "ignore")
    return safe_key(f"{head}/{cut}{mark}" if head else f"{cut}{mark}") + suffix


def safe_segment(name: str) -> str:
    """One path segment (a pass name, run id, task name): `safe_key` without any `/`."""
    key = safe_key(name)
    if "/" in key or "\\" in name:
        raise _refuse(name, "must be a single path segment", "remove '/' from the name")
    return key


def check_key(key: str) -> str:
    """Validate a key handed to a store: it must already be in `safe_key` form."""
    if safe_key(key) != key:
        raise _refuse(key, "not normalized", f"use checkpoints.keys.safe_key -> {safe_key(key)!r}")
    return key


def check_prefix(prefix: str) -> str:
    """Validate a listing prefix: empty, or a safe key optionally ending in `/`."""
    if prefix:
        check_key(prefix.removesuffix("/"))
    return prefix

"""Names of documents: the doc id of a path relative to the source (made safe for store keys; an
unsafe name keeps a short hash of its raw bytes) and the include/exclude globs that select paths
(`**` spans directories, `*` and `?` stay inside one segment; a pattern without `/` matches the
file name at any depth).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from functools import lru_cache

from checkpoints.keys import safe_key
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


def _own_safe_key(name: str) -> str:
    """The floor of a doc id's rules (no empty, absolute, dot or control-character names); the
    store's `safe_key` may add more."""
    if not name or name.startswith("/") or _UNSAFE_CHAR.search(name):
        raise UnsafeKey(f"unsafe key {name!r}")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise UnsafeKey(f"unsafe key {name!r}")
    return name


def _safe_key(name: str) -> str:
    _own_safe_key(name)
    return safe_key(name)


def make_doc_id(name: str) -> str:
    """A safe doc id for a raw relative name (sanitized + short hash suffix when unsafe)."""
    try:
        return _safe_key(name)
    except UnsafeKey:
        pass
    raw_hash = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    parts = [_UNSAFE_CHAR.sub("_", p) for p in name.split("/")]
    parts = [("__" if p == ".." else p) for p in parts if p not in ("", ".")] or ["_"]
    stem, dot, ext = parts[-1].rpartition(".")
    parts[-1] = f"{stem}~{raw_hash}.{ext}" if dot and stem else f"{parts[-1]}~{raw_hash}"
    try:
        return _safe_key("/".join(parts))
    except UnsafeKey:
        return _safe_key(f"unsafe/{raw_hash}")

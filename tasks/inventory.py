"""Inventory: turn a source (local folder or `s3://bucket/prefix`) into a stream of `Document`s.

Every file becomes exactly one `Document`, `ok` or `skipped` with a `SkipReason`; nothing is
dropped and a bad file never raises. Documents come out sorted by doc id, one file in memory at a
time (hashing reads in 1 MiB blocks; oversized files are hashed but never held in memory).

Symlinks: a file whose real path is outside the source is `outside_source` and never read; a
symlinked folder is not walked and shows up as one `symlinked_folder` document (both unless
settings.inventory.follow_symlinks / `--follow-symlinks`).

Checks, first match wins: unreadable (permission, broken symlink, not a regular file, store
error) -> unsupported_type (not in `doc_types`) -> oversized (> settings.inventory.max_document_bytes) -> empty (no
bytes, or no visible text after extraction) -> binary (NUL bytes in a text type) -> undecodable
(invalid UTF-8, invalid JSON, invalid or encrypted PDF) -> duplicate (same sha256 as an earlier
`ok` document; `duplicate_of` names it).

Doc ids are the `/`-separated path relative to the source, made safe with
`checkpoints.keys.safe_key`. A name that is not safe (control characters, `..`, undecodable
bytes) is still taken in, under a sanitized id with a short hash of the raw name appended.

Doc ids and globs (settings.inventory.include / exclude): `tasks.doc_names`.
"""

from __future__ import annotations

import hashlib
import os
import stat
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from docmill.errors import DocmillError, InputError
from docmill.settings import Settings, get_settings
from tasks.doc_names import make_doc_id, selected
from tasks.textract import ALL_TYPES, BinaryContent, DocType, ExtractError, doc_type_for, extract_text

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore

BLOCK_BYTES = 1024 * 1024


class SkipReason(StrEnum):
    """Why a document is not sent to the model."""

    EMPTY = "empty"
    BINARY = "binary"
    UNDECODABLE = "undecodable"
    OVERSIZED = "oversized"
    DUPLICATE = "duplicate"
    UNSUPPORTED_TYPE = "unsupported_type"
    UNREADABLE = "unreadable"
    OUTSIDE_SOURCE = "outside_source"  # a symlink resolving outside the source (--follow-symlinks reads it)
    SYMLINKED_FOLDER = "symlinked_folder"  # not walked without --follow-symlinks


class Document(BaseModel):
    """One input file as the pipeline sees it."""

    model_config = ConfigDict(frozen=True)

    doc_id: str
    source_uri: str
    sha256: str
    size: int
    doc_type: str
    status: Literal["ok", "skipped"] = "ok"
    skip_reason: SkipReason | None = None
    skip_detail: str | None = None
    duplicate_of: str | None = None


@dataclass
class _Read:
    """What reading one file gave: hash and size always, bytes only when not oversized."""

    sha256: str = ""
    size: int = 0
    data: bytes | None = None
    error: str | None = None


@dataclass
class _Entry:
    name: str  # raw relative name, `/`-separated
    source_uri: str
    read: Callable[[int], _Read]  # max_bytes -> _Read
    doc_type: str | None = None  # forced type (e.g. "directory" for an unlistable folder)
    skip: tuple[SkipReason, str] | None = None  # known before reading (symlinks): never read


def _read_local(path: str) -> Callable[[int], _Read]:
    def read(max_bytes: int) -> _Read:
        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                return _Read(error="not a regular file")
            digest = hashlib.sha256()
            size, keep = 0, bytearray()
            with open(path, "rb") as f:
                while block := f.read(BLOCK_BYTES):
                    digest.update(block)
                    size += len(block)
                    if size <= max_bytes:
                        keep += block
            return _Read(digest.hexdigest(), size, bytes(keep) if size <= max_bytes else None)
        except OSError as e:
            return _Read(error=f"{type(e).__name__}: {e.strerror or e}")

    return read


_NO_READ: Callable[[int], _Read] = lambda _m: _Read()  # noqa: E731  (known skips are never read)


def _inside(path: str, root: Path) -> bool:
    """True when `path`, symlinks resolved, is `root` or below it."""
    real = os.path.realpath(path)
    return real == str(root) or real.startswith(str(root).rstrip(os.sep) + os.sep)


def _walk(root: Path, source: str, follow: bool) -> tuple[list[str], list[str], list[str]]:
    """(files, unlistable folders, symlinked folders not walked), relative `/`-separated names.
    With `follow`, symlinked folders are walked once each (a loop back to a folder seen is not)."""
    names: list[str] = []
    unlistable: list[str] = []
    linked: list[str] = []
    seen: set[str] = set()

    def on_error(e: OSError) -> None:
        if e.filename and os.fspath(e.filename) != str(root):
            unlistable.append(os.path.relpath(os.fspath(e.filename), root).replace(os.sep, "/"))
        else:
            raise InputError(f"cannot list source folder {source!r}: {e.strerror}") from e

    for dirpath, dirs, files in os.walk(root, onerror=on_error, followlinks=follow):
        rel_dir = os.path.relpath(dirpath, root)
        real = os.path.realpath(dirpath)
        if real in seen:  # a symlink loop: this folder was walked already
            dirs[:] = []
            continue
        seen.add(real)
        for d in dirs:
            if not follow and os.path.islink(os.path.join(dirpath, d)):
                linked.append((d if rel_dir == "." else os.path.join(rel_dir, d)).replace(os.sep, "/"))
        for fname in files:
            rel = fname if rel_dir == "." else os.path.join(rel_dir, fname)
            names.append(rel.replace(os.sep, "/"))
    return names, unlistable, linked


def _local_entries(source: str, settings: Settings) -> Iterator[_Entry]:
    root = Path(source).expanduser()
    if root.is_file():
        yield _Entry(root.name, root.resolve().as_uri(), _read_local(str(root)))
        return
    if not root.is_dir():
        raise InputError(
            f"source {source!r} is not a folder, a file or an s3:// prefix", hint="check the path"
        )
    root = root.resolve()
    follow = settings.inventory.follow_symlinks
    names, unlistable, linked = _walk(root, source, follow)
    inc, exc = settings.inventory.include, settings.inventory.exclude
    marks = {rel + "/": "unlistable" for rel in unlistable} | {rel + "/": "linked" for rel in linked}
    for rel in sorted([n for n in names if selected(n, inc, exc)] + list(marks)):
        path = root / rel.rstrip("/")
        if marks.get(rel) == "unlistable":
            yield _Entry(
                rel.rstrip("/"), path.as_uri(), lambda _m: _Read(error="cannot list folder"), "directory"
            )
        elif marks.get(rel) == "linked":
            yield _Entry(
                rel.rstrip("/"), path.as_uri(), _NO_READ, "directory",
                skip=(SkipReason.SYMLINKED_FOLDER, "a symlinked folder; --follow-symlinks reads it"),
            )  # fmt: skip
        elif not follow and not _inside(str(path), root):
            yield _Entry(
                rel, path.as_uri(), _NO_READ,
                skip=(SkipReason.OUTSIDE_SOURCE, "a symlink to a file outside the source; --follow-symlinks reads it"),
            )  # fmt: skip
        else:
            yield _Entry(rel, path.as_uri(), _read_local(str(path)))


@lru_cache(maxsize=16)
def _open_store(uri: str, endpoint_url: str | None) -> Any:
    from checkpoints.store import open_store

    return open_store(uri, endpoint_url=endpoint_url)


def _read_s3(store: ObjectStore, key: str) -> Callable[[int], _Read]:
    def read(max_bytes: int) -> _Read:
        try:
            data: bytes = store.get(key)
        except DocmillError as e:
            return _Read(error=f"{type(e).__name__}: {e}")
        sha = hashlib.sha256(data).hexdigest()
        return _Read(sha, len(data), data if len(data) <= max_bytes else None)

    return read


def _s3_entries(source: str, settings: Settings) -> Iterator[_Entry]:
    base = source.rstrip("/")
    store = _open_store(base, settings.s3_endpoint_url)
    inc, exc = settings.inventory.include, settings.inventory.exclude
    try:
        for key in store.list(""):
            if key.endswith("/") or not selected(key, inc, exc):
                continue
            yield _Entry(key, f"{base}/{key}", _read_s3(store, key))
    except DocmillError as e:
        if isinstance(e, InputError):
            raise
        raise InputError(
            f"cannot list source {source!r}: {e}", hint="check the bucket, prefix and endpoint"
        ) from e


class SourceKind(StrEnum):
    LOCAL = "local"
    S3 = "s3"


SOURCES: dict[SourceKind, Callable[[str, Settings], Iterator[_Entry]]] = {
    SourceKind.LOCAL: _local_entries,
    SourceKind.S3: _s3_entries,
}


def source_kind(source: str) -> SourceKind:
    return SourceKind.S3 if source.startswith("s3://") else SourceKind.LOCAL


def _check_content(doc_type: str, data: bytes) -> tuple[SkipReason, str] | None:
    """None when the bytes give text; else (reason, detail)."""
    if not data:
        return SkipReason.EMPTY, "file has no bytes"
    try:
        text = extract_text(doc_type, data)
    except BinaryContent as e:
        return SkipReason.BINARY, str(e)
    except ExtractError as e:
        return SkipReason.UNDECODABLE, str(e)
    if not text.strip():
        what = "no extractable text (scanned PDF?)" if doc_type == DocType.PDF.value else "only whitespace"
        return SkipReason.EMPTY, what
    return None


def _classify(entry: _Entry, max_bytes: int, seen: dict[str, str], types: frozenset[str]) -> Document:
    doc_id = make_doc_id(entry.name)
    doc_type = entry.doc_type or doc_type_for(entry.name)
    base: dict[str, Any] = {"doc_id": doc_id, "source_uri": entry.source_uri, "doc_type": doc_type}

    def skipped(read: _Read, reason: SkipReason, detail: str, dup: str | None = None) -> Document:
        return Document(
            **base, sha256=read.sha256, size=read.size, status="skipped", skip_reason=reason,
            skip_detail=detail, duplicate_of=dup,
        )  # fmt: skip

    if entry.skip is not None:
        return skipped(_Read(), *entry.skip)
    read = entry.read(max_bytes)
    if read.error is not None:
        return skipped(read, SkipReason.UNREADABLE, read.error)
    if doc_type not in types:
        return skipped(read, SkipReason.UNSUPPORTED_TYPE, f"type {doc_type!r} is not taken by this run")
    if read.size > max_bytes or read.data is None:
        return skipped(read, SkipReason.OVERSIZED, f"{read.size} bytes > limit {max_bytes}")
    problem = _check_content(doc_type, read.data)
    if problem is not None:
        return skipped(read, *problem)
    first = seen.get(read.sha256)
    if first is not None:
        return skipped(read, SkipReason.DUPLICATE, f"same content as {first}", first)
    seen[read.sha256] = doc_id
    return Document(**base, sha256=read.sha256, size=read.size)


def source_is_empty(source: str, settings: Settings) -> bool:
    """True when `source` lists no file at all (after include/exclude); reads no file."""
    return next(iter(SOURCES[source_kind(source)](source, settings)), None) is None


def inventory(
    source: str, settings: Settings | None = None, *, doc_types: Iterable[str] | None = None
) -> Iterator[Document]:
    """Documents of `source` (folder, file, or s3://bucket/prefix), sorted by relative path.

    `doc_types` (e.g. `recipe.doc_types`) limits the types taken; others are skipped as
    `unsupported_type`. Default: documents (txt, md, html, json, csv, pdf) and source/config files.
    Raises InputError only when the source itself cannot be read; bad files become skipped documents.
    """
    settings = settings or get_settings()
    max_bytes = settings.inventory.max_document_bytes
    types = ALL_TYPES if doc_types is None else frozenset(t for t in doc_types if t in ALL_TYPES)
    seen: dict[str, str] = {}
    for entry in SOURCES[source_kind(source)](source, settings):
        yield _classify(entry, max_bytes, seen, types)


def _load_local(uri: str) -> bytes:
    path = os.fsdecode(urllib.parse.unquote_to_bytes(urllib.parse.urlsplit(uri).path))
    return Path(path).read_bytes()


def _load_s3(uri: str, settings: Settings) -> bytes:
    root, _, key = uri.rpartition("/")
    data: bytes = _open_store(root, settings.s3_endpoint_url).get(key)
    return data


def load_bytes(doc: Document, settings: Settings | None = None) -> bytes:
    """The raw bytes of `doc`, checked against the sha256 taken at inventory time."""
    settings = settings or get_settings()
    try:
        if doc.source_uri.startswith("s3://"):
            data = _load_s3(doc.source_uri, settings)
        else:
            data = _load_local(doc.source_uri)
    except (OSError, DocmillError) as e:
        raise InputError(f"cannot read {doc.doc_id}: {e}", doc_id=doc.doc_id) from e
    if hashlib.sha256(data).hexdigest() != doc.sha256:
        raise InputError(
            f"{doc.doc_id} changed since the inventory (sha256 differs)",
            hint="start a new run so the new content gets its own results",
            doc_id=doc.doc_id,
        )
    return data


def load_text(doc: Document, settings: Settings | None = None) -> str:
    """The extracted text of an `ok` document. Raises InputError with a one-line reason."""
    if doc.status != "ok":
        raise InputError(
            f"{doc.doc_id} was skipped ({doc.skip_reason.value if doc.skip_reason else 'unknown'}); it has no text",
            doc_id=doc.doc_id,
        )
    data = load_bytes(doc, settings)
    try:
        return extract_text(doc.doc_type, data)
    except ExtractError as e:
        raise InputError(f"cannot extract text from {doc.doc_id}: {e}", doc_id=doc.doc_id) from e


def summarize_inventory(docs: Iterable[Document]) -> dict[str, Any]:
    """Counts by status, skip reason and type, plus total documents and bytes."""
    by_status: Counter[str] = Counter()
    by_reason: Counter[str] = Counter()
    by_type: Counter[str] = Counter()
    total = size = 0
    for d in docs:
        total += 1
        size += d.size
        by_status[d.status] += 1
        by_type[d.doc_type] += 1
        if d.skip_reason is not None:
            by_reason[d.skip_reason.value] += 1
    return {
        "total": total,
        "bytes": size,
        "by_status": dict(sorted(by_status.items())),
        "by_reason": dict(sorted(by_reason.items())),
        "by_type": dict(sorted(by_type.items())),
    }

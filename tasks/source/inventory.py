"""Inventory: turn a source (local folder, file or `s3://bucket/prefix`) into a stream of `Document`s.

Every file becomes exactly one `Document`, `ok` or `skipped` with a `SkipReason`; a bad file never
raises. Documents come out sorted by doc id, one file in memory at a time (hashed in 1 MiB blocks;
an oversized file is hashed but never held). Checks, first match wins: unreadable (permission,
broken symlink, not a regular file, store error; `outside_source` / `symlinked_folder` for symlinks
unless settings.inventory.follow_symlinks) -> unsupported_type -> oversized -> empty -> what the
format's reader refuses in a bounded reader process (tasks.source.readers) -> duplicate (the sha256
of an earlier `ok` document). A PDF or image without a text layer is `ok`: it is sent as what it is.

Every attachment of an `ok` .eml becomes its own document right after its message (`parent`; an
attached message is read in turn to settings.formats.max_nesting levels, one that is its own
ancestor by Message-ID is `forward_loop`, attachments past settings.formats.max_attachments are
`over_limit`). Doc ids and globs: tasks.source.doc_names; a source that still yields two documents
with one id stops before anything is sent.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from docmill.errors import DocmillError, InputError
from docmill.settings import Settings, get_settings
from tasks.source.doc_names import attachment_doc_id, make_doc_id, selected
from tasks.source.document import Document, FirstOfContent, SkipReason, duplicate
from tasks.source.loading import (
    load_bytes,
    load_content,
    load_text,
    open_source_store,
    part_uri,
    read_bounds,
    read_limits,
)
from tasks.source.readers import ALL_TYPES, Content, DocType, ExtractError, Limits, doc_type_for
from tasks.source.readers.bounded import Bounds, read_bounded
from tasks.source.readers.content import sent_as

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore
    from tasks.source.known_files import KnownFiles

BLOCK_BYTES = 1024 * 1024


@dataclass
class _Read:
    """What reading one file gave: hash and size always, bytes only when not oversized."""

    sha256: str = ""
    size: int = 0
    data: bytes | None = None
    error: str | None = None

    @classmethod
    def of(cls, data: bytes, max_bytes: int) -> _Read:
        """What reading `data`, already in memory, gives."""
        return cls(hashlib.sha256(data).hexdigest(), len(data), data if len(data) <= max_bytes else None)


@dataclass
class _Entry:
    name: str  # raw relative name, `/`-separated
    source_uri: str
    read: Callable[[int], _Read]  # max_bytes -> _Read
    doc_type: str | None = None  # forced type (e.g. "directory" for an unlistable folder)
    skip: tuple[SkipReason, str] | None = None  # known before reading (symlinks, folders): never read
    parent: str | None = None  # an e-mail attachment: its message's doc id
    doc_id: str | None = None  # given (an attachment's); else made from `name`
    # what the source says cheaply (tasks.source.known_files)
    stamp: Callable[[], list[int | str] | None] | None = None


def _local(name: str, path: Path) -> _Entry:
    """The entry of a local file: read in 1 MiB blocks; stamped [size, mtime_ns, ctime_ns, inode]
    by one stat (None when it is not a regular file)."""

    def stamp() -> list[int | str] | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino] if stat.S_ISREG(st.st_mode) else None

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

    return _Entry(name, path.as_uri(), read, stamp=stamp)


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
        yield _local(root.name, root.resolve())
        return
    if not root.is_dir():
        raise InputError(
            f"source {source!r} is not a folder, a file or an s3:// prefix", hint="check the path"
        )
    root = root.resolve()
    follow = settings.inventory.follow_symlinks
    names, unlistable, linked = _walk(root, source, follow)
    inc, exc = settings.inventory.include, settings.inventory.exclude
    folders = {rel + "/": (SkipReason.UNREADABLE, "cannot list folder") for rel in unlistable}
    linked_skip = (SkipReason.SYMLINKED_FOLDER, "a symlinked folder; --follow-symlinks reads it")
    folders |= {rel + "/": linked_skip for rel in linked}
    todo = sorted([n for n in names if selected(n, inc, exc)] + list(folders), reverse=True)
    del names  # every name is held once, and let go as its document goes (memory per document)
    while todo:
        rel = todo.pop()
        path = root / rel.rstrip("/")
        if rel in folders:
            yield _Entry(rel.rstrip("/"), path.as_uri(), _NO_READ, "directory", skip=folders[rel])
        elif not follow and os.path.islink(path) and not _inside(str(path), root):
            # only a symlinked file can lead outside: folders that are symlinks are not walked
            yield _Entry(
                rel,
                path.as_uri(),
                _NO_READ,
                skip=(
                    SkipReason.OUTSIDE_SOURCE,
                    "a symlink to a file outside the source; --follow-symlinks reads it",
                ),
            )
        else:
            yield _local(rel, path)


def _read_s3(store: ObjectStore, key: str) -> Callable[[int], _Read]:
    def read(max_bytes: int) -> _Read:
        try:
            return _Read.of(store.get(key), max_bytes)
        except DocmillError as e:
            return _Read(error=f"{type(e).__name__}: {e}")

    return read


def _s3_entries(source: str, settings: Settings) -> Iterator[_Entry]:
    base = source.rstrip("/")
    store = open_source_store(base, settings.s3_endpoint_url)
    inc, exc = settings.inventory.include, settings.inventory.exclude
    try:
        for key, seen in store.list_stamped(""):
            if key.endswith("/") or not selected(key, inc, exc):
                continue
            stamp = None if seen is None else (lambda s=seen: s)  # size + ETag from the listing
            yield _Entry(key, f"{base}/{key}", _read_s3(store, key), stamp=stamp)
    except DocmillError as e:
        if isinstance(e, InputError):
            raise
        raise InputError(
            f"cannot list source {source!r}: {e}", hint="check the bucket, prefix and endpoint"
        ) from e


def _entries(source: str, settings: Settings) -> Iterator[_Entry]:
    """The files of `source`: an s3:// prefix, else a local folder or file."""
    return (_s3_entries if source.startswith("s3://") else _local_entries)(source, settings)


def _listed(source: str, settings: Settings, doc_types: Iterable[str]) -> Iterator[tuple[_Entry, str]]:
    """(entry, type) per listed file of a type in `doc_types` that is not skipped before reading."""
    types = frozenset(t for t in doc_types if t in ALL_TYPES)
    for entry in _entries(source, settings):
        doc_type = entry.doc_type or doc_type_for(entry.name)
        if entry.skip is None and doc_type in types:
            yield entry, doc_type


def _check_content(
    doc_type: str, data: bytes, limits: Limits, bounds: Bounds
) -> tuple[SkipReason, str] | Content:
    """What the reader makes of the bytes (in a bounded reader process), or (reason, detail) when
    there is nothing to send."""
    if not data:
        return SkipReason.EMPTY, "file has no bytes"
    try:
        content = read_bounded(doc_type, data, limits, bounds)
    except ExtractError as e:
        return SkipReason(e.reason), str(e)
    if not content.text.strip() and content.media_type is None and not content.parts:
        return SkipReason.EMPTY, "only whitespace"
    return content


def _traits(content: Content, settings: Settings) -> dict[str, Any]:
    """The Document fields that record what the reader found, and how it is sent by default."""
    return {
        "send_as": sent_as(content, settings.formats.pdf_send_as),
        "pages": content.page_count or None,
        "text_chars": sum(1 for ch in content.text if not ch.isspace()),
        "textless_pages": len(content.textless_pages),
        "media_type": content.media_type,
        "image_tokens": content.image_tokens,
        "encoding": content.encoding if content.guessed else None,
    }


@dataclass
class _Scan:
    """What classifying the entries of one source shares (limits and bounds from `settings`)."""

    settings: Settings
    types: frozenset[str]
    seen: FirstOfContent = field(default_factory=FirstOfContent)  # sha256 -> the first ok doc id with it

    def __post_init__(self) -> None:
        self.max_bytes = self.settings.inventory.max_document_bytes
        self.limits, self.bounds = read_limits(self.settings), read_bounds(self.settings)


def _base(entry: _Entry) -> dict[str, Any]:
    """The fields of a document that come from its name and place, not its bytes."""
    return {
        "doc_id": entry.doc_id or make_doc_id(entry.name),
        "source_uri": entry.source_uri,
        "doc_type": entry.doc_type or doc_type_for(entry.name),
        "parent": entry.parent,
    }


def _classify(entry: _Entry, scan: _Scan) -> tuple[Document, Content | None]:
    base = _base(entry)
    doc_id, doc_type = base["doc_id"], base["doc_type"]

    def skipped(read: _Read, reason: SkipReason, detail: str) -> Document:
        return Document(
            **base,
            sha256=read.sha256,
            size=read.size,
            status="skipped",
            skip_reason=reason,
            skip_detail=detail,
        )

    if entry.skip is not None:
        return skipped(_Read(), *entry.skip), None
    got = entry.read(scan.max_bytes)
    if got.error is not None:
        return skipped(got, SkipReason.UNREADABLE, got.error), None
    if doc_type not in scan.types:
        return skipped(got, SkipReason.UNSUPPORTED_TYPE, f"type {doc_type!r} is not taken by this run"), None
    if got.size > scan.max_bytes or got.data is None:
        return skipped(got, SkipReason.OVERSIZED, f"{got.size} bytes > limit {scan.max_bytes}"), None
    content = _check_content(doc_type, got.data, scan.limits, scan.bounds)
    if not isinstance(content, Content):
        return skipped(got, *content), None
    first = scan.seen.get(got.sha256)
    if first is not None:
        return duplicate(base, got.sha256, got.size, first), None
    scan.seen[got.sha256] = doc_id
    return Document(**base, sha256=got.sha256, size=got.size, **_traits(content, scan.settings)), content


def _known_or_classify(entry: _Entry, scan: _Scan, known: KnownFiles) -> tuple[Document, Content | None]:
    """A file's document from the inventory cache when the source's stamp (or, once the stamp moved,
    the content's hash) says it has not changed; otherwise classified, read once (tasks.source.known_files)."""
    stamp = entry.stamp() if entry.stamp is not None else None
    if stamp is None or entry.skip is not None or entry.doc_type is not None:
        return _classify(entry, scan)
    how, record, entry = _known_record(entry, stamp, known, scan.max_bytes)
    doc = known.replay(_base(entry), record, scan.seen) if record is not None else None
    if doc is not None and record is not None:
        known.keep(entry.name, stamp, record, how)
        return doc, None
    doc, content = _classify(entry, scan)
    known.learn(entry.name, stamp, doc, has_parts=content is not None and bool(content.parts))
    return doc, content


def _known_record(
    entry: _Entry, stamp: list[int | str], known: KnownFiles, max_bytes: int
) -> tuple[str, dict[str, Any] | None, _Entry]:
    """(how, the cache's record of the file or None, the entry): "trusted" by its stamp, else
    "confirmed" by hashing its bytes (the entry returned then reads these bytes: never twice)."""
    record = known.trusted(entry.name, stamp)
    if record is not None:
        return "trusted", record, entry
    got = entry.read(max_bytes)
    record = None if got.error else known.confirmed(entry.name, got.sha256, got.size)
    return "confirmed", record, replace(entry, read=lambda _m: got)


def _attachments(
    message: Document, content: Content, scan: _Scan, depth: int, chain: frozenset[str]
) -> Iterator[Document]:
    """The attachments of an `ok` message as documents, each followed by its own attachments."""
    formats = scan.settings.formats
    for i, part in enumerate(content.parts, start=1):
        entry = _Entry(
            f"{message.doc_id}/{i}-{part.name}",
            part_uri(message.source_uri, i),
            partial(_Read.of, part.data),
            parent=message.doc_id,
            doc_id=attachment_doc_id(message.doc_id, i, part.name),
        )
        if i > formats.max_attachments:
            why = f"attachment {i} of {len(content.parts)}: past formats.max_attachments ({formats.max_attachments})"
            entry.skip = (SkipReason.OVER_LIMIT, why)
        doc, inner = _classify(entry, scan)
        if inner is not None and inner.message_id is not None:
            if inner.message_id in chain:
                doc = _refuse(
                    doc, SkipReason.FORWARD_LOOP, f"message {inner.message_id} is attached inside itself"
                )
            elif depth + 1 > formats.max_nesting:
                doc = _refuse(
                    doc, SkipReason.OVER_LIMIT, f"a message nested {depth + 1} deep (formats.max_nesting)"
                )
        yield doc
        if doc.status == "ok" and inner is not None and inner.parts:
            yield from _attachments(doc, inner, scan, depth + 1, chain | {inner.message_id or doc.sha256})


def _refuse(doc: Document, reason: SkipReason, detail: str) -> Document:
    return doc.model_copy(update={"status": "skipped", "skip_reason": reason, "skip_detail": detail})


def one_per_id(docs: Iterable[Document]) -> Iterator[Document]:
    """`docs`, refusing a second document with an id already seen: two files under one id would
    share results and be merged downstream, so the run stops before anything is sent."""
    seen: set[str] = set()
    for doc in docs:
        if doc.doc_id in seen:
            raise InputError(
                f"two files have the document id {doc.doc_id!r} (the second: {doc.source_uri})",
                hint="rename one of them; docmill never merges two files",
                doc_id=doc.doc_id,
            )
        seen.add(doc.doc_id)
        yield doc


def source_is_empty(source: str, settings: Settings) -> bool:
    """True when `source` lists no file at all (after include/exclude); reads no file."""
    return next(_entries(source, settings), None) is None


def listed_files(source: str, settings: Settings, *, doc_types: Iterable[str], limit: int) -> int:
    """Documents of `source` that could need an API call, counted from its listing up to `limit`.
    No file is read but an e-mail, whose attachments become documents too: each one starts after a
    MIME boundary line (`--...`), so the message, its boundary lines and one more (a body that is
    one attachment) count them without parsing it. An attachment encoded whole (a base64 .eml)
    hides its own: a count to choose a way to run by, not a bound anything relies on. An unreadable
    or oversized e-mail counts as `limit`."""
    n = 0
    for entry, doc_type in _listed(source, settings, doc_types):
        if doc_type == DocType.EML:
            data = entry.read(settings.inventory.max_document_bytes).data
            if data is None:
                return limit
            n += 2 + data.count(b"\n--") + data.startswith(b"--")
        else:
            n += 1
        if n >= limit:
            break
    return min(n, limit)


def recorded(
    source: str, settings: Settings, *, doc_types: Iterable[str], known: KnownFiles
) -> Iterator[tuple[str, Document | None]]:
    """(type, document) per listed file of a type in `doc_types`: the document the last inventory
    recorded (its stamp trusted, or its bytes hashed to the recorded content), else None for a new or
    changed file, or one whose record cannot stand (an e-mail, a duplicate whose original is gone).
    Nothing is parsed and no cache written: what a run has to send, counted (flows.run.small)."""
    seen, max_bytes = FirstOfContent(), settings.inventory.max_document_bytes
    for entry, doc_type in _listed(source, settings, doc_types):
        stamp = entry.stamp() if entry.stamp is not None else None
        record = None if stamp is None else _known_record(entry, stamp, known, max_bytes)[1]
        yield doc_type, None if record is None else known.replay(_base(entry), record, seen)


def inventory(
    source: str,
    settings: Settings | None = None,
    *,
    doc_types: Iterable[str] | None = None,
    known: KnownFiles | None = None,
) -> Iterator[Document]:
    """Documents of `source` (see the module docstring); InputError only when the source itself
    cannot be read or yields two documents with one id. `doc_types` (e.g. `recipe.doc_types`; default:
    every type docmill reads) limits the types taken, others are `unsupported_type`. `known`
    (tasks.source.known_files): files whose stamp says they did not change are not read; the cache is
    saved once every document is out."""
    settings = settings or get_settings()
    types = ALL_TYPES if doc_types is None else frozenset(t for t in doc_types if t in ALL_TYPES)
    scan = _Scan(settings, types)
    yield from one_per_id(_documents(_entries(source, settings), scan, known))
    if known is not None:
        known.save()


def _documents(entries: Iterable[_Entry], scan: _Scan, known: KnownFiles | None) -> Iterator[Document]:
    for entry in entries:
        doc, content = _classify(entry, scan) if known is None else _known_or_classify(entry, scan, known)
        yield doc
        if content is not None and content.parts:
            yield from _attachments(doc, content, scan, 0, frozenset({content.message_id or doc.sha256}))


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


__all__ = [
    "Document",
    "SkipReason",
    "inventory",
    "load_bytes",
    "load_content",
    "load_text",
    "source_is_empty",
    "summarize_inventory",
]

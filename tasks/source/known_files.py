"""Files the inventory need not read again: what a source says cheaply about a file, checked
against what the last inventory of that source recorded (checkpoints.inventory_cache).

Like `make` and `rsync`'s quick check, and stricter, like git's index: a local file whose stamp
(size, mtime_ns, ctime_ns, inode: one `stat`) is the one recorded keeps its record unopened. ctime
cannot be set back by a user, so content changed with its mtime forced back is still seen, and so
is a replaced file (new inode). A stamp taken less than RACY_SECONDS before the recording inventory
is not trusted (git's "racy" case). Any other file is read and hashed: the same hash reuses the
record without parsing (a `touch`, a copy), a new one classifies it anew. On S3 the stamp is the
listing's size and ETag, new at every write: no racy window.

Never from the record: an e-mail with attachments (they are documents of their own), an unreadable
file (the cause may pass), symlinks and folders. Duplicates are decided afresh on every run. A
record holds under one `fingerprint` (inventory and format settings, document types, docmill's
reader code, the reader libraries' versions): changing any of them reads every file again.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from checkpoints.inventory_cache import InventoryCache, encode_entry
from tasks.source.document import Document, FirstOfContent, SkipReason, duplicate

if TYPE_CHECKING:
    from checkpoints.inventory_cache import Stamp
    from checkpoints.store import ObjectStore
    from docmill.settings import Settings

RACY_SECONDS = 2.0  # coarser than any common filesystem's timestamp tick (FAT: 2 s)
BASE_FIELDS = frozenset({"doc_id", "source_uri", "doc_type", "parent"})  # from the name, not the cache
READER_CODE = ("readers", "inventory.py", "document.py", "loading.py", "doc_names.py")
READER_LIBRARIES = (
    "pypdfium2",
    "pypdf",
    "charset-normalizer",
    "lxml",
    "pillow",
    "python-docx",
    "python-pptx",
    "openpyxl",
)


def _code_hash() -> str:
    """sha256 of docmill's own code that decides a document record (tasks/source/readers and friends)."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in READER_CODE:
        path = here / name
        for f in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(f.name.encode() + b"\0")
            digest.update(f.read_bytes() if f.is_file() else b"")
    for lib in READER_LIBRARIES:
        try:
            digest.update(f"{lib}={metadata.version(lib)}".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{lib}=none".encode())
    return digest.hexdigest()


def fingerprint(settings: Settings, types: Iterable[str]) -> str:
    """What a cached record depends on besides the file's bytes; include / exclude globs do not
    change a file's record, so they are left out."""
    inv = settings.inventory.model_dump(mode="json", exclude={"include", "exclude"})
    what = {
        "inventory": inv,
        "formats": settings.formats.model_dump(mode="json"),
        "types": sorted(types),
        "code": _code_hash(),
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class KnownFiles:
    """One inventory's view of the cache: `trusted` / `confirmed` answer per file, `learn` / `keep`
    build the next cache, `save` writes it once the inventory is complete. `now_ns` is the clock."""

    cache: InventoryCache
    now_ns: Callable[[], int] = time.time_ns
    counts: dict[str, int] = field(default_factory=lambda: {"trusted": 0, "confirmed": 0, "read": 0})
    keep_cache: bool = False  # a look only (flows.run.small): `save` writes nothing

    def __post_init__(self) -> None:
        self.taken_ns = self.now_ns()  # before any file is listed or stat'ed
        self.old, old_taken = self.cache.load()
        self.trust_before = old_taken - int(RACY_SECONDS * 1e9)
        self.new: dict[str, bytes] = {}  # name -> its encoded [stamp, record] (~0.2 KB; as objects ~0.5 KB)

    def trusted(self, name: str, stamp: Stamp) -> dict[str, Any] | None:
        """The record of `name` when its stamp is the one recorded and was out of the racy window."""
        got = self.old.get(name)
        if got is None or got[0] != stamp or self._racy(stamp):
            return None
        return got[1]

    def _racy(self, stamp: Stamp) -> bool:
        """A local stamp taken so close to the recording inventory that a later write may have kept
        it; an S3 stamp ([size, ETag]) never is: every write of an object gives it a new ETag."""
        if len(stamp) != 4 or not isinstance(stamp[1], int) or not isinstance(stamp[2], int):
            return False
        return max(stamp[1], stamp[2]) >= self.trust_before

    def confirmed(self, name: str, sha256: str, size: int) -> dict[str, Any] | None:
        """The record of `name` when the file just read has the content recorded (its stamp moved)."""
        got = self.old.get(name)
        if got is None or got[1].get("sha256") != sha256 or got[1].get("size") != size:
            return None
        return got[1]

    def replay(self, base: dict[str, Any], record: dict[str, Any], seen: FirstOfContent) -> Document | None:
        """The document of a recorded file, duplicates decided afresh against `seen` (sha256 -> first
        ok doc id, updated); None when it must be read (a duplicate whose original is gone)."""
        sha, size = str(record["sha256"]), int(record["size"])
        first = seen.get(sha)
        if record.get("skip_reason") == SkipReason.DUPLICATE.value:
            return None if first is None else duplicate(base, sha, size, first)
        if record.get("status", "ok") == "ok":
            if first is not None:
                return duplicate(base, sha, size, first)
            seen[sha] = base["doc_id"]
        return Document.model_validate({**record, **base})

    def keep(self, name: str, stamp: Stamp, record: dict[str, Any], how: str) -> None:
        """Carry a record into the next cache under the stamp just seen."""
        self.counts[how] += 1
        self.new[name] = encode_entry(stamp, record)

    def learn(self, name: str, stamp: Stamp, doc: Document, *, has_parts: bool) -> None:
        """Record a file just classified, unless its record must be read again next time."""
        self.counts["read"] += 1
        if has_parts or doc.parent is not None or doc.skip_reason is SkipReason.UNREADABLE:
            return
        record = doc.model_dump(mode="json", exclude=set(BASE_FIELDS), exclude_defaults=True)
        record["sha256"], record["size"] = doc.sha256, doc.size
        self.new[name] = encode_entry(stamp, record)

    def save(self) -> None:
        """Write the next cache, unless every file was trusted as recorded and none went away."""
        if self.keep_cache:
            return
        if self.counts["read"] or self.counts["confirmed"] or self.new.keys() != self.old.keys():
            self.cache.save_encoded(self.new, self.taken_ns)


def known_files(
    store: ObjectStore, source_id: str, settings: Settings, types: Iterable[str]
) -> KnownFiles | None:
    """The inventory cache of `source_id` in `store` for these settings and document types; None
    when settings.inventory.trust_stamps is off (every file is read)."""
    if not settings.inventory.trust_stamps:
        return None
    return KnownFiles(InventoryCache(store, source_id, fingerprint(settings, types)))

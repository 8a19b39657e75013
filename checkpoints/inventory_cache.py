"""What the inventory learned of a source's files last time:
`sources/<source hash>/inventory.json.gz` (one object per source, gzipped JSON).

`{"fingerprint", "taken_ns", "files": {name: [stamp, record]}}`: per file name (relative to the
source), the stamp the source gave for it before it was read (local: size, mtime_ns, ctime_ns,
inode; S3: size and ETag, from the listing) and the content part of the document record it gave (hash, size, status, reason, what its
reader found). The inventory trusts a record only while the stamp is the same and was not taken
inside the racy window (tasks.source.known_files says what is trusted and why).

The cache is a hint, never the truth: a missing, corrupt, foreign (other fingerprint) or stale
object only costs reading files again. Two runs over one source at once: the last writer wins, and
each of its records is still true for the stamp it names.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Mapping
from typing import Any

from checkpoints.keys import source_digest
from checkpoints.store import ObjectStore, dumps_json
from docmill.errors import DocmillError

PREFIX = "sources/"

Stamp = list[int | str]  # local: [size, mtime_ns, ctime_ns, inode]; S3: [size, ETag]
Files = dict[str, tuple[Stamp, dict[str, Any]]]


def cache_key(source_id: str) -> str:
    """The store key of a source's inventory cache (the source named by its hash)."""
    return f"{PREFIX}{source_digest(source_id)}/inventory.json.gz"


class InventoryCache:
    """One source's inventory cache in the store, for one fingerprint of what decides a record
    (settings, reader code, document types)."""

    def __init__(self, store: ObjectStore, source_id: str, fingerprint: str) -> None:
        self.store, self.source_id, self.fingerprint = store, source_id, fingerprint
        self.key = cache_key(source_id)

    def load(self) -> tuple[Files, int]:
        """(files, taken_ns) of the last save with this fingerprint; ({}, 0) when there is none,
        it is unreadable, or it was made under another fingerprint."""
        try:
            data = self.store.get_json_gz(self.key)
        except (DocmillError, OSError, ValueError, EOFError):
            return {}, 0
        if not isinstance(data, dict) or data.get("fingerprint") != self.fingerprint:
            return {}, 0
        files = data.get("files")
        if not isinstance(files, dict):
            return {}, 0
        out: Files = {}
        for name, value in files.items():
            if isinstance(value, list) and len(value) == 2 and isinstance(value[1], dict):
                out[name] = (list(value[0]), value[1])
        return out, int(data.get("taken_ns") or 0)

    def save_encoded(self, files: Mapping[str, bytes], taken_ns: int) -> None:
        """Replace the cache with `files` (name -> `encode_entry`), stamped as seen from `taken_ns`
        (before the listing); gzipped as it is written out, so the whole cache is never held as
        Python objects (~0.5 KB a file)."""
        head = {"fingerprint": self.fingerprint, "source": self.source_id, "taken_ns": taken_ns}
        out = io.BytesIO()
        with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=6, mtime=0) as z:
            z.write(b'{"files":{')
            for n, name in enumerate(sorted(files)):
                z.write((b"," if n else b"") + dumps_json(name) + b":" + files[name])
            z.write(b"}," + dumps_json(head)[1:])
        self.store.put(self.key, out.getvalue())


def encode_entry(stamp: Stamp, record: dict[str, Any]) -> bytes:
    """One file's `[stamp, record]` as the cache stores it (UTF-8 JSON, sorted keys): what an
    inventory keeps per file until it saves the cache."""
    return dumps_json([stamp, record])

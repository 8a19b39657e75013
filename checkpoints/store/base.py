"""The object store's interface. Keys are relative, `/`-separated and already safe
(`checkpoints.keys.safe_key`); every method refuses anything else with `UnsafeKey`. ETags are
opaque strings: compare them, never parse them."""

from __future__ import annotations

import gzip
import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any

from docmill.errors import NotFound

ListedStamp = list[int | str]  # what a listing says of an object cheaply (ObjectStore.list_stamped)


def dumps_json(obj: Any) -> bytes:
    """JSON bytes for the store: UTF-8, sorted keys (stable diffs and ETags)."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def etag_of(data: bytes) -> str:
    """The ETag of bytes: quoted md5, as S3 gives a single-part upload."""
    return f'"{hashlib.md5(data, usedforsecurity=False).hexdigest()}"'


def loads_json(data: bytes) -> Any:
    return json.loads(data.decode("utf-8"))


def gzip_json(obj: Any) -> bytes:
    """Gzipped JSON; mtime=0 so equal data gives equal bytes."""
    return gzip.compress(dumps_json(obj), compresslevel=6, mtime=0)


def gunzip_json(data: bytes) -> Any:
    return loads_json(gzip.decompress(data))


class ObjectStore(ABC):
    """get / put / put_if_absent / put_if_match / exists / list / delete over one root."""

    uri: str

    @abstractmethod
    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        """The object's bytes and ETag; raises `NotFound`."""

    @abstractmethod
    def put(self, key: str, data: bytes) -> str:
        """Write (atomically replacing any old object); returns the new ETag."""

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Write only if no object exists: True = written, False = it was already there."""

    def put_many_if_absent(self, items: Sequence[tuple[str, bytes]]) -> list[bool]:
        """`put_if_absent` of each (key, bytes), in order: True = written, False = it was already
        there. Each object is atomic on its own, as with `put_if_absent`; a backend may make the
        group durable together (the local one pays one flush of the file system for all of them
        instead of one fsync each)."""
        return [self.put_if_absent(key, data) for key, data in items]

    @abstractmethod
    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        """Compare-and-swap: write only if the object's ETag is still `etag`; returns the new ETag.
        Raises `PreconditionFailed` when it changed or is gone."""

    def numbers(self, prefix: str, suffix: str) -> list[int]:
        """The n of each `<prefix><n><suffix>` key, sorted (sequence-numbered objects); `list[int]`
        is the builtin here, before this class defines its own `list`."""
        names = (key[len(prefix) : -len(suffix)] for key in self.list(prefix) if key.endswith(suffix))
        return sorted(int(name) for name in names if name.isdigit())

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[str]:
        """Keys starting with `prefix` (a plain string prefix), sorted, streamed page by page."""

    @abstractmethod
    def list_children(self, prefix: str) -> Iterator[str]:
        """Immediate children under a `/`-ending prefix: names, with a trailing `/` for folders."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object; a missing object is not an error."""

    def copy(self, src: str, dst: str, *, etag: str) -> bool:
        """Make `dst` hold the bytes of `src` while `src`'s ETag is still `etag` (replacing any old
        `dst`); False, nothing written, when `src` is gone or was written since. For objects kept
        again unchanged by a later run (outcome chunks, export files): a backend shares or copies
        them where they are (a hard link locally, a server-side copy on S3) instead of the bytes
        travelling through the process. This fallback reads and writes them."""
        try:
            data, now = self.get_with_etag(src)
        except NotFound:
            return False
        if now != etag:
            return False
        self.put(dst, data)
        return True

    def list_stamped(self, prefix: str = "") -> Iterator[tuple[str, ListedStamp | None]]:
        """`list`, each key with what the listing says of its object cheaply: [size, ETag] on S3
        (an ETag moves with every write of the object), None where the listing says nothing."""
        for key in self.list(prefix):
            yield key, None

    def get(self, key: str) -> bytes:
        return self.get_with_etag(key)[0]

    def get_json(self, key: str) -> Any:
        return loads_json(self.get(key))

    def get_json_or_none(self, key: str) -> Any:
        try:
            return self.get_json(key)
        except NotFound:
            return None

    def get_dict(self, key: str) -> dict[str, Any] | None:
        """The JSON object at `key`; None when there is none or it is not an object."""
        found = self.get_json_or_none(key)
        return found if isinstance(found, dict) else None

    def put_json(self, key: str, obj: Any, *, if_absent: bool = False) -> bool:
        """Write JSON; with `if_absent=True` returns False when the key was already written."""
        data = dumps_json(obj)
        if if_absent:
            return self.put_if_absent(key, data)
        self.put(key, data)
        return True

    def get_json_gz(self, key: str) -> Any:
        return gunzip_json(self.get(key))

    def json_objects(self, prefix: str, suffix: str = ".json") -> Iterator[tuple[str, dict[str, Any]]]:
        """(key, object) of each JSON object listed under `prefix` whose key ends with `suffix`; one
        deleted while listing, or not a JSON object, is skipped."""
        for key in self.list(prefix):
            found = self.get_dict(key) if key.endswith(suffix) else None
            if found is not None:
                yield key, found

    def link(self, key: str, *, expires_seconds: int = 7 * 24 * 3600) -> str:
        """Where a person opens `key`: the store's URI of it here; a file:// URL on the local backend,
        a presigned https URL on S3 where the credentials allow (else the s3:// URI)."""
        return f"{self.uri.rstrip('/')}/{key}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"

"""Where a run's documents wait for their outcomes, in compact memory: `DigestMap`, 16-byte digests
(of doc ids or idempotency keys) to non-negative ints in one bytearray.

A batch-shaped pass streams every document of the run before the first batch ends, so what it keeps
per document until the document's outcome comes is what its memory grows by with the corpus (the
documents' places, the keys already streamed, a resume's keys of batches in flight). As a
dict of bytes to int that is ~130 bytes a document (a 49-byte bytes object, an int, a dict entry);
here a slot is 24 bytes and the table is kept between a quarter and two thirds full, so ~36-96
bytes a document, and emptied slots are given back as the table shrinks. What waits with a place
(an outcome, a text sent) is set aside in a `Spill`: a temporary file, one int per piece."""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile

SLOT = struct.Struct("<16sQ")  # digest, value + 2 (0: an empty slot, 1: a removed one)
EMPTY, REMOVED, SHIFT = 0, 1, 2
MIN_SLOTS = 1024
SPAN = 1 << 40  # a spilled piece's place packed in one int: offset * SPAN + length


def digest(text: str) -> bytes:
    """The 16 bytes standing for a doc id or an idempotency key in a `DigestMap` (a 60-character
    key costs 113 bytes as text, its digest 49); any str, lone surrogates too."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class DigestMap:
    """16-byte digest -> int >= 0 (open addressing, linear probing, in one bytearray)."""

    def __init__(self) -> None:
        self._slots = MIN_SLOTS
        self._table = bytearray(SLOT.size * self._slots)
        self._live = 0
        self._used = 0  # live and removed slots (a probe stops only at an empty one)

    def __len__(self) -> int:
        return self._live

    def _find(self, digest: bytes) -> tuple[int, int]:
        """The slot holding `digest` (or -1) and the first free slot on its probe path."""
        if len(digest) != 16:
            raise ValueError("a DigestMap key is 16 bytes")
        mask = self._slots - 1
        i = int.from_bytes(digest[:8], "little") & mask
        free = -1
        while True:
            key, value = SLOT.unpack_from(self._table, i * SLOT.size)
            if value == EMPTY:
                return -1, i if free < 0 else free
            if value == REMOVED:
                if free < 0:
                    free = i
            elif key == digest:
                return i, free
            i = (i + 1) & mask

    def get(self, digest: bytes, default: int | None = None) -> int | None:
        at, _ = self._find(digest)
        return default if at < 0 else SLOT.unpack_from(self._table, at * SLOT.size)[1] - SHIFT

    def __contains__(self, digest: object) -> bool:
        return isinstance(digest, bytes) and self._find(digest)[0] >= 0

    def __setitem__(self, digest: bytes, value: int) -> None:
        if value < 0:
            raise ValueError("a DigestMap value is >= 0")
        at, free = self._find(digest)
        if at < 0:
            at = free
            if SLOT.unpack_from(self._table, at * SLOT.size)[1] == EMPTY:
                self._used += 1
            self._live += 1
        SLOT.pack_into(self._table, at * SLOT.size, digest, value + SHIFT)
        if self._used * 3 > self._slots * 2:
            self._resize()

    def add(self, digest: bytes) -> None:
        """As a set: note `digest` (its value 0)."""
        self[digest] = 0

    def pop(self, digest: bytes, default: int | None = None) -> int | None:
        at, _ = self._find(digest)
        if at < 0:
            return default
        value = SLOT.unpack_from(self._table, at * SLOT.size)[1] - SHIFT
        SLOT.pack_into(self._table, at * SLOT.size, bytes(16), REMOVED)
        self._live -= 1
        if self._slots > MIN_SLOTS and self._live * 4 < self._slots:
            self._resize()
        return value

    def _resize(self) -> None:
        """A table sized for what is live (at most half full), without the removed slots."""
        old, slots = self._table, MIN_SLOTS
        while slots < self._live * 2 + 2:
            slots *= 2
        self._slots, self._table, self._live, self._used = slots, bytearray(SLOT.size * slots), 0, 0
        for key, value in SLOT.iter_unpack(old):
            if value >= SHIFT:
                self[key] = value - SHIFT


class Spill:
    """Bytes set aside in a temporary file, each found again by the one int `put` returns (offset *
    SPAN + length). Not locked: a caller on several threads holds its own lock around `put`."""

    def __init__(self, prefix: str) -> None:
        self.file = tempfile.TemporaryFile(prefix=prefix)  # noqa: SIM115 (closed by close())
        self.end = 0

    def fileno(self) -> int:
        return self.file.fileno()

    @property
    def closed(self) -> bool:
        return self.file.closed

    def put(self, data: bytes) -> int:
        os.pwrite(self.file.fileno(), data, self.end)
        place, self.end = self.end * SPAN + len(data), self.end + len(data)
        return place

    def get(self, place: int) -> bytes:
        offset, length = divmod(place, SPAN)
        return os.pread(self.file.fileno(), length, offset)

    def clear(self) -> None:
        """Forget every piece (their places are no longer valid)."""
        self.file.truncate(0)
        self.end = 0

    def close(self) -> None:
        self.file.close()

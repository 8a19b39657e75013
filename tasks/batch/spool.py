"""Requests spooled and cut into batches: `BatchBody` writes each request as one JSON line to a
temporary file as it arrives and streams the `{"requests": [...]}` body from that file at `create`
time, so a 256 MB batch costs a file, not 256 MB (times Python's object overhead) of memory. It says
when the next request would pass `max_requests` or `max_bytes`; the caller then submits and starts a
new body.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable, Iterator
from typing import IO, Any

from checkpoints.batches import encode_item
from tasks.batch.items import WorkItem

PREFIX = b'{"requests":['
SUFFIX = b"]}"
READ_BLOCK = 1024 * 1024


def request_line(custom_id: str, params: dict[str, Any], dumps: Callable[[dict[str, Any]], str]) -> bytes:
    """One request of a batch body, as compact JSON (`dumps`: what gives the params' compact JSON
    text, a `tasks.api.usage.RepeatedJson(COMPACT).dumps`, as requests repeat most of it)."""
    cid = json.dumps(custom_id, ensure_ascii=False)
    return f'{{"custom_id":{cid},"params":{dumps(params)}}}'.encode()


class BatchBody:
    """Requests of one batch spooled to a temp file; the items kept (they are small)."""

    def __init__(self, max_requests: int, max_bytes: int) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.lines: list[bytes] = []  # encoded items (small), not WorkItem objects
        self.size = len(PREFIX) + len(SUFFIX)
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="docmill-batch-")  # noqa: SIM115 (closed by close())
        self._hash = hashlib.sha256(PREFIX)

    def __len__(self) -> int:
        return len(self.lines)

    def items(self) -> list[WorkItem]:
        return [WorkItem.from_line(json.loads(line)) for line in self.lines]

    def fits(self, line: bytes) -> bool:
        """Would one more request of this size stay within both limits?"""
        extra = len(line) + (1 if self.lines else 0)
        return len(self.lines) < self.max_requests and self.size + extra <= self.max_bytes

    def alone_fits(self, line: bytes) -> bool:
        """Could this request go in a batch at all?"""
        return len(PREFIX) + len(SUFFIX) + len(line) <= self.max_bytes

    def add(self, item: WorkItem, line: bytes) -> None:
        chunk = (b"," + line) if self.lines else line
        self._file.write(chunk)
        self._hash.update(chunk)
        self.size += len(chunk)
        self.lines.append(encode_item(item.to_line()))

    def sha256(self) -> str:
        h = self._hash.copy()
        h.update(SUFFIX)
        return h.hexdigest()

    def chunks(self) -> Iterator[bytes]:
        """The whole `create` body, streamed from the spool (a fresh iterator each call)."""
        self._file.flush()
        self._file.seek(0)
        yield PREFIX
        while True:
            block = self._file.read(READ_BLOCK)
            if not block:
                break
            yield block
        yield SUFFIX

    def close(self) -> None:
        self._file.close()

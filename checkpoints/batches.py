"""Durable per-batch records of a run: intent -> batch id -> state -> collected (invariant 2).

Layout under `runs/<run_id>/batches/`:
  <n>.json             the record (small; compare-and-swap updates): phase, batch ids, counts,
                       the request hash and count, the list mark taken before `create`, and once
                       collected the items carried to a later round.
  <n>.items.jsonl.gz   the batch's requests as opaque item dicts (custom_id -> document and
                       whatever the caller needs to rebuild the request). Written once, before the
                       record's intent, and never changed.

`n` is zero-padded so listing order is submission order. The record is created with
put-if-absent (two drivers cannot both claim `n`) and every later change is a compare-and-swap
(checkpoints.cas) retried on conflict, so `docmill cancel` from another process cannot erase a state change.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterable, Iterator
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from checkpoints import cas
from checkpoints.store import ObjectStore, dumps_json, loads_json
from docmill.errors import AlreadyExists, NotFound, StoreError

CAS_ATTEMPTS = 20


class BatchPhase(StrEnum):
    """Where one batch is in its lifecycle."""

    INTENT = "intent"  # recorded before `create`; no batch id known (yet)
    SUBMITTED = "submitted"  # batch id stored; following it
    ENDED = "ended"  # the API says it ended; results not (fully) ingested yet
    COLLECTED = "collected"  # results ingested; `carry` lists what a later round must resend
    NOT_CREATED = "not_created"  # reconciliation found no batch for the intent; items carried


LIVE_PHASES = frozenset({BatchPhase.INTENT, BatchPhase.SUBMITTED, BatchPhase.ENDED})


class BatchRecord(BaseModel):
    """The durable state of one batch of one run."""

    run_id: str
    n: int
    pass_name: str = "file"
    phase: BatchPhase = BatchPhase.INTENT
    round: int = 1
    request_count: int
    request_bytes: int
    request_sha256: str
    intent_at: float
    list_mark: str | None = Field(None, description="Newest batch id listed just before create.")
    batch_ids: list[str] = Field(default_factory=list, description="Ours; >1 only after reconciliation.")
    canceled_ids: list[str] = Field(default_factory=list, description="Batches we asked to cancel.")
    submitted_at: float | None = None
    ended_at: float | None = None
    collected_at: float | None = None
    processing_status: str | None = None
    request_counts: dict[str, int] = Field(default_factory=dict)
    outcome_counts: dict[str, int] = Field(default_factory=dict)
    carry: list[dict[str, Any]] = Field(default_factory=list, description="Items for a later round.")
    notes: list[str] = Field(default_factory=list)

    @property
    def live(self) -> bool:
        return self.phase in LIVE_PHASES


def encode_item(item: dict[str, Any]) -> bytes:
    """One item as a compact JSON line (no newline); key order kept, so `custom_id` can lead."""
    return json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode()


_CID_PREFIX = b'{"custom_id":"'


def item_custom_id(line: bytes) -> str:
    """The custom_id of an encoded item, without parsing the rest when it leads the line."""
    if line.startswith(_CID_PREFIX):
        return line[len(_CID_PREFIX) : line.index(b'"', len(_CID_PREFIX))].decode()
    return str(json.loads(line)["custom_id"])


class BatchRecords:
    """Records of one run's batches."""

    def __init__(self, store: ObjectStore, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.prefix = f"runs/{run_id}/batches/"

    def record_key(self, n: int) -> str:
        return f"{self.prefix}{n:05d}.json"

    def items_key(self, n: int) -> str:
        return f"{self.prefix}{n:05d}.items.jsonl.gz"

    def numbers(self) -> list[int]:
        return self.store.numbers(self.prefix, ".json")

    def load(self, n: int) -> BatchRecord:
        return BatchRecord.model_validate(loads_json(self.store.get(self.record_key(n))))

    def load_all(self) -> list[BatchRecord]:
        return [self.load(n) for n in self.numbers()]

    def items(self, n: int) -> Iterator[dict[str, Any]]:
        """The items of batch `n`, in submission order."""
        for line in self.item_lines(n):
            yield json.loads(line)

    def item_lines(self, n: int) -> Iterator[bytes]:
        """The encoded items of batch `n` (parse them with json.loads when needed)."""
        try:
            data = gzip.decompress(self.store.get(self.items_key(n)))
        except NotFound as e:
            raise StoreError(
                f"batch {n} of run {self.run_id} has a record but no items file",
                hint="the run's batch folder was edited by hand; restore it or start a new run id",
            ) from e
        for line in data.splitlines():
            if line:
                yield line

    def write_items(self, n: int, lines: Iterable[bytes]) -> None:
        """Write batch `n`'s encoded items (`encode_item`). Plain put: until the record's intent
        exists nothing refers to them."""
        data = gzip.compress(b"".join(line + b"\n" for line in lines), compresslevel=3, mtime=0)
        self.store.put(self.items_key(n), data)

    def create(self, record: BatchRecord) -> None:
        """Record the intent (put-if-absent); raises `AlreadyExists` if `n` is taken."""
        if not self.store.put_if_absent(
            self.record_key(record.n), dumps_json(record.model_dump(mode="json"))
        ):
            raise AlreadyExists(
                f"batch record {record.n} of run {self.run_id} already exists",
                hint="another process drives this run; wait for its lease to expire",
                run_id=self.run_id,
            )

    def update(self, n: int, fn: Callable[[BatchRecord], None]) -> BatchRecord:
        """Apply `fn` to the stored record and compare-and-swap it back (checkpoints.cas: re-read and
        re-applied on conflict); `NotFound` when batch `n` has no record."""
        key = self.record_key(n)

        def decide(data: bytes | None) -> cas.Write[BatchRecord]:
            if data is None:
                raise NotFound(f"batch record {n} of run {self.run_id} is missing", key=key)
            record = BatchRecord.model_validate(loads_json(data))
            fn(record)
            return cas.Write(dumps_json(record.model_dump(mode="json")), record)

        def exhausted() -> StoreError:
            return StoreError(
                f"batch record {n} of run {self.run_id} kept changing under us ({CAS_ATTEMPTS} tries)",
                hint="two processes are updating this run; stop one of them",
                run_id=self.run_id,
            )

        record = cas.swap(self.store, key, decide, attempts=CAS_ATTEMPTS, exhausted=exhausted)
        assert record is not None  # `decide` never gives up
        return record

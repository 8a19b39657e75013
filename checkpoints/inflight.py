"""Requests that may be in flight: `runs/<run_id>/inflight/<group>-<n>.json`.

Paid means recorded (invariant 13), and the bound is tight: only a request that was really in
flight (sent, not answered, not saved) counts as possibly billed, and an answer that was saved is
never counted again.

Who sends: a *life* = one process's client (`life_of`): one pacer window, so at most `ceiling` of its
requests are in flight at once, however many chunks or calls it has open: its `--concurrency`, or
the most its pacer ever had in flight, declared before passing it (`declare`, one small record per
life, rewritten as that grows by an eighth: tasks.api.pacing.RateLimiter.declare_to).

What is recorded (one object per chunk or per call, never per request of a chunk):
- a realtime chunk of the per-file pass (`open_chunk`): before its documents are sent, the key of
  each request it may send and what one request of that key can cost at most (a document's requests,
  first, repairs and the retry after truncation, go one after the other: one in flight per key).
  Deleted once the chunk's answers are in the cost ledger (`close`). 3 store operations per chunk: the
  put, the delete, one listing of the chunk's earlier lives (`bench/store_ops.py`).
- one call of a long task or of the integration pass (`open_call`): before it is sent, deleted once
  its cost entry is written.

What is counted (`totals`), per life: its requests that may have been in flight = the keys of its
open chunks whose document had no result of this run yet (a document with a result has nothing in
flight) plus its open calls, at most `ceiling` of them, priced at the dearest ones. A later life that
opens the same chunk freezes that set (`frozen`: what was unfinished when the earlier life died), so a
result it writes later does not hide what the killed life had in flight. Answers a dead life saved in
the response log before its cost entries were flushed are spend, not a bound: `totals` prices them
from the log (`saved_usd`), each answer once (by its cost-ledger identity `<key>/<attempt>`), until a
later life has recounted them into the cost ledger (`settled`).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from checkpoints.costs import SLOT_PASS, CostLedger
from checkpoints.keys import safe_segment
from checkpoints.ledger import ResponseLog, ResultsLedger
from docmill.prices import priced_usd

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore

CHUNK, CALL, LIFE = "chunk", "call", "life"
_NONCE = uuid.uuid4().hex[:8]  # this process's start: pids are reused


def life_of(client: object) -> str:
    """The life of a sender: host, pid, this process's start and the client object (one pacer)."""
    return f"{socket.gethostname()}-{os.getpid()}-{_NONCE}-{id(client):x}"


class InFlightRecord(TypedDict, total=False):
    kind: str  # CHUNK or CALL
    life: str  # `life_of` the sender
    ceiling: int | None  # at most this many requests of the life in flight at once; None: not bounded
    at: float  # when it was opened (answers saved by this life are not older)
    worst: dict[str, float]  # request key (or call id) -> what one request of it can cost at most
    frozen: list[str]  # set by a later life: keys that had no result when this life died
    settled: bool  # a later life recorded every answer this life saved


class InFlightTotals(TypedDict):
    groups: int  # records left behind by a crash (or open right now)
    lives: int  # processes they belong to
    requests: int  # requests they may have paid for without a record
    usd: float  # what those requests can have cost at most
    saved_answers: int  # answers saved in the response log, not yet in the cost ledger
    saved_usd: float  # what those answers cost (spend, not a bound)


@dataclass
class Mark:
    """An open record (`key`) and the earlier lives of its chunk it froze (`earlier`)."""

    key: str
    earlier: list[str] = field(default_factory=list)


class InFlight:
    def __init__(self, store: ObjectStore, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.prefix = f"runs/{safe_segment(run_id)}/inflight/"

    def _put(self, group: str, record: InFlightRecord) -> str:
        key = f"{self.prefix}{safe_segment(group)}-{uuid.uuid4().hex[:8]}.json"
        self.store.put_json(key, dict(record))
        return key

    def open_chunk(self, group: str, life: str, ceiling: int | None, worst: dict[str, float]) -> Mark:
        """Record a realtime chunk about to be sent (`worst`: its request keys and what one request
        of each can cost at most); freezes what its earlier lives left unfinished."""
        earlier = [k for k in self.store.list(f"{self.prefix}{safe_segment(group)}-") if k.endswith(".json")]
        for other in earlier:
            record = self.store.get_json_or_none(other)
            if isinstance(record, dict) and record.get("kind") == CHUNK and "frozen" not in record:
                self.store.put_json(other, {**record, "frozen": self._unfinished(record.get("worst") or {})})
        record = InFlightRecord(kind=CHUNK, life=life, ceiling=ceiling, at=time.time(), worst=worst)
        return Mark(self._put(group, record), earlier)

    def declare(self, life: str, window: int) -> None:
        """A life's pacer may have up to `window` requests in flight from now on."""
        record = InFlightRecord(kind=LIFE, life=life, ceiling=window, at=time.time())
        self.store.put_json(f"{self.prefix}{LIFE}-{safe_segment(life)}.json", dict(record))

    def open_call(self, group: str, life: str, ceiling: int | None, usd: float) -> Mark:
        """Record one call about to be sent (a long task's turn, an integration slice)."""
        record = InFlightRecord(kind=CALL, life=life, ceiling=ceiling, at=time.time(), worst={group: usd})
        return Mark(self._put(group, record))

    def close(self, mark: Mark, *, settled: bool = False) -> None:
        """The answers are in the cost ledger: no longer in flight. `settled`: every document of the
        chunk was handled, so what its earlier lives saved was recounted into the cost ledger too."""
        self.store.delete(mark.key)
        if not settled:
            return
        for other in mark.earlier:
            record = self.store.get_json_or_none(other)
            if isinstance(record, dict) and not record.get("settled"):
                self.store.put_json(other, {**record, "settled": True})

    def _unfinished(self, keys: Iterable[str]) -> list[str]:
        """The keys with no result of this run (a result of another run does not say this one ended)."""
        ledger = ResultsLedger(self.store)
        out = []
        for key in keys:
            record = ledger.get(SLOT_PASS, key)
            if not (isinstance(record, dict) and record.get("origin_run") == self.run_id):
                out.append(key)
        return out

    def records(self) -> list[InFlightRecord]:
        return [InFlightRecord(**r) for _k, r in self.store.json_objects(self.prefix)]  # type: ignore[typeddict-item]

    def totals(self, recorded: set[str] | None = None) -> InFlightTotals:
        """The bound and the saved answers (see the module docstring). `recorded`: the identities
        the cost ledger holds (`CostEntry.identity`), when the caller has read it already."""
        every = self.records()
        declared = {str(r.get("life")): r.get("ceiling") for r in every if r.get("kind") == LIFE}
        records = [r for r in every if r.get("kind") != LIFE]
        out = InFlightTotals(
            groups=len(records), lives=0, requests=0, usd=0.0, saved_answers=0, saved_usd=0.0
        )
        if not records:
            return out
        if recorded is None:
            recorded = {i for e in CostLedger(self.store, self.run_id).entries() if (i := e.identity)}
        recorded = set(recorded)  # grows with the saved answers counted (each once)
        lives: dict[str, tuple[int | None, dict[str, float]]] = {}
        for r in records:
            worst = r.get("worst") or {}
            life = str(r.get("life"))
            ceilings = [int(c) for c in (r.get("ceiling"), declared.get(life)) if c is not None]
            ceiling, maybe = lives.setdefault(life, (min(ceilings, default=None), {}))
            if r.get("kind") == CHUNK:
                keys = r["frozen"] if "frozen" in r else self._unfinished(worst)
                if not r.get("settled"):
                    self._saved(r, recorded, out)
            else:
                keys = list(worst)
            for k in keys:
                maybe[k] = max(maybe.get(k, 0.0), float(worst.get(k, 0.0)))
        for ceiling, maybe in lives.values():
            n = len(maybe) if ceiling is None else min(int(ceiling), len(maybe))
            out["requests"] += n
            out["usd"] += sum(sorted(maybe.values(), reverse=True)[:n])
        out["lives"] = len(lives)
        return out

    def _saved(self, r: InFlightRecord, recorded: set[str], out: InFlightTotals) -> None:
        """Answers the chunk's life saved (of this run, not older than its record) that the cost ledger
        lacks."""
        log = ResponseLog(self.store)
        since = float(r.get("at") or 0.0)
        for key in r.get("worst") or {}:
            for n in log.attempts(SLOT_PASS, key):
                identity = f"{key}/{n}"
                if identity in recorded:
                    continue
                message = log.get(SLOT_PASS, key, n)
                meta: dict[str, Any] = (message or {}).get("_docmill") or {}
                if not message or float(meta.get("at") or 0.0) < since:
                    continue
                if meta.get("run_id", self.run_id) != self.run_id:  # another run's answer to the same key
                    continue
                recorded.add(identity)  # once, however many records name the key
                out["saved_answers"] += 1
                out["saved_usd"] += priced_usd(str(meta.get("model")), message.get("usage") or {}) or 0.0


class Spend(TypedDict):
    recorded_usd: float  # the cost ledger
    saved_usd: float  # answers saved before a kill, not in the cost ledger yet
    possibly_usd: float  # requests in flight at a kill: an upper bound
    possibly_requests: int
    in_flight: InFlightTotals


def run_spend(store: ObjectStore, run_id: str) -> Spend:
    """What a run has paid as far as anyone can tell, the one figure the cap, `status`, `runs` and
    the report use: recorded + saved + the bound of what was in flight."""
    ledger = CostLedger(store, run_id)
    usd = 0.0
    recorded: set[str] = set()
    for e in ledger.entries():
        usd += e.usd
        if e.identity:
            recorded.add(e.identity)
    left = InFlight(store, run_id).totals(recorded)
    return Spend(
        recorded_usd=usd,
        saved_usd=left["saved_usd"],
        possibly_usd=left["usd"],
        possibly_requests=left["requests"],
        in_flight=left,
    )

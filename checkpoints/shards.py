"""One run spread over several worker processes: its chunks grouped into shards that workers claim.

    runs/<run_id>/shards/<gen>/plan.json         {"shards": {sid: [chunk ids]}, "workers": N}  (once)
    runs/<run_id>/shards/<gen>/<sid>.claim.json  {holder, name, expires_at, takeovers}  (a lease)
    runs/<run_id>/shards/<gen>/<sid>.done.json   {holder, name, at, counts, docs}
    runs/<run_id>/shards/<gen>/stop.json         why every worker stops (budget, systemic failure)
    runs/<run_id>/workers/<holder>.json          a worker: name, host, flow run, last heartbeat

A generation (`gen`) is one spread of the chunks still pending when the run's driver started it;
a driver that comes back continues an unfinished generation, and starts a new one only for chunks
left retryable by a finished one. A claim is a lease like the run's own (checkpoints.lease): taken
by compare-and-swap when absent, expired, or held by a process known dead on this machine; renewed
by its holder; released when the shard is done. So a shard whose worker stops heartbeating is
claimed by another after its lease expires, and never by two live workers at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, TypedDict

from checkpoints.cas import read_json, update_json
from checkpoints.keys import safe_segment
from checkpoints.store import ObjectStore

Dead = Callable[[str | None], bool]


# The stop kind a driver writes on its Ctrl-C / SIGTERM (flows.workers.spread): workers stop their sends
# (flows.workers.shard_worker) and the driver clears it when it comes back (`resume`).
STOP_INTERRUPTED = "interrupted"


class ShardState(TypedDict):
    """One shard as `status` and the report show it."""

    shard: str
    chunks: int
    state: str  # done, claimed, open
    worker: str | None  # who did it, or holds it
    takeovers: int  # times it was claimed after another worker's claim lapsed
    docs: int


def plan_shards(chunk_ids: list[str], shards: int) -> dict[str, list[str]]:
    """Chunks dealt round-robin into at most `shards` shards (neighbouring chunks apart, so each
    shard holds a spread of the inventory), named s000, s001, ..."""
    n = max(1, min(shards, len(chunk_ids)))
    out: dict[str, list[str]] = {f"s{i:03d}": [] for i in range(n)}
    for i, cid in enumerate(chunk_ids):
        out[f"s{i % n:03d}"].append(cid)
    return out


class ShardTable:
    def __init__(
        self, store: ObjectStore, run_id: str, gen: int, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.store, self.run_id, self.gen, self.clock = store, safe_segment(run_id), int(gen), clock
        self.prefix = f"runs/{self.run_id}/shards/{self.gen:04d}/"

    @staticmethod
    def generations(store: ObjectStore, run_id: str) -> list[int]:
        children = store.list_children(f"runs/{safe_segment(run_id)}/shards/")
        return sorted(int(c[:-1]) for c in children if c.endswith("/") and c[:-1].isdigit())

    def create(self, shards: dict[str, list[str]], workers: int) -> dict[str, list[str]]:
        """Write the plan once; a plan already there wins (returned)."""
        self.store.put_json(self.prefix + "plan.json", {"shards": shards, "workers": workers}, if_absent=True)
        return self.plan()

    def _plan(self) -> dict[str, Any]:
        return self.store.get_json_or_none(self.prefix + "plan.json") or {}

    def plan(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in (self._plan().get("shards") or {}).items()}

    def workers(self) -> int:
        """The number of workers the plan was made for."""
        return int(self._plan().get("workers") or 0)

    def _key(self, sid: str, kind: str) -> str:
        return f"{self.prefix}{safe_segment(sid)}.{kind}.json"

    def done(self) -> dict[str, dict[str, Any]]:
        found = self.store.json_objects(self.prefix, ".done.json")
        return {key[len(self.prefix) : -len(".done.json")]: record for key, record in found}

    def claim(self, holder: str, name: str, ttl: float, *, dead: Dead | None = None) -> str | None:
        """Claim the first shard not done whose claim is free, lapsed, or a dead holder's; None
        when every shard left is held by a live worker (or none is left)."""
        finished = set(self.done())
        for sid in sorted(self.plan()):
            if sid in finished or not self._take(sid, holder, name, ttl, dead):
                continue
            if self.store.exists(self._key(sid, "done")):  # finished meanwhile: its done marker is put
                self.release(sid, holder)  # before its claim is released, so this sees it
                continue
            return sid
        return None

    def _take(self, sid: str, holder: str, name: str, ttl: float, dead: Dead | None) -> bool:
        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            now, cur = self.clock(), cur or {}
            other = cur.get("holder") not in (holder, None)
            live = float(cur.get("expires_at") or 0) > now
            if other and live and (dead is None or not dead(cur.get("holder"))):
                return None  # a live worker holds it
            takeovers = int(cur.get("takeovers") or 0) + (1 if other else 0)
            return {
                "holder": holder,
                "name": name,
                "acquired_at": now,
                "expires_at": now + ttl,
                "takeovers": takeovers,
                "previous": cur.get("name") if other else None,
            }

        return update_json(self.store, self._key(sid, "claim"), fn) is not None

    def renew(self, sid: str, holder: str, ttl: float) -> bool:
        """Extend our claim; False when it is not ours any more (it lapsed and another took it)."""
        return self._change_own(sid, holder, {"expires_at": self.clock() + ttl})

    def release(self, sid: str, holder: str) -> None:
        """Give a claim up (done, or stopping): marked free by compare-and-swap, only if ours."""
        self._change_own(sid, holder, {"holder": None, "expires_at": 0})

    def _change_own(self, sid: str, holder: str, change: dict[str, Any]) -> bool:
        """Update `holder`'s claim of `sid` with `change`; False when the claim is not `holder`'s."""

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            return {**cur, **change} if cur and cur.get("holder") == holder else None

        return update_json(self.store, self._key(sid, "claim"), fn) is not None

    def finish(self, sid: str, holder: str, name: str, counts: dict[str, int], docs: int) -> None:
        record = {"holder": holder, "name": name, "at": self.clock(), "counts": counts, "docs": docs}
        self.store.put_json(self._key(sid, "done"), record, if_absent=True)
        self.release(sid, holder)

    def stop(self, kind: str, message: str, *, by: str) -> None:
        """Every worker stops claiming (budget spent, a systemic failure); the first reason stays."""
        record = {"kind": kind, "message": message, "by": by, "at": self.clock()}
        self.store.put_json(self.prefix + "stop.json", record, if_absent=True)

    def resume(self) -> None:
        """Clear a stop (a driver interrupted, now back): the generation's workers may claim again."""
        self.store.delete(self.prefix + "stop.json")

    def stopped(self) -> dict[str, Any] | None:
        return self.store.get_dict(self.prefix + "stop.json")

    def states(self) -> list[ShardState]:
        plan, done, now = self.plan(), self.done(), self.clock()
        out: list[ShardState] = []
        for sid, chunks in sorted(plan.items()):
            claim = read_json(self.store, self._key(sid, "claim"))[0] or {}
            live = claim.get("holder") is not None and float(claim.get("expires_at") or 0) > now
            state = "done" if sid in done else ("claimed" if live else "open")
            worker = (done.get(sid) or {}).get("name") or (claim.get("name") if live else None)
            out.append(
                {
                    "shard": sid,
                    "chunks": len(chunks),
                    "state": state,
                    "worker": worker,
                    "takeovers": int(claim.get("takeovers") or 0),
                    "docs": int((done.get(sid) or {}).get("docs") or 0),
                }
            )
        return out


class WorkerLog:
    """`runs/<run_id>/workers/<holder>.json`: each worker process of a spread run, its heartbeat."""

    def __init__(self, store: ObjectStore, run_id: str) -> None:
        self.store = store
        self.prefix = f"runs/{safe_segment(run_id)}/workers/"

    def beat(self, holder: str, info: dict[str, Any]) -> None:
        self.store.put_json(f"{self.prefix}{safe_segment(holder)}.json", {"holder": holder, **info})

    def all(self) -> Iterator[dict[str, Any]]:
        for _key, record in self.store.json_objects(self.prefix):
            yield record

"""A run's cost cap shared by the processes spending for it at once (the shard workers of a run
spread over workers): `runs/<run_id>/shards/<gen>/allowance.json` = {cap, base, grants}.

`base` is what the run had spent (cost ledger plus in-flight upper bounds) when the generation of
shards was planned. Each worker spends only what it was granted (its process-wide `Budget` is capped
at its grant). Before each shard it reports what it has spent and takes a new grant: what is left
of the cap after the base and every other worker's grant, shared out among the workers still
granted (a worker's grant is at least what it has spent). A worker that stops reporting keeps its
grant counted as spent (it may have spent all of it, unrecorded), so the workers together never pass
the cap; what a dead worker really spent shows up in the cost ledger when the run is resumed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from checkpoints.cas import update_json
from checkpoints.keys import safe_segment
from checkpoints.store import ObjectStore


class Allowance:
    def __init__(
        self, store: ObjectStore, run_id: str, gen: int, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.store, self.clock = store, clock
        self.key = f"runs/{safe_segment(run_id)}/shards/{int(gen):04d}/allowance.json"

    def create(self, cap: float, base: float) -> None:
        """Once per generation (the first writer wins)."""
        self.store.put_json(self.key, {"cap": cap, "base": base, "grants": {}}, if_absent=True)

    def take(
        self, holder: str, spent: float, *, workers: int, need: float, lease_seconds: float
    ) -> tuple[float, float]:
        """Report `spent` (this worker's spending so far) and get its grant: the most it may have
        spent in all (never below what it spent): a part of what is free for each of the `workers`
        (or of the workers still granted, when more), but at least `need` (what its requests in
        flight can cost at once) while that much is free. Returns (grant, what live others were
        granted and have not spent yet)."""
        granted: list[float] = []

        def fn(cur: dict[str, Any] | None) -> dict[str, Any]:
            rec = dict(cur or {"cap": 0.0, "base": 0.0, "grants": {}})
            now = self.clock()
            grants = dict(rec.get("grants") or {})
            others = {h: g for h, g in grants.items() if h != holder}
            held = sum(float(g["granted"]) for g in others.values())  # a silent worker's grant stays counted
            live = [h for h, g in others.items() if float(g.get("expires_at") or 0) > now]
            free = max(float(rec["cap"]) - float(rec["base"]) - held - spent, 0.0)
            mine = spent + min(free, max(free / max(len(live) + 1, workers), need))
            grants[holder] = {"granted": round(mine, 9), "spent": spent, "expires_at": now + lease_seconds}
            unspent = sum(max(float(others[h]["granted"]) - float(others[h]["spent"]), 0.0) for h in live)
            granted[:] = [mine, unspent]
            return {**rec, "grants": grants}

        update_json(self.store, self.key, fn)
        return granted[0], granted[1]

    def give_back(self, holder: str, spent: float) -> None:
        """Done: the grant shrinks to what was spent (the rest goes to the others' next grants)."""

        def fn(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            if not cur or holder not in (cur.get("grants") or {}):
                return None
            grants = dict(cur["grants"])
            grants[holder] = {"granted": spent, "spent": spent, "expires_at": 0}
            return {**cur, "grants": grants}

        update_json(self.store, self.key, fn)

"""The organisation's rate limit, shared by every docmill process that uses one store:
`limits/<scope>.json` = {limits, stated_at, members: {holder: Member}}.

The API's limits belong to the organisation, not to a process. Each process that sends requests
is a *member* with a lease (`expires_at`) that it renews every few seconds by compare-and-swap,
saying what it wants (`want`: the share of the limit it used lately, or None when it was held back
by its pacer, i.e. it could use more). Every member computes the same split from the record
(`fair_shares`: max-min fair, what is left over shared out equally) and paces at its share.
A member that leaves deletes its entry; one that dies stops renewing and its entry is ignored (and
dropped by the next writer) once its lease expires, so its share returns to the others within one
lease period. `limits` holds the limits as the API's headers last stated them (whole
organisation), written by whichever member saw them, so a process joining later starts from them
instead of a configured guess.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, TypedDict

from checkpoints.cas import read_json, update_json
from checkpoints.keys import safe_segment
from checkpoints.store import ObjectStore

PREFIX = "limits/"
MIN_WANT = 0.005  # of the limit: a member that sends nothing (new, idle) still gets enough to start


class Member(TypedDict, total=False):
    """One process in the pool."""

    name: str  # who, for `status` and reports: a worker name, host:pid
    expires_at: float
    renewed_at: float
    want: float | None  # share of the limit it can use; None: as much as it can get
    share: float  # what it paces at since its last renewal (for status)
    sent: int  # requests sent so far (status)
    throttled: int  # answers that were 429 (status)


def live_members(record: Mapping[str, Any] | None, now: float) -> dict[str, Member]:
    members = (record or {}).get("members") or {}
    return {h: m for h, m in members.items() if float(m.get("expires_at") or 0) > now}


def fair_shares(wants: Mapping[str, float | None]) -> dict[str, float]:
    """Max-min fair split of one limit (1.0) among members: a member wanting less than an equal
    part of what is left gets what it wants, the others share the rest equally; when everyone
    wants less than there is, the leftover is shared out equally on top (room to grow)."""
    left = dict(wants)
    shares: dict[str, float] = {}
    remaining = 1.0
    while left:
        equal = remaining / len(left)
        small = {h: max(w, MIN_WANT) for h, w in left.items() if w is not None and max(w, MIN_WANT) <= equal}
        if not small:
            shares.update(dict.fromkeys(left, equal))
            return shares
        for h, w in small.items():
            shares[h] = w
            remaining -= w
            del left[h]
    extra = max(remaining, 0.0) / max(len(shares), 1)
    return {h: s + extra for h, s in shares.items()}


class LimitPool:
    """The shared record of one scope (one organisation and endpoint)."""

    def __init__(self, store: ObjectStore, scope: str, *, clock: Callable[[], float] = time.time) -> None:
        self.store, self.scope, self.clock = store, scope, clock
        self.key = f"{PREFIX}{safe_segment(scope)}.json"

    def read(self) -> dict[str, Any]:
        return read_json(self.store, self.key)[0] or {}

    def renew(
        self,
        holder: str,
        member: Member,
        *,
        lease_seconds: float,
        limits: Mapping[str, float] | None = None,
    ) -> tuple[float, dict[str, Any]]:
        """Join or renew `holder` for `lease_seconds`, publish the limits it saw in headers (they
        replace the record's), drop expired members; returns (its share, the record written)."""

        def fn(current: dict[str, Any] | None) -> dict[str, Any]:
            now = self.clock()
            record = dict(current or {})
            members = live_members(record, now)
            entry: Member = {**member, "expires_at": now + lease_seconds, "renewed_at": now}
            members[holder] = entry
            shares = fair_shares({h: m.get("want") for h, m in members.items()})
            entry["share"] = round(shares[holder], 6)
            record["members"] = members
            if limits:
                stated = {k: float(v) for k, v in limits.items()}
                if stated != record.get("limits"):
                    record["limits"], record["stated_at"] = stated, now
            return record

        written = update_json(self.store, self.key, fn)
        assert written is not None  # `fn` never gives up
        return float(written["members"][holder]["share"]), written

    def leave(self, holder: str) -> None:
        """Give the share back now (the others take it at their next renewal)."""

        def fn(current: dict[str, Any] | None) -> dict[str, Any] | None:
            if not current or holder not in (current.get("members") or {}):
                return None
            members = live_members(current, self.clock())
            members.pop(holder, None)
            return {**current, "members": members}

        update_json(self.store, self.key, fn)

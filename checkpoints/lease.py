"""One driver per run: `runs/<run_id>/lease.json` = {holder, expires_at}.

acquire: compare-and-swap (checkpoints.cas) over an absent lease, an expired lease, one we already hold, or one
whose holder is known dead (`dead`, e.g. `holder_is_dead_here`): the takeover is always a
conditional replace of the very lease that was judged, never a delete, so of two processes taking
over the same dead holder's lease exactly one wins and the other sees the winner's live lease.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from checkpoints import cas
from checkpoints.keys import safe_segment
from checkpoints.store import ObjectStore
from docmill.errors import LeaseHeld, PreconditionFailed

MAX_ATTEMPTS = 10


def lease_key(run_id: str) -> str:
    return f"runs/{safe_segment(run_id)}/lease.json"


def live_lease(store: ObjectStore, run_id: str, now: float) -> dict[str, Any] | None:
    """The run's lease if it is held, unexpired, and not left by a dead process on this machine
    (its driver is alive, as far as anyone can tell); else None."""
    lease = store.get_json_or_none(lease_key(run_id))
    if not isinstance(lease, dict) or float(lease.get("expires_at") or 0) <= now:
        return None
    return None if holder_is_dead_here(lease.get("holder")) else lease


def holder_is_dead_here(holder: str | None) -> bool:
    """Whether a lease holder ("host:pid:nonce") is a process of this machine that no longer runs:
    its lease can be taken over at once instead of after its expiry."""
    host, _, rest = (holder or "").partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


class Lease:
    def __init__(
        self,
        store: ObjectStore,
        run_id: str,
        holder: str,
        ttl_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        self.store = store
        self.run_id = safe_segment(run_id)
        self.holder = holder
        self.ttl = float(ttl_seconds)
        self.clock = clock
        self.key = lease_key(run_id)
        self.expires_at: float | None = None

    def _record(self) -> dict[str, Any]:
        now = self.clock()
        return {"holder": self.holder, "acquired_at": now, "expires_at": now + self.ttl}

    def _held(self, current: dict[str, Any]) -> LeaseHeld:
        until = float(current.get("expires_at", 0))
        left = max(0.0, until - self.clock())
        return LeaseHeld(
            f"run {self.run_id} is driven by {current.get('holder')!r} until {_iso(until)} "
            f"({left:.0f}s from now)",
            hint="wait for that process to finish or its lease to expire (an expired lease is "
            "taken over automatically), or stop that process",
            run_id=self.run_id,
            holder=current.get("holder"),
            expires_at=until,
        )

    def acquire(self, *, dead: Callable[[str | None], bool] | None = None) -> Lease:
        """Take the lease or raise `LeaseHeld`. `dead(holder)` True lets an unexpired lease of a
        holder known to be gone be taken over (by compare-and-swap, like an expired one)."""

        def fn(current: dict[str, Any] | None) -> dict[str, Any]:
            if current is not None:
                mine = current.get("holder") == self.holder
                live = float(current.get("expires_at", 0)) > self.clock()
                if not mine and live and not (dead is not None and dead(current.get("holder"))):
                    raise self._held(current)
            return self._record()

        def exhausted() -> LeaseHeld:
            found = self.store.get_json_or_none(self.key)
            return self._held(found if isinstance(found, dict) else {"holder": "unknown", "expires_at": 0})

        record = cas.update_json(self.store, self.key, fn, attempts=MAX_ATTEMPTS, exhausted=exhausted)
        assert record is not None  # `fn` never gives up
        self.expires_at = record["expires_at"]
        return self

    def renew(self) -> None:
        """Extend our lease by ttl; `LeaseHeld` if it was taken over meanwhile."""

        def fn(current: dict[str, Any] | None) -> dict[str, Any]:
            if current is None or current.get("holder") != self.holder:
                holder = None if current is None else current.get("holder")
                raise LeaseHeld(
                    f"lost the lease of run {self.run_id}: now held by {holder!r}",
                    hint="another process took over after our lease expired; stop this one",
                    run_id=self.run_id,
                    holder=holder,
                )
            return self._record()

        def exhausted() -> LeaseHeld:
            return LeaseHeld(f"could not renew the lease of run {self.run_id}", run_id=self.run_id)

        record = cas.update_json(self.store, self.key, fn, attempts=MAX_ATTEMPTS, exhausted=exhausted)
        assert record is not None  # `fn` never gives up
        self.expires_at = record["expires_at"]

    def release(self) -> None:
        """Give the lease up if we hold it (a lease someone else holds is left alone). Ours and
        unexpired: deleted (nobody else can have it). Ours and expired: another process may be taking
        it over right now, so it is only marked released by one compare-and-swap, which may lose."""
        unexpired = False

        def fn(current: dict[str, Any] | None) -> dict[str, Any] | None:
            nonlocal unexpired
            if current is None or current.get("holder") != self.holder:
                return None
            if float(current.get("expires_at", 0)) > self.clock():
                unexpired = True
                return None
            return {"holder": self.holder, "acquired_at": current.get("acquired_at"), "expires_at": 0}

        try:
            cas.update_json(self.store, self.key, fn, attempts=1)
        except PreconditionFailed:
            pass  # taken over meanwhile: it is not ours to mark
        if unexpired:
            self.store.delete(self.key)
        self.expires_at = None

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

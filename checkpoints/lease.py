"""One driver per run: `runs/<run_id>/lease.json` = {holder, expires_at}.

acquire: put-if-absent, or compare-and-swap over an expired lease, one we already hold, or one
whose holder is known dead (`dead`, e.g. `holder_is_dead_here`): the takeover is always a
conditional replace of the very lease that was judged, never a delete, so of two processes taking
over the same dead holder's lease exactly one wins and the other sees the winner's live lease.
renew: compare-and-swap while we still hold it. release: delete only if we hold it.
A second process is refused with `LeaseHeld` naming the holder and the expiry.
The clock is injectable so tests can move time without sleeping.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from checkpoints.keys import safe_segment
from checkpoints.store import ObjectStore, dumps_json, loads_json
from docmill.errors import LeaseHeld, NotFound, PreconditionFailed

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

    def _read(self) -> tuple[dict[str, Any], str] | None:
        try:
            data, etag = self.store.get_with_etag(self.key)
        except NotFound:
            return None
        return loads_json(data), etag

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
        for _ in range(MAX_ATTEMPTS):
            record = self._record()
            if self.store.put_if_absent(self.key, dumps_json(record)):
                self.expires_at = record["expires_at"]
                return self
            found = self._read()
            if found is None:
                continue  # released meanwhile: try put-if-absent again
            current, etag = found
            mine = current.get("holder") == self.holder
            live = float(current.get("expires_at", 0)) > self.clock()
            if not mine and live and not (dead is not None and dead(current.get("holder"))):
                raise self._held(current)
            try:
                self.store.put_if_match(self.key, dumps_json(record), etag)
            except PreconditionFailed:
                continue  # someone else moved first: look again
            self.expires_at = record["expires_at"]
            return self
        found = self._read()
        raise self._held(found[0] if found else {"holder": "unknown", "expires_at": 0})

    def renew(self) -> None:
        """Extend our lease by ttl; `LeaseHeld` if it was taken over meanwhile."""
        for _ in range(MAX_ATTEMPTS):
            found = self._read()
            if found is None or found[0].get("holder") != self.holder:
                current = found[0] if found else {"holder": None, "expires_at": 0}
                raise LeaseHeld(
                    f"lost the lease of run {self.run_id}: now held by {current.get('holder')!r}",
                    hint="another process took over after our lease expired; stop this one",
                    run_id=self.run_id,
                    holder=current.get("holder"),
                )
            record = self._record()
            try:
                self.store.put_if_match(self.key, dumps_json(record), found[1])
            except PreconditionFailed:
                continue
            self.expires_at = record["expires_at"]
            return
        raise LeaseHeld(f"could not renew the lease of run {self.run_id}", run_id=self.run_id)

    def release(self) -> None:
        """Give the lease up if we hold it (a lease someone else holds is left alone)."""
        found = self._read()
        if found is None or found[0].get("holder") != self.holder:
            return
        current, etag = found
        if float(current.get("expires_at", 0)) > self.clock():
            self.store.delete(self.key)  # unexpired and ours: nobody else can have it
        else:
            # Expired: another process may be taking it over right now, so only a CAS is safe.
            released = {"holder": self.holder, "acquired_at": current.get("acquired_at"), "expires_at": 0}
            try:
                self.store.put_if_match(self.key, dumps_json(released), etag)
            except PreconditionFailed:
                pass
        self.expires_at = None

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

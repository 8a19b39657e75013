"""One organisation-wide pacer: this process's membership in the shared rate-limit pool
(checkpoints.limits), applied to its own `RateLimiter` through `set_share`.

Every `lease/3` seconds (and at start) a member measures what it did since the last renewal (held
back by its pacer: it could use more, `want` None; else the share it used x1.25, never dropping by
more than half a renewal; idle or new: the minimum, plus an equal part of what the others leave),
publishes that with the limits the API's headers stated to it, renews its lease, sets its limiter's
share from the split every member computes alike, and adopts limits other members saw (a process
that joins late starts from the stated limit, not a configured guess). `stop()` leaves the pool; a
process that dies leaves it when its lease expires. Nothing here waits for the store on the request
path: a failed renewal is logged and the last share stays in force until the lease runs out.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from checkpoints.limits import MIN_WANT, LimitPool, Member
from docmill.logs import get_logger

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore
    from tasks.api.pacing import RateLimiter

log = get_logger("api")
DEFAULT_BASE_URL = "https://api.anthropic.com"  # where the SDK sends without a base URL
REQUESTS = "requests"
GROWTH = 1.25  # want = used x this: room to grow
DECAY = 0.5  # a member sending less has its want fall at most this much per renewal


class SharedLimit:
    def __init__(
        self,
        pool: LimitPool,
        limiter: RateLimiter,
        holder: str,
        *,
        name: str = "",
        lease_seconds: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pool, self.limiter, self.holder = pool, limiter, holder
        self.name = name or holder
        self.lease = float(lease_seconds)
        self.clock = clock
        self.share = 1.0
        self.want: float | None = None  # None until measured: a new member asks for an equal part
        self._last = (clock(), limiter.stats.sent, len(limiter.stats.waits))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.renewals = 0

    # ---- one renewal -------------------------------------------------------------------------

    def _measure(self) -> float | None:
        now, sent, waits = self.clock(), self.limiter.stats.sent, len(self.limiter.stats.waits)
        then, sent0, waits0 = self._last
        self._last = (now, sent, waits)
        if self.renewals and waits > waits0:
            return None  # held back by its pacer: it could use more
        limit = self._org_limit()
        if self.renewals == 0 or sent == sent0 or not limit or now <= then:
            return MIN_WANT  # new or idle: the minimum, plus an equal part of what is left over
        used = (sent - sent0) / (now - then) * 60.0 / limit
        floor = (self.want if self.want is not None else self.share) * DECAY
        return min(1.0, max(used * GROWTH, floor))

    def _org_limit(self) -> float | None:
        stated = self.limiter.stats.adopted.get(REQUESTS)
        if stated:
            return float(stated)
        own = self.limiter.limits.get(REQUESTS)
        return float(own) / self.share if own else None

    def renew(self) -> float:
        """One round: publish, renew the lease, take the share. Returns the share now in force."""
        self.want = self._measure()
        stats = self.limiter.stats
        member: Member = {
            "name": self.name,
            "want": self.want,
            "sent": stats.sent,
            "throttled": stats.throttled,
        }
        share, record = self.pool.renew(
            self.holder, member, lease_seconds=self.lease, limits=dict(stats.adopted) or None
        )
        self._adopt_stated(record.get("limits") or {})
        if abs(share - self.share) > 1e-6:
            self.limiter.set_share(share)
            self.share = share
        self.renewals += 1
        return share

    def _adopt_stated(self, limits: dict[str, Any]) -> None:
        """Limits another member saw in headers and this one has not seen yet."""
        missing = {k: v for k, v in limits.items() if k not in self.limiter.stats.adopted}
        if missing:
            self.limiter.observe({f"anthropic-ratelimit-{k}-limit": str(v) for k, v in missing.items()})

    # ---- in the background ------------------------------------------------------------------

    def start(self) -> SharedLimit:
        self._renew_quietly()
        self._thread = threading.Thread(target=self._loop, name="docmill-shared-limit", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.lease / 3):
            self._renew_quietly()

    def _renew_quietly(self) -> None:
        try:
            self.renew()
        except Exception as e:  # the last share holds until the lease runs out; the next try says more
            log.warning("shared rate limit: renewal failed (%s); keeping share %.3f", e, self.share)

    def stop(self) -> None:
        """Leave the pool: the share goes back to the others."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.pool.leave(self.holder)
        except Exception as e:  # it expires by itself within one lease
            log.warning(
                "shared rate limit: could not leave the pool (%s); it expires in %.0fs", e, self.lease
            )


def scope_for(scope: str, base_url: str | None, *, builtin: bool) -> str | None:
    """The pool of one organisation at one endpoint: `scope` plus a digest of the base URL (the real
    API when None). None for docmill's built-in emulator: each process has its own, with its own
    limits, so there is nothing to share."""
    if builtin:
        return None
    digest = hashlib.sha256((base_url or DEFAULT_BASE_URL).rstrip("/").encode()).hexdigest()
    return f"{scope}-{digest[:10]}"


@contextmanager
def shared_limit(
    store: ObjectStore | None, limiter: RateLimiter, scope: str | None, holder: str, **kw: Any
) -> Iterator[SharedLimit | None]:
    """Be a member of the pool `scope` while the block runs (None scope or store: not shared)."""
    if store is None or not scope:
        yield None
        return
    member = SharedLimit(LimitPool(store, scope), limiter, holder, **kw).start()
    try:
        yield member
    finally:
        member.stop()

"""Two resumes of a run whose driver died, started together on S3 with 0-250 ms request latency:
exactly one drives (the dead holder's lease is replaced by compare-and-swap, never deleted)."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from checkpoints.lease import lease_key
from checkpoints.store import ObjectStore, dumps_json, open_store
from docmill.errors import LeaseHeld
from docmill.settings import Settings
from flows.run.context import Endpoint, RunContext
from flows.run.guard import hold_lease

TRIALS = 20
LATENCY = (0.0, 0.25)  # seconds before every store request


class SlowStore:
    """The store with a random delay before every call (a far or busy S3 endpoint)."""

    def __init__(self, store: ObjectStore, seed: int) -> None:
        self._store, self._rng = store, random.Random(seed)
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._store, name)
        if not callable(target):
            return target

        def slow(*args: Any, **kw: Any) -> Any:
            with self._lock:
                delay = self._rng.uniform(*LATENCY)
            time.sleep(delay)
            return target(*args, **kw)

        return slow


def _dead_holder() -> str:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return f"{socket.gethostname()}:{gone.stdout.strip()}:dead00"


def _resume(store: Any, run_id: str, other_done: threading.Event, done: threading.Event) -> str:
    """What a resume does first: take the run's lease; hold it until the other resume has tried."""
    ctx = RunContext(
        None, run_id, store, None, Settings(), endpoint=Endpoint(None, "", True), batch_sdk=lambda: None
    )  # the lease only
    try:
        with hold_lease(ctx):
            done.set()
            other_done.wait(15)
            return "drove"
    except LeaseHeld:
        return "refused"
    finally:
        done.set()


def _trial(store: Any, run_id: str, results: dict[str, list[str]]) -> Callable[[], None]:
    events = (threading.Event(), threading.Event())
    out: list[str] = []
    results[run_id] = out
    start = threading.Barrier(2)

    def one(i: int) -> None:
        start.wait()
        out.append(_resume(store, run_id, events[1 - i], events[i]))

    def both() -> None:
        threads = [threading.Thread(target=one, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)

    return both


def test_two_resumes_together_on_s3_with_latency_one_drives(s3_store_uri: str) -> None:
    base = open_store(s3_store_uri)
    dead = _dead_holder()
    now = time.time()
    results: dict[str, list[str]] = {}
    trials = []
    for n in range(TRIALS):  # the trials run side by side (each is two resumes of its own run)
        run_id = f"takeover-{n:02d}"
        lease = {"holder": dead, "acquired_at": now, "expires_at": now + 600}  # unexpired, holder gone
        base.put(lease_key(run_id), dumps_json(lease))
        trials.append(threading.Thread(target=_trial(SlowStore(base, n), run_id, results)))
    for t in trials:
        t.start()
    for t in trials:
        t.join(60)
    drivers = {run_id: out.count("drove") for run_id, out in results.items()}
    assert all(len(out) == 2 for out in results.values()), results
    assert list(drivers.values()) == [1] * TRIALS, f"drivers per trial: {drivers}"

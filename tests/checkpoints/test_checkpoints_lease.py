"""One driver per run: a lease cannot be held twice; an expired one is taken over (mocked clock)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from checkpoints.lease import Lease
from checkpoints.store import ObjectStore
from docmill.errors import LeaseHeld

from .conftest import FakeClock


def test_second_holder_is_refused_with_who_and_until(store: ObjectStore, clock: FakeClock) -> None:
    a = Lease(store, "run1", "host-a:1", ttl_seconds=60, clock=clock).acquire()
    with pytest.raises(LeaseHeld) as info:
        Lease(store, "run1", "host-b:2", ttl_seconds=60, clock=clock).acquire()
    err = info.value
    assert err.fields["holder"] == "host-a:1"
    assert err.fields["expires_at"] == clock.now + 60
    assert "host-a:1" in str(err) and "until" in str(err)
    assert "expire" in err.hint
    assert a.expires_at == clock.now + 60


def test_expired_lease_is_taken_over_and_old_holder_loses_it(store: ObjectStore, clock: FakeClock) -> None:
    a = Lease(store, "run1", "a", ttl_seconds=60, clock=clock).acquire()
    clock.advance(59)
    with pytest.raises(LeaseHeld):
        Lease(store, "run1", "b", ttl_seconds=60, clock=clock).acquire()
    clock.advance(2)
    b = Lease(store, "run1", "b", ttl_seconds=60, clock=clock).acquire()
    assert store.get_json("runs/run1/lease.json")["holder"] == "b"
    with pytest.raises(LeaseHeld):
        a.renew()
    a.release()  # not ours any more: must leave b's lease alone
    assert store.get_json("runs/run1/lease.json")["holder"] == "b"
    b.release()
    assert not store.exists("runs/run1/lease.json")


def test_renew_extends_and_reacquire_by_same_holder(store: ObjectStore, clock: FakeClock) -> None:
    a = Lease(store, "run1", "a", ttl_seconds=60, clock=clock).acquire()
    clock.advance(50)
    a.renew()
    clock.advance(50)  # 100 s after acquiring, but renewed at 50
    with pytest.raises(LeaseHeld):
        Lease(store, "run1", "b", ttl_seconds=60, clock=clock).acquire()
    Lease(store, "run1", "a", ttl_seconds=60, clock=clock).acquire()  # a restarted driver, same id


def test_context_manager_releases(store: ObjectStore, clock: FakeClock) -> None:
    with Lease(store, "run1", "a", ttl_seconds=60, clock=clock):
        assert store.exists("runs/run1/lease.json")
    assert not store.exists("runs/run1/lease.json")
    with Lease(store, "run1", "b", ttl_seconds=60, clock=clock):
        pass


def test_release_of_expired_lease_only_marks_it(store: ObjectStore, clock: FakeClock) -> None:
    a = Lease(store, "run1", "a", ttl_seconds=10, clock=clock).acquire()
    clock.advance(11)
    a.release()
    assert store.get_json("runs/run1/lease.json")["expires_at"] == 0
    Lease(store, "run1", "b", ttl_seconds=10, clock=clock).acquire()


def test_concurrent_takeover_of_expired_lease_has_one_winner(store: ObjectStore, clock: FakeClock) -> None:
    Lease(store, "run1", "old", ttl_seconds=10, clock=clock).acquire()
    clock.advance(11)
    barrier = threading.Barrier(10)

    def take(i: int) -> bool:
        barrier.wait()
        try:
            Lease(store, "run1", f"p{i}", ttl_seconds=60, clock=clock).acquire()
            return True
        except LeaseHeld:
            return False

    with ThreadPoolExecutor(10) as pool:
        won = list(pool.map(take, range(10)))
    assert won.count(True) == 1
    assert store.get_json("runs/run1/lease.json")["holder"] == f"p{won.index(True)}"


def test_live_lease_sees_a_running_driver_only(tmp_path: Path) -> None:
    """What `status`, `runs` and the overlap check ask: does a live process drive this run?"""
    import socket
    import subprocess
    import sys
    import time

    from checkpoints.lease import Lease, live_lease
    from checkpoints.store import open_store

    store = open_store(str(tmp_path))
    now = time.time()
    assert live_lease(store, "none", now) is None
    Lease(store, "elsewhere", "other-host:1:ab", ttl_seconds=60).acquire()
    assert live_lease(store, "elsewhere", now)["holder"] == "other-host:1:ab"
    assert live_lease(store, "elsewhere", now + 120) is None  # expired
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = f"{socket.gethostname()}:{gone.stdout.strip()}:cd"
    Lease(store, "crashed-here", dead, ttl_seconds=60).acquire()
    assert live_lease(store, "crashed-here", now) is None  # its process on this machine is gone
    Lease(
        store, "alive-here", f"{socket.gethostname()}:{__import__('os').getpid()}:ef", ttl_seconds=60
    ).acquire()
    assert live_lease(store, "alive-here", now) is not None

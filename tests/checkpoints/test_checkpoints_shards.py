"""Shard claims (checkpoints.shards) and a run's cost cap shared by its workers (checkpoints.allowance),
on the local store and S3 alike, with time faked."""

from __future__ import annotations

import threading
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoints.allowance import Allowance
from checkpoints.shards import ShardTable, plan_shards
from checkpoints.store import open_store
from tests.fixtures.clock import FakeTime


def test_plan_deals_chunks_round_robin_into_at_most_n_shards() -> None:
    plan = plan_shards([f"{i:06d}" for i in range(10)], 4)
    assert plan == {
        "s000": ["000000", "000004", "000008"],
        "s001": ["000001", "000005", "000009"],
        "s002": ["000002", "000006"],
        "s003": ["000003", "000007"],
    }
    assert list(plan_shards(["a", "b"], 8)) == ["s000", "s001"]


def test_a_claim_is_held_until_it_lapses_then_taken_over_once(store_uri: str) -> None:
    clock = FakeTime()
    table = ShardTable(open_store(store_uri), "r1", 1, clock=clock.clock)
    table.create({"s000": ["a"], "s001": ["b"]}, 2)
    assert table.claim("host-a:1:x:w1", "w1", 60) == "s000"
    assert table.claim("host-b:2:y:w2", "w2", 60) == "s001"
    assert table.claim("host-c:3:z:w3", "w3", 60) is None  # both held by live workers
    clock.sleep(30)
    assert table.renew("s000", "host-a:1:x:w1", 60)  # w1 heartbeats; w2 does not
    clock.sleep(31)
    assert table.claim("host-c:3:z:w3", "w3", 60) == "s001"  # w2's claim lapsed
    assert not table.renew("s001", "host-b:2:y:w2", 60)  # w2 comes back: it is not its claim any more
    states = {s["shard"]: s for s in table.states()}
    assert states["s001"]["takeovers"] == 1 and states["s001"]["worker"] == "w3"
    table.finish("s001", "host-c:3:z:w3", "w3", {"succeeded": 1}, 1)
    assert table.states()[1]["state"] == "done"
    assert table.claim("host-b:2:y:w2", "w2", 60) is None  # done shards are never claimed again


def test_a_dead_local_holder_is_taken_over_at_once(tmp_path: Any) -> None:
    table = ShardTable(open_store(tmp_path), "r1", 1)
    table.create({"s000": ["a"]}, 1)
    assert table.claim("h:1:x:w1", "w1", 600) == "s000"
    assert table.claim("h:2:y:w2", "w2", 600, dead=lambda holder: holder == "h:1:x:w1") == "s000"


def test_concurrent_claims_give_each_shard_to_one_worker(store_uri: str) -> None:
    table = ShardTable(open_store(store_uri), "r1", 1)
    table.create(plan_shards([f"c{i}" for i in range(6)], 6), 6)
    got: dict[str, list[str]] = {}

    def worker(n: int) -> None:
        mine = got.setdefault(f"w{n}", [])
        while (sid := table.claim(f"h:{n}:x:w{n}", f"w{n}", 600)) is not None:
            mine.append(sid)
            table.finish(sid, f"h:{n}:x:w{n}", f"w{n}", {}, 1)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    claimed = [sid for sids in got.values() for sid in sids]
    assert sorted(claimed) == sorted(table.plan())  # every shard once


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(0, 1), st.booleans()), max_size=30))
def test_grants_never_exceed_the_cap(tmp_path_factory: Any, steps: list[tuple[int, float, bool]]) -> None:
    """Workers take grants, spend some of them, and some stop reporting: whatever happens, what the
    workers may spend together stays within the cap, and a worker never spends beyond its grant."""
    clock = FakeTime()
    allowance = Allowance(open_store(tmp_path_factory.mktemp("a")), "r1", 1, clock=clock.clock)
    cap, base = 1.0, 0.2
    allowance.create(cap, base)
    spent = dict.fromkeys(range(4), 0.0)
    grant = dict.fromkeys(range(4), 0.0)
    for who, use, silent in steps:
        spent[who] += (grant[who] - spent[who]) * use  # spends part of what it was granted
        grant[who], _ = allowance.take(f"w{who}", spent[who], workers=4, need=0.05, lease_seconds=10)
        assert grant[who] >= spent[who] - 1e-9
        record = allowance.store.get_json(allowance.key)
        assert sum(g["granted"] for g in record["grants"].values()) <= cap - base + 1e-9
        clock.sleep(20 if silent else 1)

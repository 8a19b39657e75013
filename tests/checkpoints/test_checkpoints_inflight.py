"""Invariant 13's bound, read from the in-flight records as a crash leaves them: per sender (life) at
most its concurrency of requests, only keys with no result of this run, frozen by a later life, and
answers saved before the kill costed once from the response log (checkpoints.inflight)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from checkpoints.costs import CostEntry, CostLedger
from checkpoints.inflight import InFlight, run_spend
from checkpoints.ledger import ResponseLog, ResultsLedger
from checkpoints.store import open_store
from docmill.prices import priced_usd

MODEL = "claude-sonnet-4-6"
USAGE = {"input_tokens": 1000, "output_tokens": 200}


def _keys(prefix: str, n: int) -> dict[str, float]:
    return {f"{prefix}{i}": 0.01 * (i + 1) for i in range(n)}


def test_each_life_counts_at_most_its_concurrency_of_unfinished_keys(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    f = InFlight(store, "run1")
    f.open_chunk("000001", "a", 4, _keys("a", 6))  # two chunks of one process at --concurrency 4
    f.open_chunk("000002", "a", 4, _keys("b", 6))
    f.open_call("integration-x", "b", 2, 0.5)  # another process's call
    left = f.totals()
    assert left["lives"] == 2 and left["requests"] == 4 + 1  # not 12 + 1
    f.open_chunk("000003", "c", None, _keys("c", 6))  # no --concurrency: what its pacer declared
    assert f.totals()["requests"] == 4 + 1 + 6
    f.declare("c", 3)
    assert f.totals()["requests"] == 4 + 1 + 3
    f.declare("c", 5)  # its window grew
    left = f.totals()
    assert left["lives"] == 3 and left["requests"] == 4 + 1 + 5 and left["groups"] == 4
    for k in _keys("c", 6):
        ResultsLedger(store).put("file", k, {"origin_run": "run1"})
    left = f.totals()
    assert left["usd"] == pytest.approx(0.06 + 0.06 + 0.05 + 0.05 + 0.5)  # the dearest four, and the call
    ledger = ResultsLedger(store)
    for k in ("a5", "b5", "a4", "b4", "a3"):  # finished documents have nothing in flight
        ledger.put("file", k, {"origin_run": "run1"})
    ledger.put("file", "b3", {"origin_run": "another-run"})  # another run's result says nothing of this one
    left = f.totals()
    assert left["requests"] == 4 + 1 and left["usd"] == pytest.approx(0.04 + 0.03 + 0.03 + 0.02 + 0.5)
    for k in ("a0", "a1", "a2", "b0", "b1", "b2"):
        ledger.put("file", k, {"origin_run": "run1"})
    assert f.totals()["requests"] == 1 + 1  # b3 alone, and the call


def test_a_later_life_freezes_what_the_killed_one_left_unfinished(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    f = InFlight(store, "run1")
    ledger = ResultsLedger(store)
    worst = _keys("k", 6)
    f.open_chunk("000001", "killed", 4, worst)
    for k in ("k0", "k1", "k2"):
        ledger.put("file", k, {"origin_run": "run1"})
    assert f.totals()["requests"] == 3
    mark = f.open_chunk("000001", "resumed", 4, worst)  # the resume takes the chunk up
    for k in worst:  # and finishes it: its results do not hide what the killed life had in flight
        ledger.put("file", k, {"origin_run": "run1"})
    f.close(mark, settled=True)
    left = f.totals()
    assert left["groups"] == 1 and left["requests"] == 3
    assert left["usd"] == pytest.approx(0.04 + 0.05 + 0.06)


def test_answers_saved_before_a_kill_are_spend_counted_once(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    f = InFlight(store, "run1")
    log = ResponseLog(store)
    log.put("file", "k0", 1, {"usage": USAGE, "_docmill": {"model": MODEL, "at": time.time() - 3600}})
    mark = f.open_chunk("000001", "killed", 4, _keys("k", 2))
    f.open_chunk("000002", "killed", 4, {"k0": 0.01})  # a second record naming the key: counted once
    log.put("file", "k0", 2, {"usage": USAGE, "_docmill": {"model": MODEL, "at": time.time()}})
    log.put("file", "k1", 1, {"usage": USAGE, "_docmill": {"model": MODEL, "at": time.time()}})
    other = {"model": MODEL, "at": time.time(), "run_id": "run2"}  # another run's answer to the same key
    log.put("file", "k1", 2, {"usage": USAGE, "_docmill": other})
    one = priced_usd(MODEL, USAGE) or 0.0
    spend = run_spend(store, "run1")  # attempt 1 of k0 is older than the record: not this life's
    assert spend["in_flight"]["saved_answers"] == 2 and spend["saved_usd"] == pytest.approx(2 * one)
    entry = CostEntry.from_usage(
        run_id="run1", pass_name="file", doc_id="d1", key="k1", attempt=1, model=MODEL, usage=USAGE
    )
    CostLedger(store, "run1").record("file-recount", [entry])  # a resume recounted one of them
    spend = run_spend(store, "run1")
    assert spend["in_flight"]["saved_answers"] == 1
    assert spend["recorded_usd"] + spend["saved_usd"] == pytest.approx(2 * one)
    later = f.open_chunk("000001", "resumed", 4, _keys("k", 2))
    f.close(later, settled=True)  # the chunk's later life recorded what the killed one saved
    spend = run_spend(store, "run1")  # 000002's record still names k0, whose answer no ledger holds
    assert mark.key != later.key and spend["in_flight"]["saved_answers"] == 1

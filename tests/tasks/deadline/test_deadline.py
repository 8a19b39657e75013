"""The per-file pass with a deadline against the real emulator and the real SDK; only time is faked
(the engine's clock is the emulator's virtual clock, its sleep moves that clock): batches that end
in time stay batch; past the switch the rest is cancelled, waited for until ended, and sent
realtime before the deadline; a custom_id is never sent realtime while its batch has not ended."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from checkpoints.batches import BatchRecords
from checkpoints.store import open_store
from docmill.errors import ConfigError
from docmill.settings import Settings
from tasks.api.client import ModelClient
from tasks.deadline.engine import run_deadline
from tasks.deadline.plan import DeadlinePlan, Pace, parse_finish_by
from tasks.per_file.outcome import DocOutcome, DocState
from tasks.per_file.realtime import extract_chunk
from tasks.per_file.scope import RunScope
from tasks.recipes import load_recipe
from tasks.request import file_key, file_params
from tasks.source.inventory import Document, inventory
from tests.fixtures.emulator import sdk_client
from tests.tasks.batch.test_engine import make_corpus

RECIPE = load_recipe("invoices")
DEADLINE = 600.0  # 10 virtual minutes from the start


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("deadline") / "corpus", 16, seed=4)


class Run:
    def __init__(self, emulator: Any, tmp_path: Path, corpus: Path) -> None:
        self.em = emulator
        self.settings = Settings(
            store=str(tmp_path / "store"),
            api={"base_url": emulator.base_url, "concurrency": 4, "backoff_max_seconds": 0.0},
            batch={"poll_seconds": 30.0},
            deadline={
                "margin_seconds": 10,
                "margin_fraction": 0,
                "cancel_seconds": 5,
                "latency_seconds": 1,
                "poll_seconds": 30,
                "batches": 4,
            },
        )
        self.store = open_store(self.settings.store)
        self.docs = [
            d for d in inventory(str(corpus), self.settings, doc_types=RECIPE.doc_types) if d.status == "ok"
        ]
        self.client = ModelClient(self.settings, base_url=emulator.base_url, api_key="test-key")
        self.scope = RunScope(RECIPE, "run-1", self.store, self.client, self.settings)
        self.realtime_sent: list[tuple[float, str]] = []  # (virtual time, key) of each realtime document

    def key(self, doc: Document) -> str:
        return file_key(RECIPE, doc, self.settings.api.model, file_params(self.settings))

    def realtime(self, docs: list[Document]) -> Iterator[DocOutcome]:
        now = self.em.state.clock.now()
        self.realtime_sent += [(now, self.key(d)) for d in docs]
        yield from extract_chunk(docs, self.scope)

    def run(self) -> list[DocOutcome]:
        self.start = self.em.state.clock.now()
        return list(
            run_deadline(
                self.docs,
                self.scope,
                lambda: sdk_client(self.em),
                expected=len(self.docs),
                deadline=self.start + DEADLINE,
                realtime=self.realtime,
                requests_per_minute=600,
                clock=self.em.state.clock.now,
                sleep=self.em.state.clock.advance,
            )
        )

    def billed(self) -> tuple[Counter[str], Counter[str]]:
        """(custom_ids billed as batch items, request body hashes billed realtime)."""
        billed = self.em.state.accounting.billed
        return Counter(b.custom_id for b in billed if b.batch), Counter(
            b.body_sha256 for b in billed if not b.batch
        )

    def deadline_record(self) -> dict[str, Any]:
        return dict(self.store.get_json("runs/run-1/deadline.json"))


def test_deadline_batches_that_cannot_finish_go_realtime_before_it(
    emulator: Any, tmp_path: Path, corpus: Path
) -> None:
    emulator.state.config.batch_base_seconds = 1200.0  # every batch takes 20 virtual minutes
    emulator.state.config.batch_cancel_seconds = 60.0  # and a cancel a minute to settle
    r = Run(emulator, tmp_path, corpus)
    r.settings.deadline.cancel_seconds = 90.0  # what the plan assumes a cancel takes
    outcomes = r.run()
    assert {o.state for o in outcomes} == {DocState.SUCCEEDED} and len(outcomes) == len(r.docs)
    record = r.deadline_record()
    assert len(record["canceled"]) == 4  # four batches, all canceled at the switch
    assert sorted(record["realtime"]) == sorted(r.key(d) for d in r.docs)
    batch_billed, realtime_billed = r.billed()
    assert not batch_billed and len(realtime_billed) == len(r.docs) and max(realtime_billed.values()) == 1
    end = emulator.state.clock.now()
    assert end < r.start + DEADLINE  # finished before the deadline...
    assert (
        record["switched_at"] > r.start + DEADLINE / 2
    )  # ...after waiting for the batches as long as it could
    # no custom_id went realtime before its batch had ended (cancel first, wait for it to settle)
    ended = {cid: b.ended_at for b in emulator.state.batches.batches.values() for cid, _ in b.requests}
    assert all(ended[key] is not None and ended[key] <= at for at, key in r.realtime_sent)
    assert 60.0 <= record["cancel_seconds"] < 90.0  # measured
    assert all(rec.phase.value == "collected" for rec in BatchRecords(r.store, "run-1").load_all())


def test_deadline_that_allows_batch_costs_only_batch(emulator: Any, tmp_path: Path, corpus: Path) -> None:
    emulator.state.config.batch_base_seconds = 300.0  # batches end after 5 of the 10 minutes
    r = Run(emulator, tmp_path, corpus)
    outcomes = r.run()
    assert {o.state for o in outcomes} == {DocState.SUCCEEDED}
    batch_billed, realtime_billed = r.billed()
    assert not realtime_billed and set(batch_billed) == {r.key(d) for d in r.docs}
    record = r.deadline_record()
    assert record["switched_at"] is None and not record["realtime"] and not r.realtime_sent


def test_deadline_stragglers_only_go_realtime(emulator: Any, tmp_path: Path, corpus: Path) -> None:
    """Three of four batches end after a minute; the one holding a slow request would take 20: only its
    requests are cancelled and sent realtime, the others' answers are kept at batch price."""
    emulator.state.config.batch_base_seconds = 60.0
    r = Run(emulator, tmp_path, corpus)
    slow = r.key(r.docs[0])
    emulator.state.faults.add(kind="slow_batch", custom_id=slow, seconds=1200)
    outcomes = r.run()
    assert {o.state for o in outcomes} == {DocState.SUCCEEDED} and len(outcomes) == len(r.docs)
    batch_billed, realtime_billed = r.billed()
    record = r.deadline_record()
    assert slow in record["realtime"] and len(record["canceled"]) == 1
    per_batch = -(-len(r.docs) // 4)  # the pass is cut into four batches
    assert len(record["realtime"]) == len(realtime_billed) == per_batch  # the slow batch's requests
    assert len(batch_billed) == len(r.docs) - per_batch and not set(batch_billed) & set(record["realtime"])
    assert emulator.state.clock.now() < r.start + DEADLINE


def test_deadline_plan_arithmetic_and_times() -> None:
    pace = Pace(requests_per_minute=600, in_flight=4, latency_seconds=1.0)
    assert pace.throughput() == pytest.approx(4.0)  # the window (4 in flight / 1 s) binds below 0.9 x 10/s
    plan = DeadlinePlan.make(1000.0, 0.0, margin=10, fraction=0.1, cancel=5)
    assert plan.margin_seconds == pytest.approx(110)
    assert plan.switch_at(40, pace) == pytest.approx(1000 - 110 - 5 - (40 / 4 + 2))
    assert plan.switch_at(0, pace) > plan.switch_at(40, pace)  # less left: wait longer
    now = datetime(2026, 12, 2, 23, 30, tzinfo=UTC)
    assert parse_finish_by("+10m", now) == now + timedelta(minutes=10)
    assert parse_finish_by("06:00", now) == datetime(2026, 12, 3, 6, 0, tzinfo=UTC)
    assert parse_finish_by("2026-12-03T01:00:00+01:00", now) == now + timedelta(minutes=30)
    for bad in ("soon", "2026-12-01T00:00:00+00:00", "25:00"):
        with pytest.raises(ConfigError):
            parse_finish_by(bad, now)

"""The per-file pass with a deadline (`--finish-by`): batches while they can finish in time, the
rest realtime near the deadline (the policy and the arithmetic: tasks.deadline.plan).

`DeadlineEngine` composes the batch engine (tasks.batch.engine): it cuts the pass into at least
`settings.deadline.batches` batches (the API shows no progress inside one), follows them until the
*switch time* (recomputed at every poll, never slept past), then cancels every batch still running,
waits until each has *ended* (only then are its custom_ids free to send again: invariants 2 and
11), collects what they answered, and sends the rest realtime: first requests through `realtime`
(the caller's realtime per-file pass), follow-ups one by one through the result router. A run that
starts too close to its deadline sends everything realtime at once. What went which way, and the
switch itself, are kept in `runs/<run_id>/deadline.json`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from checkpoints.batches import BatchRecord
from tasks.api.pacing import WINDOW_MAX
from tasks.batch.engine import BatchEngine
from tasks.deadline.plan import DeadlinePlan, Pace, iso
from tasks.per_file.outcome import DocOutcome
from tasks.per_file.settle import Pass
from tasks.source.inventory import Document

if TYPE_CHECKING:
    import anthropic

    from tasks.per_file.scope import RunScope

Realtime = Callable[[list[Document]], Iterator[DocOutcome]]
SETTLE_POLL = 5.0  # seconds between looks at a batch being cancelled (at most)


class DeadlineEngine:
    """A `BatchEngine` driven to a deadline: it owns the engine (crash-safe records, streaming,
    collection, the result router) and gives it a batch size, a hold on new batches past the switch,
    and its own following loop; it overrides none of the engine's steps."""

    def __init__(
        self,
        p: Pass,
        client: Callable[[], anthropic.Anthropic],
        *,
        plan: DeadlinePlan,
        pace: Pace,
        expected: int,
        realtime: Realtime,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        measure: Callable[[], Pace] | None = None,
    ) -> None:
        conf = p.settings.deadline
        self.batches = BatchEngine(
            p,
            client,
            clock=clock,
            sleep=sleep,
            on_progress=None,
            batch_requests=max(1, math.ceil(expected / conf.batches)),
            held=lambda: self.switched,  # past the switch no batch is created: its requests go realtime
        )
        self.plan, self.pace, self.realtime, self.measure = plan, pace, realtime, measure
        self.p, self.clock, self.sleep = p, clock, sleep
        self.expected = expected
        self.poll = conf.poll_seconds
        self.key = f"runs/{p.run_id}/deadline.json"
        self.state: dict[str, Any] = p.store.get_json_or_none(self.key) or {
            "finish_by": iso(plan.deadline),
            "started_at": clock(),
            "switched_at": None,
            "realtime": [],
            "canceled": [],
            "cancel_seconds": None,
            "switch_planned": None,
        }
        self.switched = self.state.get("switched_at") is not None

    # ---- what is left, and when to switch -------------------------------------------------------

    def left(self) -> int:
        b = self.batches
        return sum(r.request_count for r in b.live.values()) + len(b.pending)

    def switch_at(self) -> float:
        return self.plan.switch_at(self.left(), self.pace)

    def _measure(self) -> None:
        """The pace as measured now (limits stated by the API, the answer time seen), when it can be."""
        if self.measure is not None:
            self.pace = self.measure()

    def _save(self, **changes: Any) -> None:
        self.state.update(changes)
        self.p.store.put_json(self.key, self.state)

    # ---- following ------------------------------------------------------------------------------

    def run(self, docs: Iterable[Document]) -> Iterator[DocOutcome]:
        self._measure()
        if self.clock() >= self.plan.switch_at(self.expected, self.pace):
            why = self.plan.why(self.expected, self.pace)
            self._switch(f"no time for a batch: everything goes realtime ({why})")
        yield from self.batches.run(docs, follow=self._follow)

    def _follow(self) -> Iterator[DocOutcome]:
        """The engine's batches followed until they end or the switch time comes, whichever is first."""
        b = self.batches
        if b.live or b.pending:
            self._save(switch_planned=iso(self.switch_at()))
        while b.live or b.pending:
            self._measure()
            if self.switched or self.clock() >= self.switch_at():
                self._switch(f"the switch time came: {self.plan.why(self.left(), self.pace)}")
                yield from self._settle_cancels()
                yield from self._send_realtime()
                continue
            if not b.live:
                yield from b.submit_pending()  # a later round (follow-ups, errored items)
                continue
            yield from b.poll_live()
            if b.live:
                self.sleep(max(min(self.poll, self.switch_at() - self.clock()), 0.0) or 0.01)
        if not self.switched and self.state.get("batches_done_at") is None:
            self._save(batches_done_at=self.clock())

    def _switch(self, why: str) -> None:
        if self.switched:
            return
        self.switched = True
        self._save(switched_at=self.clock(), switch_why=why, left_at_switch=self.left())

    def _settle_cancels(self) -> Iterator[DocOutcome]:
        """Cancel every live batch, then follow each until it has ended and collect it."""
        b = self.batches
        started = self.clock()
        for n in sorted(b.live):
            b.live[n] = self._cancel(b.live[n])
        while b.live:
            yield from b.poll_live()
            if b.live:
                self.sleep(min(self.poll, SETTLE_POLL))
        if self.state.get("cancel_seconds") is None and self.state.get("canceled"):
            self._save(cancel_seconds=round(self.clock() - started, 3))

    def _cancel(self, rec: BatchRecord) -> BatchRecord:
        api = self.batches.api
        asked = [bid for bid in rec.batch_ids if bid not in rec.canceled_ids and api.cancel(bid)]
        if not asked:
            return rec

        def fn(r: BatchRecord) -> None:
            r.canceled_ids.extend(asked)
            r.notes.append(f"canceled for the deadline {self.state['finish_by']}: the rest goes realtime")

        self._save(canceled=[*self.state["canceled"], *asked])
        return self.batches.records.update(rec.n, fn)

    def _send_realtime(self) -> Iterator[DocOutcome]:
        """What is left, realtime: no batch of this run is live any more."""
        b = self.batches
        assert not b.live
        items, b.pending = list(b.pending.values()), {}
        firsts = [Document.model_validate(i.doc) for i in items if i.request is None]
        follow = [i for i in items if i.request is not None]
        self._save(realtime=sorted({*self.state["realtime"], *(i.custom_id for i in items)}))
        if firsts:
            yield from self.realtime(firsts)
        for item in follow:
            yield b.router.finish_realtime(item)
        self._save(realtime_done_at=self.clock())


def run_deadline(
    docs: Iterable[Document],
    scope: RunScope,
    sdk: Callable[[], anthropic.Anthropic],
    *,
    expected: int,
    deadline: float,
    realtime: Realtime,
    requests_per_minute: float,
    measure: Callable[[], Pace] | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[DocOutcome]:
    """`tasks.batch.engine.run_batches` with a deadline (epoch seconds): one terminal `DocOutcome`
    per document, batch where it can finish in time, realtime near the deadline. Calling it again
    with the same run id resumes, as run_batches does (a switch already made stays made). `measure()`:
    the pace as known now (tasks.deadline.plan), asked again at every poll; else `requests_per_minute`
    and the configured answer time throughout."""
    settings = scope.settings
    conf = settings.deadline
    now = clock()
    plan = DeadlinePlan.make(
        deadline, now, margin=conf.margin_seconds, fraction=conf.margin_fraction, cancel=conf.cancel_seconds
    )
    api = settings.api
    in_flight = api.concurrency or WINDOW_MAX  # no ceiling: the window follows the limit (tasks.api.pacing)
    pace = Pace(requests_per_minute, in_flight, conf.latency_seconds, api.ramp_seconds, api.ramp_start)
    engine = DeadlineEngine(
        Pass.of(scope),
        sdk,
        plan=plan,
        pace=pace,
        expected=expected,
        realtime=realtime,
        clock=clock,
        sleep=sleep,
        measure=measure,
    )
    yield from engine.run(docs)

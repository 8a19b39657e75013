"""`--finish-by TIME`: the batch pass with a deadline (tasks.deadline), wired to this run: the
realtime per-file pass for the requests that will not finish as batches (chunks on a bounded pool,
each with its in-flight record, invariant 13), and the organisation's request limit that decides
how fast realtime can go (as the API's headers stated it: to this process, or to any process
sharing the limit through the store; else the configured one).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, ClassVar

from checkpoints.limits import LimitPool
from flows.run.context import limit_scope
from flows.run.modes import PassKind
from flows.run.passes import CHUNK_WORKERS, PendingChunks, write_batched
from flows.run.progress import Progress
from tasks.api.pacing import WINDOW_MAX
from tasks.deadline.engine import Realtime, run_deadline
from tasks.deadline.plan import Pace
from tasks.per_file.outcome import DocOutcome
from tasks.per_file.realtime import extract_recorded
from tasks.source.inventory import Document

if TYPE_CHECKING:
    from flows.run.context import RunContext


def org_limit(ctx: RunContext) -> tuple[float, str]:
    """The organisation's request limit as best known now, and where it comes from."""
    stated = ctx.client.limiter.stats.adopted.get("requests")
    if stated:
        return float(stated), "stated by the API's headers"
    shared_at = limit_scope(ctx)
    if shared_at is not None:
        shared = (LimitPool(*shared_at).read().get("limits") or {}).get("requests")
        if shared:
            return float(shared), "stated by the API's headers to a process sharing the limit"
    return float(ctx.settings.api.requests_per_minute), "configured, no answer seen yet"


def measured_pace(ctx: RunContext) -> Pace:
    """What realtime can do, from what has been measured as soon as there is any (tasks.deadline.plan)."""
    api, conf = ctx.settings.api, ctx.settings.deadline
    rpm, source = org_limit(ctx)
    seen = ctx.client.limiter.latency
    return Pace(
        rpm,
        api.concurrency or WINDOW_MAX,  # no ceiling: the window follows the limit (tasks.api.pacing)
        seen if seen is not None else conf.latency_seconds,
        api.ramp_seconds,
        api.ramp_start,
        limit_source=source,
        latency_source="measured" if seen is not None else "configured, no answer seen yet",
    )


def realtime_pass(ctx: RunContext, threads: int) -> Realtime:
    """The realtime per-file pass over a list of documents, chunk by chunk on `threads` threads."""

    def run(docs: list[Document]) -> Iterator[DocOutcome]:
        size = ctx.settings.chunk_size
        groups = [docs[i : i + size] for i in range(0, len(docs), size)]
        with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="docmill-deadline") as pool:
            futures = [pool.submit(_chunk, ctx, group) for group in groups]
            for future in as_completed(futures):
                yield from future.result()

    return run


def _chunk(ctx: RunContext, docs: list[Document]) -> list[DocOutcome]:
    group = "deadline-" + hashlib.sha256("\n".join(d.doc_id for d in docs).encode()).hexdigest()[:16]
    return extract_recorded(docs, group, ctx, settle=lambda _outcomes: True)


@dataclass(frozen=True)
class DeadlinePass:
    """The batch pass by `finish_by`: what cannot finish as batches goes realtime (tasks.deadline)
    on `threads` chunk threads."""

    finish_by: str
    threads: int = CHUNK_WORKERS
    kind: ClassVar[PassKind] = PassKind.DEADLINE

    def run(self, ctx: RunContext, pending: PendingChunks, bar: Progress) -> None:
        deadline = datetime.fromisoformat(self.finish_by).timestamp()

        def outcomes(docs: Iterator[Document], expected: int) -> Iterator[DocOutcome]:
            return run_deadline(
                docs,
                ctx,
                ctx.batch_sdk,
                expected=expected,
                deadline=deadline,
                realtime=realtime_pass(ctx, self.threads),
                requests_per_minute=org_limit(ctx)[0],
                measure=partial(measured_pace, ctx),
            )

        write_batched(ctx, pending, bar, outcomes)

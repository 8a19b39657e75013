"""One driver per run, one run per set of documents: the run's lease (renewed in the background,
taken over from a dead local holder) and the refusal of a second live run over the same documents
(`active/<run_id>.json` markers, checkpoints.active)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from checkpoints.active import ActiveRuns, sources_overlap
from checkpoints.lease import Lease, holder_is_dead_here, live_lease
from docmill.background import every
from docmill.errors import RunOverlap
from docmill.logs import get_logger
from flows.run.context import RunContext, RunParams, holder_id
from flows.run.continuation import source_id

log = get_logger("pipeline")
LEASE_TTL = 120.0
# run id -> (its lease, the lease's renewal): kept held by this process between a run's early
# submission (before Prefect's flow run exists, flows.run.early) and the flow run that continues it
_KEPT: dict[str, tuple[Any, ExitStack]] = {}


@contextmanager
def hold_lease(ctx: RunContext, *, keep: bool = False) -> Iterator[None]:
    """Hold the run's lease, renewed in the background; take over one left by a dead local process.
    `keep`: still held (and renewed) after the block, until the next `hold_lease` of the same run in
    this process takes it over; a lease kept by this process is taken over without asking the store."""
    kept = _KEPT.pop(ctx.run_id, None)
    if kept is not None:
        lease, renewal = kept
    else:
        lease = Lease(ctx.store, ctx.run_id, holder_id(), ttl_seconds=LEASE_TTL)
        lease.acquire(dead=holder_is_dead_here)  # a dead holder's lease is replaced by CAS, never deleted

        def renew() -> None:
            try:
                lease.renew()
            except Exception as exc:  # logged; the next renew or the release says more
                log.error("lease renewal failed: %s", exc)

        renewal = ExitStack()
        renewal.enter_context(every(LEASE_TTL / 4, renew, name="docmill-lease"))
    ended = False
    try:
        yield
        ended = True
    finally:
        if keep and ended:
            _KEPT[ctx.run_id] = (lease, renewal)
        else:
            renewal.close()
            lease.release()


def _refuse_overlap(ctx: RunContext, runs: Any, mine: dict[str, Any], *, marked: bool) -> None:
    """Raise `RunOverlap` if another live run of the same recipe and model covers the same
    documents. A stopped run (its lease is gone or its local holder died) does not block: it is
    continued by the same command (flows.run.continuation), and keeps its marker until it is done.
    With `marked` (both runs may have marked themselves at once) only the later of the two stops."""
    now = time.time()
    for run_id, other in runs.items():
        same = (other.get("recipe"), other.get("model")) == (mine["recipe"], mine["model"])
        overlap = sources_overlap(str(other.get("source") or ""), mine["source"])
        if run_id == ctx.run_id or not same or not overlap:
            continue
        lease = live_lease(ctx.store, run_id, now)
        if lease is None:
            continue
        if marked and (float(other.get("started_at") or 0), run_id) > (mine["started_at"], ctx.run_id):
            continue  # it started after us: it stops, we go on
        raise RunOverlap(
            f"run {run_id} ({other['recipe']}, {other['model']}, {other['source']}) is in progress over "
            f"the same documents; a second run would pay for them twice",
            hint="wait for it (`docmill status " + run_id + "`), or set DOCMILL_ALLOW_OVERLAPPING_RUNS=true",
            run_id=run_id,
            holder=lease.get("holder"),
        )


@contextmanager
def announced(ctx: RunContext, params: RunParams, *, keep: bool = False) -> Iterator[None]:
    """Mark the run active (`active/<run_id>.json`) until it is done, after making sure no other
    live run of the same recipe and model covers the same source: a nightly run started while the
    last backfill still has batches in flight would otherwise pay for their documents twice. A run
    that stops before it is done (crash, error, budget) keeps its marker: it is a stopped run, which
    the same `docmill run` continues (flows.run.continuation.stopped_runs).
    Best effort across machines (two runs starting in the same instant both see each other after
    marking, and the later one stops). DOCMILL_ALLOW_OVERLAPPING_RUNS=true skips the check. `keep`:
    the marker stays after the block (the run goes on in this process: flows.run.early)."""
    runs = ActiveRuns(ctx.store)
    mine = {
        "recipe": params.recipe,
        "model": ctx.settings.api.model,
        "source": source_id(params.source),
        "started_at": time.time(),
    }
    if ctx.settings.allow_overlapping_runs:
        yield
        return
    _refuse_overlap(ctx, runs, mine, marked=False)
    runs.mark(ctx.run_id, mine)
    try:
        _refuse_overlap(ctx, runs, mine, marked=True)
    except RunOverlap:
        runs.unmark(ctx.run_id)  # refused before it started: nothing to continue
        raise
    yield
    if not keep:
        runs.unmark(ctx.run_id)  # done; a run that stopped on an exception keeps its marker

"""The shard worker: one process of a run spread over Prefect workers (`docmill run --workers N`).

It takes the run's own settings from its manifest (the driver's keys, requests and prices), joins
the organisation's shared rate limit, and claims shards of the run's current generation
(checkpoints.shards) one at a time until none is left: claim (a lease, renewed in the background)
-> the shard's unfinished chunks as Prefect tasks -> shard done -> next claim.

A dead worker's shard is claimed again once its lease lapses (at once when its process is known dead
on this machine); finished chunks are skipped and finished documents are free ledger hits, so only
the requests in flight at the death are sent again (invariant 3). A worker with nothing to claim
while others hold shards waits and looks again: one of them may die. The run's cost cap is shared
out in grants (checkpoints.allowance), taken before each shard; when nothing is left every worker
stops (`stop.json`), as on a systemic failure; the driver's Ctrl-C stops their sending too.
"""

from __future__ import annotations

import os
import socket
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NONE
from prefect.task_runners import ThreadPoolTaskRunner

from checkpoints.allowance import Allowance
from checkpoints.chunks import InventoryChunks
from checkpoints.costs import CostLedger
from checkpoints.lease import holder_is_dead_here
from checkpoints.manifest import ManifestStore
from checkpoints.outcomes import OutcomeLog
from checkpoints.shards import STOP_INTERRUPTED, ShardTable, WorkerLog
from checkpoints.store import open_store
from docmill.background import every
from docmill.errors import BudgetExhausted, DocmillError, Interrupted, SystemicFailure
from docmill.logs import bind_run, get_logger, to_prefect_run
from docmill.settings import Settings, get_settings
from docmill.shutdown import SHUTDOWN, install
from flows.run.context import (
    RunContext,
    api_endpoint,
    holder_id,
    make_clients,
    record_possibly_billed,
    share_limit,
)
from flows.run.continuation import pinned_settings
from flows.run.passes import (
    CHUNK_WORKERS,
    Chunk,
    ChunkFn,
    MapChunks,
    chunk_label,
    plain_map,
    review_one_chunk,
)
from tasks.cost.worst_case import in_flight_usd
from tasks.per_file.realtime import feed
from tasks.recipes import load_recipe
from tasks.source.inventory import Document

log = get_logger("flows")
RUNNER: Any = ThreadPoolTaskRunner(max_workers=CHUNK_WORKERS)  # always bounded, as the run flows' runner


def work_shards(
    run_id: str,
    generation: int,
    *,
    store: str | None = None,
    name: str | None = None,
    settings: Settings | None = None,
    map_chunks: MapChunks = plain_map,
) -> dict[str, Any]:
    """Claim and work shards of `run_id`'s generation until none is left; returns what it did."""
    base = settings or get_settings()
    if store:
        base = base.model_copy(update={"store": store})
    st = open_store(base.store, endpoint_url=base.s3_endpoint_url)
    manifest = ManifestStore(st).load(run_id)
    run_settings, _ = pinned_settings(base, manifest)

    name = name or os.environ.get("PREFECT__WORKER_NAME") or f"{socket.gethostname()}:{os.getpid()}"
    bind_run(run_id)
    with api_endpoint(run_settings, quiet=True, store=st) as endpoint:
        client, sdk = make_clients(run_settings, endpoint)
        recipe = load_recipe(manifest.recipe)
        ctx = RunContext(
            recipe=recipe,
            run_id=run_id,
            store=st,
            client=client,
            settings=run_settings,
            endpoint=endpoint,
            batch_sdk=sdk,
        )
        client.on_possibly_billed = partial(record_possibly_billed, CostLedger(st, run_id))
        worker = ShardWorker(ctx, ShardTable(st, run_id, generation), name, map_chunks)
        try:
            with share_limit(ctx, name=name):
                return worker.run()
        finally:
            client.close()


class ShardWorker:
    def __init__(self, ctx: RunContext, table: ShardTable, name: str, map_chunks: MapChunks) -> None:
        self.ctx, self.table, self.name, self.map_chunks = ctx, table, name, map_chunks
        self.conf = ctx.settings.workers
        self.holder = f"{holder_id()}:{name}"
        self.workers = WorkerLog(ctx.store, ctx.run_id)
        self.shards: list[str] = []
        self.docs = 0
        self.started = time.time()
        self.allowance = Allowance(ctx.store, ctx.run_id, table.gen)
        self.workers_planned = int(table.workers() or 1)
        self.spent_out = False  # its grant is spent and the others hold the rest: it leaves
        budget = getattr(ctx.client, "budget", None)
        self.budget = budget if budget is not None and budget.cap_usd is not None else None  # capped
        if self.budget is not None:  # this worker's own spending, within its grants
            self.budget.spent_usd, self.budget.cap_usd = 0.0, 0.0

    def beat(self, current: str | None = None) -> None:
        from prefect.runtime import flow_run

        self.workers.beat(
            self.holder,
            {
                "name": self.name,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "flow_run_id": str(flow_run.id) if flow_run.id else None,
                "generation": self.table.gen,
                "started_at": self.started,
                "heartbeat_at": time.time(),
                "shard": current,
                "shards_done": list(self.shards),
                "docs": self.docs,
            },
        )

    def run(self) -> dict[str, Any]:
        plan = self.table.plan()
        while not self.spent_out:
            SHUTDOWN.check()
            if self.table.stopped():
                break
            sid = self.table.claim(self.holder, self.name, self.conf.claim_seconds, dead=holder_is_dead_here)
            if sid is None:
                if len(self.table.done()) >= len(plan):
                    break  # every shard is done
                self.beat()
                time.sleep(self.conf.poll_seconds)  # the others' shards: one of them may die
                continue
            self.work(sid, plan[sid])
        self.beat()
        if self.budget is not None:
            self.allowance.give_back(self.holder, self.budget.spent_usd)
        return {"worker": self.name, "shards": self.shards, "docs": self.docs}

    def grant(self, docs: list[dict[str, Any]] | None = None) -> str:
        """Report this worker's spending and take its share of what is left of the run's cost cap
        (checkpoints.allowance): "more" when the grant grew, "others" when only other live workers
        still hold unspent grants, "none" when nothing is left to spend."""
        budget = self.budget
        if budget is None:
            return "none"
        need = 0.0
        if docs:  # what this worker's requests in flight can cost at once (checkpoints.inflight)
            need = in_flight_usd(
                [Document.model_validate(d) for d in docs], self.ctx.recipe, self.ctx.settings
            )
        granted, others = self.allowance.take(
            self.holder,
            budget.spent_usd,
            workers=self.workers_planned,
            need=need,
            lease_seconds=self.conf.claim_seconds,
        )
        step = max(0.01 * float(self.ctx.settings.cost.max_cost_usd or 0.0), 1e-9)  # less: not worth a try
        grew = granted > budget.cap_usd + step
        budget.cap_usd = granted  # this process spends only what it was granted
        return "more" if grew else ("others" if others > step else "none")

    def work(self, sid: str, chunk_ids: list[str]) -> None:
        ctx = self.ctx
        done = OutcomeLog(ctx.store, ctx.run_id).chunks_done()
        chunks = InventoryChunks(ctx.store, ctx.run_id)
        todo = [(cid, chunks.load(cid)) for cid in chunk_ids if cid not in done]
        self.grant([d for _, docs in todo for d in docs])
        self.beat(sid)
        try:
            with self.keep(sid):
                # handed out as this worker's window wants documents (as in one process)
                handed = feed(todo, ctx.client, ctx.settings)
                results = self.map_chunks(partial(review_one_chunk, ctx), handed)
        except SystemicFailure as e:  # a spend limit too: every worker would meet it
            self.table.stop("systemic", e.one_line(), by=self.name)
            self.table.release(sid, self.holder)
            raise
        except BaseException:
            self.table.release(sid, self.holder)  # another worker takes it at once
            raise
        if any(r.get("budget") for r in results):
            self.table.release(sid, self.holder)  # not done: its unfinished chunks are worked again
            left = self.grant([d for _, docs in todo for d in docs])
            if left == "others":  # the others may still finish the shards with their grants
                self.spent_out = True
            elif left == "none":  # nothing left of the run's cap: every worker stops
                self.table.stop("budget", f"worker {self.name} reached the run's cost cap", by=self.name)
            return
        counts: Counter[str] = Counter()
        for r in results:
            counts.update(r)
        docs = sum(len(d) for _, d in todo)
        self.table.finish(sid, self.holder, self.name, counts, docs)
        self.shards.append(sid)
        self.docs += docs
        self.beat()

    @contextmanager
    def keep(self, sid: str) -> Iterator[None]:
        """Renew the claim every quarter of its lease, beat, and watch for a stop of every worker."""
        ttl = self.conf.claim_seconds
        last = [time.monotonic()]

        def tick() -> None:
            try:
                halt = self.table.stopped()
                if halt and halt.get("kind") == STOP_INTERRUPTED:
                    SHUTDOWN.request("SIGINT")  # the driver was stopped: no new request from here
                if time.monotonic() - last[0] < ttl / 4:
                    return
                last[0] = time.monotonic()
                if not self.table.renew(sid, self.holder, ttl):
                    log.error(
                        "shard %s: claim lost; another worker has it (renewals failed for %.0fs)", sid, ttl
                    )
                self.beat(sid)
            except Exception as e:  # the next try may pass; the lease is four renewals long
                log.error("shard %s: claim renewal failed: %s", sid, e)

        with every(min(self.conf.poll_seconds, ttl / 4), tick, name="docmill-shard-claim"):
            yield


@task(name="shard-chunk", task_run_name="shard-chunk {label}", cache_policy=NONE, retries=0)
def shard_chunk(fn: Any, cid: str, docs: list[dict[str, Any]], label: str = "") -> dict[str, int]:
    """One chunk of a shard. Unlike the one-process runs' chunk tasks it takes no slot of the chunk
    limit (DOCMILL_CHUNK_LIMIT_NAME): a worker that dies would hold its slots for good (Prefect frees
    a global concurrency slot only when the holder releases it) and stall every other worker; the
    shared rate limit paces these chunks instead."""
    return dict(fn(cid, docs))


def shard_map(fn: ChunkFn, chunks: Iterable[Chunk]) -> list[dict[str, int]]:
    """A shard's chunks as Prefect task runs on the flow's bounded runner, submitted as handed out."""
    futures = [shard_chunk.submit(fn, cid, docs, label=chunk_label(cid, docs)) for cid, docs in chunks]
    return [f.result() for f in futures]


@flow(
    name="shard-worker",
    task_runner=RUNNER,
    log_prints=False,
    retries=Settings().flow_retries,  # as the run flows' (flows.orchestration.prefect_flows)
    retry_delay_seconds=Settings().flow_retry_delay_seconds,
)
def shard_worker(run_id: str, generation: int, store: str | None = None) -> dict[str, Any]:
    """Work shards of one spread run (launched by its driver; see flows.workers.spread). A retry of this
    flow run claims shards again; what was done is skipped."""
    restore = install(get_settings().shutdown_grace_seconds)
    with to_prefect_run():
        try:
            return work_shards(run_id, generation, store=store, map_chunks=shard_map)
        except (BudgetExhausted, Interrupted) as e:
            return {"stopped": e.one_line()}
        except DocmillError as e:
            log.error("docmill: shard worker of run %s: %s", run_id, e.one_line())
            raise
        finally:
            restore()

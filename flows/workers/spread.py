"""The driver's side of `docmill run SOURCE --workers N`: one docmill run (one lease, one run id),
its per-file pass spread over N shard workers (flows.workers.shard_worker) that idle Prefect
workers of the work pool pick up.

The driver inventories, plans the chunks into shards (`settings.workers.shards_per_worker` per
worker), launches N runs of the shard-worker deployment and waits, showing progress; if every worker
it launched is gone (ended, or silent past a claim's lease) while shards are left, it launches N
again. Then the pipeline goes on as in one process (duplicates, one integration pass, the report),
and a budget stop or a systemic failure in any worker ends the pass as it would there. Run again
after a crash of the driver, it continues the unfinished generation of shards (never planned again).
`Launcher` starts workers: `PrefectLauncher` through the Prefect API; tests use threads.
"""

from __future__ import annotations

import secrets
import sys
import time
from collections.abc import Iterable
from typing import Any, Protocol

from checkpoints.allowance import Allowance
from checkpoints.chunks import DUP_PREFIX, InventoryChunks
from checkpoints.outcomes import OutcomeLog
from checkpoints.shards import STOP_INTERRUPTED, ShardTable, WorkerLog, plan_shards
from docmill.errors import InputError, Interrupted, SystemicFailure
from docmill.logs import get_logger
from docmill.shutdown import SHUTDOWN
from flows.run.context import RunContext
from flows.run.passes import Chunk, ChunkFn, MapChunks, spent_usd

log = get_logger("flows")
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


class Launcher(Protocol):
    def launch(self, run_id: str, generation: int, store: str, key: str) -> str:
        """Start one shard worker; returns a handle (a flow run id)."""

    def gone(self, handle: str) -> bool:
        """True once that worker has ended (finished, failed, crashed, cancelled)."""

    def cancel(self, handle: str) -> None:
        """A worker that has not started and is not needed any more."""


class PrefectLauncher:
    """Shard workers as runs of a deployment (`settings.workers.deployment`) on the work pool."""

    def __init__(self, deployment: str) -> None:
        self.deployment = deployment

    @staticmethod
    def needs_server() -> None:
        """A Prefect server to launch on (PREFECT_API_URL), or one line saying so (exit 2)."""
        from prefect.settings import PREFECT_API_URL

        if not PREFECT_API_URL.value():
            raise InputError(
                "--workers needs a Prefect server with workers: PREFECT_API_URL is not set",
                hint="start one with deploy/ (deploy/README.md), or run without --workers",
            )

    def check(self) -> None:
        """A Prefect server and the deployment, or one line saying what to set up (exit 2)."""
        from prefect.client.orchestration import get_client
        from prefect.exceptions import ObjectNotFound

        self.needs_server()
        try:
            with get_client(sync_client=True) as client:
                client.read_deployment_by_name(self.deployment)
        except ObjectNotFound:
            raise InputError(
                f"--workers needs the Prefect deployment {self.deployment!r}, which is not registered",
                hint="`prefect deploy --all --prefect-file deploy/prefect.yaml` from the repository root",
            ) from None

    def launch(self, run_id: str, generation: int, store: str, key: str) -> str:
        from prefect.deployments import run_deployment

        run = run_deployment(
            self.deployment,
            parameters={"run_id": run_id, "generation": generation, "store": store},
            timeout=0,
            idempotency_key=key,
            flow_run_name=f"{run_id}-g{generation}-{key.rsplit(':', 1)[-1]}",
            tags=["docmill", "shard-worker"],
        )
        return str(run.id)  # type: ignore[union-attr]  # sync here: run_deployment dispatches

    def _state(self, handle: str) -> str | None:
        from uuid import UUID

        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            run = client.read_flow_run(UUID(handle))
        return run.state.type.value if run.state else None

    def gone(self, handle: str) -> bool:
        return self._state(handle) in TERMINAL

    def cancel(self, handle: str) -> None:
        from uuid import UUID

        from prefect.client.orchestration import get_client
        from prefect.states import Cancelled

        if self._state(handle) not in ("SCHEDULED", "PENDING"):
            return  # started: it ends by itself once every shard is done
        with get_client(sync_client=True) as client:
            client.set_flow_run_state(UUID(handle), Cancelled(message="every shard was done"), force=True)


class Spread:
    """One per-file pass (its first wave) spread over workers."""

    def __init__(self, ctx: RunContext, workers: int, launcher: Launcher, *, progress: bool = True) -> None:
        self.ctx, self.workers, self.launcher, self.progress = ctx, workers, launcher, progress
        self.conf = ctx.settings.workers
        self.nonce = secrets.token_hex(3)  # this driver's life: its launches are its own
        self.launched: list[str] = []

    def generation(self, chunk_ids: list[str]) -> ShardTable:
        """The unfinished generation to continue, or a new one over `chunk_ids`."""
        store, run_id = self.ctx.store, self.ctx.run_id
        gens = ShardTable.generations(store, run_id)
        if gens:
            last = ShardTable(store, run_id, gens[-1])
            stop = last.stopped()
            if (stop is None or stop.get("kind") == STOP_INTERRUPTED) and len(last.done()) < len(last.plan()):
                if stop is not None:
                    last.resume()  # its claims still keep a worker that is finishing from a second one
                return last
        table = ShardTable(store, run_id, (gens[-1] + 1) if gens else 1)
        cap = self.ctx.settings.cost.max_cost_usd
        if cap is not None:  # the workers share what is left of the cap (checkpoints.allowance)
            Allowance(store, run_id, table.gen).create(cap, spent_usd(self.ctx))
        table.create(plan_shards(chunk_ids, self.workers * self.conf.shards_per_worker), self.workers)
        return table

    def launch(self, table: ShardTable) -> None:
        for _ in range(self.workers):
            key = f"docmill:{self.ctx.run_id}:{table.gen}:{self.nonce}:{len(self.launched) + 1}"
            self.launched.append(
                self.launcher.launch(self.ctx.run_id, table.gen, self.ctx.settings.store, key)
            )

    def alive(self, table: ShardTable) -> int:
        """Launched workers that may still work: not ended, and not silent past a claim's lease."""
        beats = {
            w.get("flow_run_id"): float(w.get("heartbeat_at") or 0)
            for w in WorkerLog(self.ctx.store, self.ctx.run_id).all()
        }
        now, ttl = time.time(), self.conf.claim_seconds
        return sum(
            1 for h in self.launched if not self.launcher.gone(h) and (h not in beats or now - beats[h] < ttl)
        )

    def run(self, chunks: list[tuple[str, list[dict[str, Any]]]]) -> list[dict[str, int]]:
        table = self.generation([cid for cid, _ in chunks])
        plan = table.plan()
        size = {cid: len(docs) for cid, docs in chunks}
        for cids in plan.values():  # a continued generation may hold chunks done since
            for cid in cids:
                size.setdefault(cid, len(InventoryChunks(self.ctx.store, self.ctx.run_id).load(cid)))
        total = sum(size[c] for cids in plan.values() for c in cids)
        self.say(
            f"docmill: run {self.ctx.run_id}: {len(plan)} shards of {total} documents for {self.workers} workers (generation {table.gen})"
        )
        self.launch(table)
        try:
            stop = self.wait(table, plan, size, total)
        except (Interrupted, KeyboardInterrupt):
            table.stop(STOP_INTERRUPTED, "the driver was interrupted", by="driver")
            raise
        finally:
            for handle in self.launched:
                try:
                    self.launcher.cancel(handle)
                except Exception as e:  # a queued run left behind only finds nothing to do
                    log.warning("could not cancel shard worker %s: %s", handle, e)
        if stop is not None:
            if stop.get("kind") == "systemic":
                raise SystemicFailure(
                    str(stop.get("message")), hint="`docmill resume RUN_ID` once it is fixed"
                )
            return [{"budget": 1}]
        return [dict(d.get("counts") or {}) for d in table.done().values()]

    def wait(
        self, table: ShardTable, plan: dict[str, list[str]], size: dict[str, int], total: int
    ) -> dict[str, Any] | None:
        last_line = ""
        while True:
            SHUTDOWN.check()
            stop = table.stopped()
            if stop is not None and stop.get("kind") != STOP_INTERRUPTED:
                return stop
            done = table.done()
            finished = OutcomeLog(self.ctx.store, self.ctx.run_id).chunks_done()
            docs = sum(size[c] for cids in plan.values() for c in cids if c in finished)
            if self.ctx.on_progress is not None:
                self.ctx.on_progress(docs, total)
            line = f"shards {len(done)}/{len(plan)} done, {docs}/{total} documents"
            if line != last_line:
                self.say(f"docmill: {line}", quiet=True)
                last_line = line
            if len(done) >= len(plan):
                return None
            if not self.alive(table):
                self.say(
                    f"docmill: no shard worker of run {self.ctx.run_id} is left; launching {self.workers} more"
                )
                self.launch(table)
            time.sleep(self.conf.poll_seconds)

    def say(self, line: str, *, quiet: bool = False) -> None:
        """A line for the log, and for the terminal unless `quiet` (progress lines: on a tty only)."""
        log.info("%s", line)
        if self.progress and (not quiet or sys.stderr.isatty()):
            print(line, file=sys.stderr)


def spread_map(ctx: RunContext, launcher: Launcher, *, local: MapChunks, progress: bool = True) -> MapChunks:
    """The run's MapChunks: originals spread over its `ctx.workers` workers, the duplicates' wave
    (ledger reads of their originals' results, nothing new sent) run here with `local`."""
    workers = int(ctx.workers or 1)

    def map_chunks(fn: ChunkFn, handed: Iterable[Chunk]) -> list[dict[str, int]]:
        chunks = list(handed)  # planned into shards at once: the workers' own windows pace them
        if not chunks:
            return []
        if all(cid.startswith(DUP_PREFIX) for cid, _ in chunks):
            return local(fn, chunks)
        return Spread(ctx, workers, launcher, progress=progress).run(chunks)

    return map_chunks

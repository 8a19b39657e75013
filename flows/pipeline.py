"""The run driver: phases in order, each resumable from the store.

    created -> inventory -> per_file -> integration -> report -> done

The manifest in the store is the truth (compare-and-swap updates); a lease keeps one driver
per run. Inventory is written in chunks under runs/<id>/inventory/, outcomes per chunk under
runs/<id>/outcomes/, so a resumed run redoes only chunks with no outcome file, and inside
those, documents whose idempotency key is in the ledger cost no API call.

`map_chunks` is how chunks run: a plain loop here, Prefect tasks in flows/extract.py.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from checkpoints.manifest import ManifestStore, Phase, RunManifest, redact
from docmill.errors import ConfigError, LeaseHeld
from docmill.logs import bind_run, get_logger
from flows.context import RunContext

log = get_logger("pipeline")
ChunkFn = Callable[[str, list[dict[str, Any]]], dict[str, int]]
MapChunks = Callable[[ChunkFn, list[tuple[str, list[dict[str, Any]]]]], list[dict[str, int]]]


@dataclass
class RunParams:
    source: str
    recipe: str
    mode: str = "realtime"
    run_id: str | None = None


def chunk_id(n: int) -> str:
    return f"{n:06d}"


def plain_map(fn: ChunkFn, chunks: list[tuple[str, list[dict[str, Any]]]]) -> list[dict[str, int]]:
    return [fn(cid, docs) for cid, docs in chunks]


class Progress:
    """One line on stderr, rewritten in place on a terminal, every few percent elsewhere."""

    def __init__(self, total: int, label: str, enabled: bool = True) -> None:
        self.total, self.label, self.done, self.enabled = total, label, 0, enabled
        self.started = time.monotonic()
        self._last = -1

    def add(self, n: int) -> None:
        self.done += n
        if not self.enabled or not self.total:
            return
        pct = int(100 * self.done / self.total)
        tty = sys.stderr.isatty()
        if tty or pct // 10 != self._last // 10 or self.done == self.total:
            rate = self.done / max(time.monotonic() - self.started, 1e-6)
            bar = "#" * (pct // 5) + "." * (20 - pct // 5)
            end = "\r" if tty and self.done < self.total else "\n"
            print(
                f"{self.label} [{bar}] {self.done}/{self.total} docs {rate:.1f}/s", end=end, file=sys.stderr
            )
            self._last = pct


def write_inventory(ctx: RunContext, source: str) -> list[str]:
    """Inventory the source once per run, in chunk files; a resume reads them back."""
    from tasks.inventory import inventory

    ids: list[str] = []
    existing = list(ctx.store.list(f"runs/{ctx.run_id}/inventory/"))
    if existing:
        return sorted(k.rsplit("/", 1)[-1].removesuffix(".json") for k in existing)
    chunk: list[dict[str, Any]] = []
    for doc in inventory(source, ctx.settings, doc_types=ctx.recipe.doc_types):
        chunk.append(doc.model_dump(mode="json"))
        if len(chunk) >= ctx.settings.chunk_size:
            ids.append(_put_chunk(ctx, len(ids), chunk))
            chunk = []
    if chunk:
        ids.append(_put_chunk(ctx, len(ids), chunk))
    return ids


def _put_chunk(ctx: RunContext, n: int, docs: list[dict[str, Any]]) -> str:
    cid = chunk_id(n)
    ctx.store.put_json(f"runs/{ctx.run_id}/inventory/{cid}.json", docs)
    return cid


def load_chunk(ctx: RunContext, cid: str) -> list[dict[str, Any]]:
    return list(ctx.store.get_json(f"runs/{ctx.run_id}/inventory/{cid}.json"))


def start_manifest(ctx: RunContext, params: RunParams) -> RunManifest:
    manifests = ManifestStore(ctx.store)
    try:
        m = manifests.load(ctx.run_id)
    except Exception:
        m = None
    if m is None:
        config = redact(ctx.settings.model_dump(mode="json"))
        m = RunManifest(
            run_id=ctx.run_id,
            source=params.source,
            recipe=params.recipe,
            recipe_version=ctx.recipe.version,
            mode=params.mode,
            config=config,
            budget_usd=ctx.settings.cost.max_cost_usd,
        )
        manifests.create(m)
    elif m.recipe != params.recipe or m.source != params.source:
        raise ConfigError(
            f"run {ctx.run_id} was started with source {m.source!r} and recipe {m.recipe!r}",
            hint="resume it with `docmill resume RUN_ID`, or start a new run without --run-id",
        )
    return m


def set_phase(ctx: RunContext, phase: Phase, **counts: Any) -> RunManifest:
    def fn(m: RunManifest) -> RunManifest:
        m.phase = phase
        m.counts.update({k: int(v) for k, v in counts.items()})
        return m

    return ManifestStore(ctx.store).update(ctx.run_id, fn)


def all_outcomes(ctx: RunContext) -> list[dict[str, Any]]:
    from checkpoints.outcomes import OutcomeLog

    return sorted(OutcomeLog(ctx.store, ctx.run_id).all(), key=lambda o: o["doc_id"])


def review_one_chunk(ctx: RunContext, cid: str, docs: list[dict[str, Any]]) -> dict[str, int]:
    """Per-file pass over one chunk (realtime); outcomes written once per chunk."""
    from checkpoints.outcomes import OutcomeLog
    from tasks.inventory import Document
    from tasks.review import review_chunk

    outcomes = review_chunk(
        [Document.model_validate(d) for d in docs],
        recipe=ctx.recipe,
        run_id=ctx.run_id,
        store=ctx.store,
        client=ctx.client,
        settings=ctx.settings,
    )
    records = [o.model_dump(mode="json") for o in outcomes]
    OutcomeLog(ctx.store, ctx.run_id).write_chunk(cid, records)
    counts: dict[str, int] = {}
    for r in records:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    return counts


def per_file_pass(
    ctx: RunContext, params: RunParams, chunk_ids: list[str], map_chunks: MapChunks, progress: bool = True
) -> None:
    from checkpoints.outcomes import OutcomeLog

    done = OutcomeLog(ctx.store, ctx.run_id).chunks_done()
    pending = [(cid, load_chunk(ctx, cid)) for cid in chunk_ids if cid not in done]
    total = sum(len(d) for _, d in pending)
    bar = Progress(total, "per-file pass", enabled=progress)
    if params.mode == "batch":
        from tasks.batch import run_batches
        from tasks.inventory import Document

        docs = [Document.model_validate(d) for _, chunk in pending for d in chunk]
        outcomes = {
            o.doc_id: o
            for o in run_batches(
                docs,
                recipe=ctx.recipe,
                run_id=ctx.run_id,
                store=ctx.store,
                client=ctx.sdk,
                settings=ctx.settings,
                model_client=ctx.client,
            )
        }
        for cid, chunk in pending:
            records = [outcomes[d["doc_id"]].model_dump(mode="json") for d in chunk]
            OutcomeLog(ctx.store, ctx.run_id).write_chunk(cid, records)
            bar.add(len(chunk))
        return

    def fn(cid: str, docs: list[dict[str, Any]]) -> dict[str, int]:
        counts = review_one_chunk(ctx, cid, docs)
        bar.add(len(docs))
        return counts

    map_chunks(fn, pending)


LEASE_TTL = 120.0


def _holder_is_dead_here(holder: str | None) -> bool:
    """A lease left by a crashed process on this machine can be taken over at once."""
    import os
    import socket

    host, _, rest = (holder or "").partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@contextmanager
def hold_lease(ctx: RunContext) -> Iterator[None]:
    """Hold the run's lease, renewed in the background; take over one left by a dead local process."""
    from checkpoints.lease import Lease
    from flows.context import holder_id

    lease = Lease(ctx.store, ctx.run_id, holder_id(), ttl_seconds=LEASE_TTL)
    try:
        lease.acquire()
    except LeaseHeld as e:
        if not _holder_is_dead_here(getattr(e, "holder", None)):
            raise
        log.warning("taking over the lease of a dead process: %s", getattr(e, "holder", None))
        ctx.store.delete(f"runs/{ctx.run_id}/lease.json")
        lease.acquire()
    stop = threading.Event()

    def keep() -> None:
        while not stop.wait(LEASE_TTL / 4):
            try:
                lease.renew()
            except Exception as exc:  # logged; the next renew or the release says more
                log.error("lease renewal failed: %s", exc)

    keeper = threading.Thread(target=keep, name="docmill-lease", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join(timeout=5)
        lease.release()


def run(
    ctx: RunContext, params: RunParams, *, map_chunks: MapChunks = plain_map, progress: bool = True
) -> dict[str, Any]:
    """Drive one run to its end (or to the first phase that cannot finish) and return a summary."""
    from checkpoints.costs import CostLedger
    from tasks.integrate import integrate
    from tasks.report import export_rows, markdown, summarize, to_csv, to_jsonl, to_parquet

    bind_run(ctx.run_id)
    manifest = start_manifest(ctx, params)
    with hold_lease(ctx):
        set_phase(ctx, Phase.INVENTORY)
        chunk_ids = write_inventory(ctx, params.source)
        set_phase(ctx, Phase.PER_FILE, chunks=len(chunk_ids))
        per_file_pass(ctx, params, chunk_ids, map_chunks, progress)
        outcomes = all_outcomes(ctx)
        summary = summarize(outcomes)
        set_phase(ctx, Phase.INTEGRATION, documents=summary["documents"], **summary["states"])
        integration = integrate(
            outcomes,
            recipe=ctx.recipe,
            run_id=ctx.run_id,
            store=ctx.store,
            client=ctx.client,
            settings=ctx.settings,
        )
        set_phase(ctx, Phase.REPORT)
        costs = CostLedger(ctx.store, ctx.run_id).totals()
        manifest = ManifestStore(ctx.store).load(ctx.run_id)
        report = markdown({**manifest.model_dump(mode="json"), "phase": "done"}, outcomes, integration, costs)
        base = f"runs/{ctx.run_id}"
        ctx.store.put(f"{base}/report.md", report.encode())
        rows = export_rows(outcomes)
        ctx.store.put(f"{base}/exports/results.jsonl", to_jsonl(outcomes))
        ctx.store.put(f"{base}/exports/results.csv", to_csv(rows))
        parquet = to_parquet(rows)
        if parquet is not None:
            ctx.store.put(f"{base}/exports/results.parquet", parquet)

        def finish(m: RunManifest) -> RunManifest:
            m.phase = Phase.DONE
            m.cost_usd = float(costs.get("usd", 0.0))
            m.counts.update({"documents": summary["documents"], **summary["states"]})
            return m

        manifest = ManifestStore(ctx.store).update(ctx.run_id, finish)
    return {
        "run_id": ctx.run_id,
        "phase": str(manifest.phase),
        "states": summary["states"],
        "documents": summary["documents"],
        "from_ledger": summary["from_ledger"],
        "cost_usd": float(costs.get("usd", 0.0)),
        "conflicts": len(integration["checks"]["conflicts"]),
        "report": f"{ctx.store.uri.rstrip('/')}/{base}/report.md",
        "review_queue": f"{ctx.store.uri.rstrip('/')}/review/{ctx.run_id}/",
        "exports": f"{ctx.store.uri.rstrip('/')}/{base}/exports/",
    }


def documents_in(chunks: Iterable[list[dict[str, Any]]]) -> int:
    return sum(len(c) for c in chunks)

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
from docmill.errors import (
    BudgetExhausted,
    ConfigError,
    InputError,
    Interrupted,
    RunOverlap,
    SystemicFailure,
)
from docmill.logs import bind_run, get_logger
from docmill.settings import Settings
from flows.context import RunContext

log = get_logger("pipeline")
ChunkFn = Callable[[str, list[dict[str, Any]]], dict[str, int]]
Chunk = tuple[str, list[dict[str, Any]]]
MapChunks = Callable[[ChunkFn, Iterable[Chunk]], list[dict[str, int]]]


@dataclass
class RunParams:
    source: str
    recipe: str
    mode: str = "realtime"
    run_id: str | None = None


def chunk_id(n: int) -> str:
    return f"{n:06d}"


CHUNK_WORKERS = Settings().chunk_workers  # read once: the Prefect task runner is built at import


def plain_map(fn: ChunkFn, chunks: Iterable[Chunk]) -> list[dict[str, int]]:
    """Chunks on a bounded thread pool (the Prefect flows use a bounded task runner instead), taken
    from `chunks` as it hands them out: the realtime pass hands out a chunk when the client's window
    wants more documents (tasks.per_file.realtime.feed), so as many chunks run as the window needs."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=CHUNK_WORKERS, thread_name_prefix="docmill-chunk") as pool:
        return list(pool.map(lambda c: fn(*c), chunks))


OnProgress = Callable[[int, int], None]  # (documents done, total): e.g. a Prefect progress artifact


class Progress:
    """One line on stderr, rewritten in place on a terminal, every few percent elsewhere; and the
    same count handed to `listener` (called at the start and after every step, from any thread)."""

    def __init__(
        self, total: int, label: str, enabled: bool = True, listener: OnProgress | None = None
    ) -> None:
        self.total, self.label, self.done, self.enabled = total, label, 0, enabled
        self.started = time.monotonic()
        self._last = -1
        self._shown = -1  # the count last printed
        self._lock = threading.Lock()  # chunks finish on several threads
        self.listener = listener
        if listener is not None:
            listener(0, total)

    def add(self, n: int) -> None:
        with self._lock:
            self.done += n
            if self.listener is not None:
                self.listener(self.done, self.total)
            self._print()

    def finish(self) -> None:
        """A pass that ends early (a budget stop): its last count on a line of its own, so the bar
        does not end on an older figure (or mid-line on a terminal)."""
        with self._lock:
            if self.enabled and self.total and self._shown != self.done:
                self._last = -100  # print whatever the percentage
                self._print(final=True)

    def _print(self, final: bool = False) -> None:
        if not self.enabled or not self.total:
            return
        pct = int(100 * self.done / self.total)
        tty = sys.stderr.isatty()
        if tty or pct // 10 != self._last // 10 or self.done == self.total:
            rate = self.done / max(time.monotonic() - self.started, 1e-6)
            bar = "#" * (pct // 5) + "." * (20 - pct // 5)
            end = "\r" if tty and self.done < self.total and not final else "\n"
            print(
                f"{self.label} [{bar}] {self.done}/{self.total} docs {rate:.1f}/s", end=end, file=sys.stderr
            )
            self._last, self._shown = pct, self.done


def write_inventory(ctx: RunContext, source: str) -> list[str]:
    """Inventory the source once per run, in chunk files; a resume reads them back."""
    from tasks.inventory import inventory

    done_key = f"runs/{ctx.run_id}/inventory-done.json"
    if ctx.store.exists(done_key):
        return list(ctx.store.get_json(done_key)["chunks"])
    ids: list[str] = []  # a crash mid-inventory redoes it: chunk files are deterministic, put overwrites
    chunk: list[dict[str, Any]] = []
    dups: list[dict[str, Any]] = []
    size = ctx.settings.chunk_size
    count = 0
    for doc in inventory(source, ctx.settings, doc_types=ctx.recipe.doc_types):
        count += 1
        record = doc.model_dump(mode="json")
        (dups if doc.duplicate_of else chunk).append(record)
        if len(chunk) >= size:
            ids.append(_put_chunk(ctx, chunk_id(len(ids)), chunk))
            chunk = []
        if len(dups) >= size:
            ids.append(_put_chunk(ctx, DUP_PREFIX + chunk_id(len(ids)), dups))
            dups = []
    if chunk:
        ids.append(_put_chunk(ctx, chunk_id(len(ids)), chunk))
    if dups:
        ids.append(_put_chunk(ctx, DUP_PREFIX + chunk_id(len(ids)), dups))
    ctx.store.put_json(done_key, {"chunks": ids, "documents": count})
    return ids


DUP_PREFIX = "dup-"  # duplicate-content documents: resolved from their original after the first wave


def _put_chunk(ctx: RunContext, cid: str, docs: list[dict[str, Any]]) -> str:
    ctx.store.put_json(f"runs/{ctx.run_id}/inventory/{cid}.json", docs)
    return cid


def choose_mode(ctx: RunContext, params: RunParams) -> str:
    """--mode auto: the Batch API (half price, slower) from settings.batch.auto_threshold documents."""
    if params.mode != "auto":
        return params.mode
    n = int(ctx.store.get_json(f"runs/{ctx.run_id}/inventory-done.json").get("documents", 0))
    mode = "batch" if n >= ctx.settings.batch.auto_threshold else "realtime"
    ManifestStore(ctx.store).update(ctx.run_id, lambda m: m.model_copy(update={"mode": mode}))
    log.info("mode auto: %d documents -> %s", n, mode)
    return mode


def load_chunk(ctx: RunContext, cid: str) -> list[dict[str, Any]]:
    return list(ctx.store.get_json(f"runs/{ctx.run_id}/inventory/{cid}.json"))


def start_manifest(ctx: RunContext, params: RunParams) -> RunManifest:
    from flows.continuation import source_id

    manifests = ManifestStore(ctx.store)
    try:
        m = manifests.load(ctx.run_id)
    except Exception:
        m = None
    if m is None:
        config = redact(ctx.settings.model_dump(mode="json"))
        m = RunManifest(
            run_id=ctx.run_id,
            source=source_id(params.source),  # absolute: a resume from another folder finds it
            recipe=params.recipe,
            recipe_version=ctx.recipe.version,
            mode="realtime" if params.mode == "auto" else params.mode,  # auto is decided after inventory
            config=config,
            budget_usd=ctx.settings.cost.max_cost_usd,
            extra={"mode_asked": params.mode, **ctx.extra},  # ctx.extra: workers, finish_by
        )
        manifests.create(m)
    elif m.recipe != params.recipe or source_id(m.source) != source_id(params.source):
        raise ConfigError(
            f"run {ctx.run_id} was started with source {m.source!r} and recipe {m.recipe!r}",
            hint=f"resume it with `docmill resume {ctx.run_id}`, or start a new run without --run-id",
        )
    elif m.budget_usd != ctx.settings.cost.max_cost_usd:
        cap = ctx.settings.cost.max_cost_usd
        m = manifests.update(ctx.run_id, lambda x: x.model_copy(update={"budget_usd": cap}))
    if any(m.extra.get(k) != v for k, v in ctx.extra.items()):  # given anew to a continued run
        m = manifests.update(ctx.run_id, lambda x: x.model_copy(update={"extra": {**x.extra, **ctx.extra}}))
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
    from checkpoints.inflight import InFlight
    from checkpoints.outcomes import OutcomeLog
    from tasks.estimate import in_flight_bound
    from tasks.inventory import Document
    from tasks.per_file.realtime import extract_chunk

    documents = [Document.model_validate(d) for d in docs]
    inflight = InFlight(ctx.store, ctx.run_id)
    mark = inflight.open(cid, in_flight_bound(documents, ctx.recipe, ctx.settings))  # invariant 13
    try:
        outcomes = extract_chunk(
            documents,
            recipe=ctx.recipe,
            run_id=ctx.run_id,
            store=ctx.store,
            client=ctx.client,
            settings=ctx.settings,
        )
    except BaseException:
        inflight.close(mark)  # extract_chunk flushed the costs of every answer it got
        raise
    records = [o.model_dump(mode="json") for o in outcomes]
    stopped = any(r.get("failure_type") == "budget" for r in records)
    inflight.close(mark, settle=None if stopped else cid)  # whole: earlier lives are recounted
    if stopped:
        # not written: a resume redoes this chunk (finished documents are free ledger hits);
        # returned, not raised, so a Prefect chunk task ends quietly and the driver stops the run.
        # `answered`: its documents that got an answer (kept), as `docmill status` counts them.
        answered = sum(1 for r in records if r.get("failure_type") != "budget" and r.get("attempts"))
        return {"budget": 1, "answered": answered}
    OutcomeLog(ctx.store, ctx.run_id).write_chunk(cid, records)
    counts: dict[str, int] = {}
    for r in records:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    return counts


def spent_usd(ctx: RunContext) -> float:
    """What the run has paid as far as anyone can tell: its cost ledger plus the upper bound of
    requests a crash left in flight unrecorded (checkpoints.inflight)."""
    from checkpoints.costs import CostLedger
    from checkpoints.inflight import InFlight

    return (
        float(CostLedger(ctx.store, ctx.run_id).totals()["usd"])
        + InFlight(ctx.store, ctx.run_id).totals()["usd"]
    )


def budget_stop(ctx: RunContext, where: str, why: str | None = None) -> BudgetExhausted:
    spent = spent_usd(ctx)
    cap = ctx.settings.cost.max_cost_usd
    why = why or "the next request would pass"
    return BudgetExhausted(
        f"run {ctx.run_id} stopped {where}: {why} its cap of ${cap or 0:.4f} "
        f"(spent ${spent:.4f}); requests in flight were finished and everything is kept",
        hint=f"`docmill resume {ctx.run_id} --max-cost-usd <higher>` finishes it",
        spent_usd=spent,
        cap_usd=cap,
        run_id=ctx.run_id,
    )


def per_file_pass(
    ctx: RunContext, params: RunParams, chunk_ids: list[str], map_chunks: MapChunks, progress: bool = True
) -> None:
    from checkpoints.outcomes import OutcomeLog

    done = OutcomeLog(ctx.store, ctx.run_id).chunks_done()
    pending = [(cid, load_chunk(ctx, cid)) for cid in chunk_ids if cid not in done]
    total = sum(len(d) for _, d in pending)
    bar = Progress(total, "per-file pass", enabled=progress, listener=ctx.on_progress)
    if params.mode == "batch":
        from tasks.batch.budget import affordable_chunks
        from tasks.batch.engine import run_batches
        from tasks.inventory import Document

        spent = spent_usd(ctx)
        full = {cid: chunk for cid, chunk in pending}  # a chunk cut short by the cap is never written
        fit = affordable_chunks(
            pending, recipe=ctx.recipe, settings=ctx.settings, store=ctx.store, spent_usd=spent
        )
        pending = fit.chunks
        docs = (Document.model_validate(d) for _, chunk in pending for d in chunk)
        chunk_of = {d["doc_id"]: cid for cid, chunk in pending for d in chunk}
        sizes = {cid: len(full[cid]) for cid, _ in pending}
        order = {cid: [d["doc_id"] for d in full[cid]] for cid, _ in pending}
        buffered: dict[str, dict[str, dict[str, Any]]] = {}
        stopped = False
        if ctx.extra.get("finish_by"):  # batch what can finish in time, the rest realtime (flows.deadline)
            from flows.deadline import deadline_pass

            outcomes = deadline_pass(
                ctx,
                docs,
                expected=sum(sizes.values()),
                finish_by=ctx.extra["finish_by"],
                threads=CHUNK_WORKERS,
            )
        else:
            outcomes = run_batches(
                docs, recipe=ctx.recipe, run_id=ctx.run_id, store=ctx.store, client=ctx.sdk,
                settings=ctx.settings, model_client=ctx.client,
            )  # fmt: skip
        for o in outcomes:  # results arrive in any order: a chunk is written once all of it is in
            cid = chunk_of[o.doc_id]
            got = buffered.setdefault(cid, {})
            got[o.doc_id] = o.model_dump(mode="json")
            if len(got) < sizes[cid]:
                continue
            records = [got[doc_id] for doc_id in order[cid]]
            del buffered[cid]
            if any(r.get("failure_type") == "budget" for r in records):
                stopped = True  # not written: a resume redoes it; what is in flight still finishes
                continue
            OutcomeLog(ctx.store, ctx.run_id).write_chunk(cid, records)
            bar.add(len(records))
        if stopped:
            bar.finish()
            raise budget_stop(ctx, "during the batch pass")
        if not fit.complete:
            raise budget_stop(
                ctx, "before submitting the rest of the batch",
                f"{fit.left_documents} more request(s) with a worst case of ${fit.left_usd:.4f} (every "
                f"answer at max_tokens, input as cache writes; {len(pending)} chunk(s) with a worst case of "
                f"${fit.reserved_usd:.4f} went) would pass",
            )  # fmt: skip
        return

    def fn(cid: str, docs: list[dict[str, Any]]) -> dict[str, int]:
        counts = review_one_chunk(ctx, cid, docs)
        bar.add(counts["answered"] if counts.get("budget") else len(docs))  # as `docmill status` counts
        return counts

    from tasks.per_file.realtime import feed

    # Originals first, then the duplicates that take their results from the ledger.
    # A budget stop ends the pass before the duplicates' wave (their originals may have no result yet).
    for wave in (
        [c for c in pending if not c[0].startswith(DUP_PREFIX)],
        [c for c in pending if c[0].startswith(DUP_PREFIX)],
    ):
        if any(c.get("budget") for c in map_chunks(fn, feed(wave, ctx.client, ctx.settings))):
            bar.finish()
            raise budget_stop(ctx, "during the per-file pass")


LEASE_TTL = 120.0


@contextmanager
def hold_lease(ctx: RunContext) -> Iterator[None]:
    """Hold the run's lease, renewed in the background; take over one left by a dead local process."""
    from checkpoints.lease import Lease, holder_is_dead_here
    from flows.context import holder_id

    lease = Lease(ctx.store, ctx.run_id, holder_id(), ttl_seconds=LEASE_TTL)
    lease.acquire(dead=holder_is_dead_here)  # a dead holder's lease is replaced by CAS, never deleted
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


def _refuse_overlap(ctx: RunContext, runs: Any, mine: dict[str, Any], *, marked: bool) -> None:
    """Raise `RunOverlap` if another live run of the same recipe and model covers the same
    documents. A stopped run (its lease is gone or its local holder died) does not block: it is
    continued by the same command (flows.continuation), and keeps its marker until it is done. With `marked` (both runs may have marked themselves at once) only the later of the two stops."""
    from checkpoints.active import sources_overlap
    from checkpoints.lease import live_lease

    now = time.time()
    for run_id, other in runs.items():
        if run_id == ctx.run_id or (other.get("recipe"), other.get("model")) != (
            mine["recipe"],
            mine["model"],
        ):
            continue
        if not sources_overlap(str(other.get("source") or ""), mine["source"]):
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
def announced(ctx: RunContext, params: RunParams) -> Iterator[None]:
    """Mark the run active (`active/<run_id>.json`) until it is done, after making sure no other
    live run of the same recipe and model covers the same source: a nightly run started while the
    last backfill still has batches in flight would otherwise pay for their documents twice. A run
    that stops before it is done (crash, error, budget) keeps its marker: it is a stopped run, which
    the same `docmill run` continues (flows.continuation.stopped_run).
    Best effort across machines (two runs starting in the same instant both see each other after
    marking, and the later one stops). DOCMILL_ALLOW_OVERLAPPING_RUNS=true skips the check."""
    from checkpoints.active import ActiveRuns
    from flows.continuation import source_id

    runs = ActiveRuns(ctx.store)
    mine = {
        "recipe": params.recipe, "model": ctx.settings.api.model, "source": source_id(params.source),
        "started_at": time.time(),
    }  # fmt: skip
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
    runs.unmark(ctx.run_id)  # done; a run that stopped on an exception keeps its marker


def run(
    ctx: RunContext, params: RunParams, *, map_chunks: MapChunks = plain_map, progress: bool = True
) -> dict[str, Any]:
    """Drive one run to its end (or to the first phase that cannot finish) and return a summary."""
    from checkpoints.costs import CostLedger

    bind_run(ctx.run_id)
    refuse_empty(ctx, params)
    with hold_lease(ctx), announced(ctx, params):
        start_manifest(ctx, params)
        try:
            return _drive(ctx, params, map_chunks, progress)
        except (SystemicFailure, Interrupted) as e:
            again = stopped(ctx, e)
            if isinstance(again, SystemicFailure):  # the report says what stopped it (a Ctrl-C is quick)
                report_so_far(ctx, "the stop")
            raise again from e
        except BudgetExhausted as e:
            spent = float(CostLedger(ctx.store, ctx.run_id).totals()["usd"])
            stop = stop_note("budget", e.one_line(), f"docmill resume {ctx.run_id} --max-cost-usd <higher>")
            set_phase(ctx, Phase.BUDGET_EXHAUSTED)
            ManifestStore(ctx.store).update(
                ctx.run_id,
                lambda m: m.model_copy(update={"cost_usd": spent, "extra": {**m.extra, "stop": stop}}),
            )
            report_so_far(ctx, "the budget stop")
            raise


def stop_note(kind: str, error: str, command: str) -> dict[str, str]:
    """Why a run stopped and the command that continues it (manifest `extra.stop`: the report and
    `docmill status` show it)."""
    return {"kind": kind, "error": error, "continue": command}


def report_so_far(ctx: RunContext, what: str) -> None:
    """The report of what is done so far, for a run that stopped (a resume writes it again at the end)."""
    from tasks.reporting.report import write_report

    try:
        m = ManifestStore(ctx.store).load(ctx.run_id)
        write_report(ctx.store, m.model_dump(mode="json"), all_outcomes(ctx), None)
    except Exception as exc:  # the stop is what the user must see
        log.error("report after %s failed: %s", what, exc)


def refuse_empty(ctx: RunContext, params: RunParams) -> None:
    """A new run over a source with no files is a mistake (a wrong path or prefix), not a run of
    0 documents: InputError (exit 2) before anything is written, unless settings.allow_empty."""
    from tasks.inventory import source_is_empty

    if ctx.settings.allow_empty or ctx.store.exists(f"runs/{ctx.run_id}/inventory-done.json"):
        return
    if source_is_empty(params.source, ctx.settings):
        raise InputError(
            f"source {params.source!r} has no files",
            hint="check the folder or s3:// prefix (and DOCMILL_INVENTORY__INCLUDE/EXCLUDE), or pass --allow-empty",
        )


def stopped(ctx: RunContext, e: SystemicFailure | Interrupted) -> SystemicFailure | Interrupted:
    """Phase `stopped` for a systemic failure or a signal, with why (manifest `extra.stop`); the
    error again, naming this run's resume."""
    again = type(e)(
        f"run {ctx.run_id} stopped: {e.message}",
        hint=e.hint.replace("RUN_ID", ctx.run_id) if "RUN_ID" in e.hint else f"`docmill resume {ctx.run_id}`",
        **{**e.fields, "run_id": ctx.run_id},
    )
    kind = "signal" if isinstance(e, Interrupted) else "breaker"
    stop = stop_note(kind, again.one_line(), f"docmill resume {ctx.run_id}")

    def fn(m: RunManifest) -> RunManifest:
        return m.model_copy(update={"phase": Phase.STOPPED, "extra": {**m.extra, "stop": stop}})

    try:
        ManifestStore(ctx.store).update(ctx.run_id, fn)
    except Exception as exc:  # the stop is what the user must see
        log.error("could not mark run %s stopped: %s", ctx.run_id, exc)
    return again


def _drive(ctx: RunContext, params: RunParams, map_chunks: MapChunks, progress: bool) -> dict[str, Any]:
    from checkpoints.costs import CostLedger
    from flows.continuation import source_id
    from tasks.integration.run import integrate
    from tasks.reporting.report import write_report
    from tasks.reporting.summary import summarize

    budget = getattr(ctx.client, "budget", None)
    if (
        budget is not None
    ):  # a resumed run has spent what its cost ledger says, plus what a crash left in flight
        budget.spent_usd = spent_usd(ctx)
    set_phase(ctx, Phase.INVENTORY)
    chunk_ids = write_inventory(ctx, params.source)
    params.mode = choose_mode(ctx, params)
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
        source=source_id(params.source),
    )
    set_phase(ctx, Phase.REPORT)
    costs = CostLedger(ctx.store, ctx.run_id).totals()
    manifest = ManifestStore(ctx.store).load(ctx.run_id)
    base = f"runs/{ctx.run_id}"
    write_report(
        ctx.store, {**manifest.model_dump(mode="json"), "phase": "done"}, outcomes, integration, costs
    )

    def finish(m: RunManifest) -> RunManifest:
        m.phase = Phase.DONE
        m.extra.pop("stop", None)  # an earlier stop is over
        m.cost_usd = float(costs.get("usd", 0.0))
        m.counts.update(
            {"documents": summary["documents"], **summary["states"], "retryable": summary["retryable"]}
        )
        return m

    manifest = ManifestStore(ctx.store).update(ctx.run_id, finish)
    return {
        "run_id": ctx.run_id,
        "phase": str(manifest.phase),
        "states": summary["states"],
        "retryable": summary["retryable"],  # failed transiently: resume retries them (exit 3)
        "documents": summary["documents"],
        "from_ledger": summary["from_ledger"],
        "cost_usd": float(costs.get("usd", 0.0)),
        "conflicts": len(integration["checks"]["conflicts"]),
        "integration": integration["status"],
        "integration_problems": len(integration["problems"]),
        "report": f"{ctx.store.uri.rstrip('/')}/{base}/report.md",
        "review_queue": f"{ctx.store.uri.rstrip('/')}/review/{ctx.run_id}/",
        "exports": f"{ctx.store.uri.rstrip('/')}/{base}/exports/",
    }

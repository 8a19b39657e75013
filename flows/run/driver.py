"""The run driver: phases in order, each resumable from the store.

    created -> inventory -> per_file -> integration -> report -> done

The manifest in the store is the truth (compare-and-swap updates); a lease keeps one driver
per run. Inventory is written in chunks under runs/<id>/inventory/, outcomes per chunk under
runs/<id>/outcomes/, so a resumed run redoes only chunks with no outcome file, and inside
those, documents whose idempotency key is in the ledger cost no API call.

Phases are in this module; the per-file pass is flows.run.passes, the lease and the overlap check
flows.run.guard. `map_chunks` is how chunks run: a thread pool (flows.run.passes.plain_map), Prefect
tasks (flows.orchestration.chunk_tasks.prefect_map), shards over workers (flows.workers.spread).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from checkpoints.chunks import DUP_PREFIX, InventoryChunks, chunk_id
from checkpoints.costs import CostLedger
from checkpoints.manifest import ManifestStore, Phase, RunManifest, redact
from checkpoints.outcomes import OutcomeLog
from checkpoints.store import ObjectStore
from docmill.errors import BudgetExhausted, ConfigError, InputError, Interrupted, SystemicFailure
from docmill.logs import bind_run, get_logger
from docmill.settings import Settings
from flows.run.context import RunContext, RunParams
from flows.run.continuation import source_id
from flows.run.deadline import DeadlinePass
from flows.run.guard import announced, hold_lease
from flows.run.modes import PassKind, auto_line, choose, recorded
from flows.run.passes import BatchPass, FilePass, MapChunks, RealtimePass, per_file_pass, plain_map, spent_usd
from tasks.integration.run import integrate
from tasks.per_file.settle import Pass
from tasks.per_file.unchanged import remember_chunks, reuse_unchanged
from tasks.reporting.report import write_report
from tasks.reporting.summary import summarize
from tasks.request import answered_by
from tasks.source.inventory import inventory, source_is_empty
from tasks.source.known_files import known_files

log = get_logger("pipeline")


def write_inventory(ctx: RunContext, source: str) -> list[str]:
    """Inventory the source once per run, in chunk files; a resume reads them back. Files the last
    inventory of this source saw unchanged are not read again (tasks.source.known_files)."""
    chunks = InventoryChunks(ctx.store, ctx.run_id, source_id(source))  # shares the last one's files
    done = chunks.done()
    if done is not None:
        return list(done["chunks"])
    ids: list[str] = []  # a crash mid-inventory redoes it: chunk files are deterministic, put overwrites
    filling: dict[str, list[dict[str, Any]]] = {"": [], DUP_PREFIX: []}  # chunk id prefix -> records
    count = 0
    known = known_files(ctx.store, source_id(source), ctx.settings, ctx.recipe.doc_types)
    for doc in inventory(source, ctx.settings, doc_types=ctx.recipe.doc_types, known=known):
        count += 1
        prefix = DUP_PREFIX if doc.duplicate_of else ""
        filling[prefix].append(doc.model_dump(mode="json"))
        if len(filling[prefix]) >= ctx.settings.chunk_size:
            ids.append(chunks.put(prefix + chunk_id(len(ids)), filling[prefix]))
            filling[prefix] = []
    for prefix, records in filling.items():  # the last documents' chunk, then the duplicates'
        if records:
            ids.append(chunks.put(prefix + chunk_id(len(ids)), records))
    chunks.finish(ids, count)
    return ids


def choose_pass(ctx: RunContext, params: RunParams, *, map_chunks: MapChunks) -> FilePass:
    """The run's per-file pass once its inventory is written (flows.run.modes decides which),
    recorded in its manifest as `mode`. A continued run keeps the mode it asked first."""
    manifests = ManifestStore(ctx.store)
    m = manifests.load(ctx.run_id)
    asked = str(m.extra.get("mode_asked") or m.mode or params.mode)
    documents = int((InventoryChunks(ctx.store, ctx.run_id).done() or {}).get("documents", 0))
    kind = choose(
        asked, finish_by=ctx.finish_by, documents=documents, auto_threshold=ctx.settings.batch.auto_threshold
    )
    passes: dict[PassKind, Callable[[], FilePass]] = {
        PassKind.REALTIME: lambda: RealtimePass(map_chunks, submit_only=params.submit_only),
        PassKind.BATCH: lambda: BatchPass(submit_only=params.submit_only),
        PassKind.DEADLINE: lambda: DeadlinePass(str(ctx.finish_by)),
    }
    mode = recorded(kind)
    if m.mode != mode:
        manifests.update(ctx.run_id, lambda x: x.model_copy(update={"mode": mode}))
    if line := auto_line(asked, kind, documents):
        log.info("%s", line)
    return passes[kind]()


def start_manifest(ctx: RunContext, params: RunParams) -> RunManifest:
    manifests = ManifestStore(ctx.store)
    who = answered_by(ctx.settings).get("answered_by", "API")  # one run's answers come from one of them
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
            config=config,  # its `mode` is recorded once the pass is chosen (flows.run.modes)
            budget_usd=ctx.settings.cost.max_cost_usd,
            extra={"mode_asked": params.mode, "answered_by": who, **ctx.manifest_extra()},
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
    kept = ctx.manifest_extra()
    if any(m.extra.get(k) != v for k, v in kept.items()):  # given anew to a continued run
        m = manifests.update(ctx.run_id, lambda x: x.model_copy(update={"extra": {**x.extra, **kept}}))
    return m


def all_outcomes(ctx: RunContext) -> list[dict[str, Any]]:
    return sorted(OutcomeLog(ctx.store, ctx.run_id).all(), key=lambda o: o["doc_id"])


def run(
    ctx: RunContext, params: RunParams, *, map_chunks: MapChunks = plain_map, progress: bool = True
) -> dict[str, Any]:
    """Drive one run to its end (or to the first phase that cannot finish) and return a summary."""
    bind_run(ctx.run_id)
    keep = params.submit_only  # the run goes on in this process: its lease and marker stay
    with hold_lease(ctx, keep=keep), announced(ctx, params, keep=keep):
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
            command = f"docmill resume {ctx.run_id} --max-cost-usd <higher>"
            mark_stop(ctx, Phase.BUDGET_EXHAUSTED, "budget", e.one_line(), command, cost_usd=spent)
            report_so_far(ctx, "the budget stop")
            raise


def mark_stop(ctx: RunContext, phase: Phase, kind: str, error: str, command: str, **fields: Any) -> None:
    """The run's `phase` (and `fields`), with why it stopped and the command that continues it
    (manifest `extra.stop`: the report and `docmill status` show it)."""
    stop = {"kind": kind, "error": error, "continue": command}
    update = {"phase": phase, **fields}
    ManifestStore(ctx.store).update(
        ctx.run_id, lambda m: m.model_copy(update={**update, "extra": {**m.extra, "stop": stop}})
    )


def report_so_far(ctx: RunContext, what: str) -> None:
    """The report of what is done so far, for a run that stopped (a resume writes it again at the end)."""
    try:
        m = ManifestStore(ctx.store).load(ctx.run_id)
        write_report(ctx.store, m.model_dump(mode="json"), all_outcomes(ctx), None)
    except Exception as exc:  # the stop is what the user must see
        log.error("report after %s failed: %s", what, exc)


def refuse_empty(store: ObjectStore, run_id: str, source: str, settings: Settings) -> None:
    """A run over a source with no files is a mistake (a wrong path or prefix), not a run of
    0 documents: InputError (exit 2) before anything is written or an emulator started, unless
    settings.allow_empty or the run's inventory is already taken."""
    if settings.allow_empty or InventoryChunks(store, run_id).done() is not None:
        return
    if source_is_empty(source, settings):
        raise InputError(
            f"source {source!r} has no files",
            hint="check the folder or s3:// prefix (and DOCMILL_INVENTORY__INCLUDE/EXCLUDE), or pass --allow-empty",
        )


def stopped(ctx: RunContext, e: SystemicFailure | Interrupted) -> SystemicFailure | Interrupted:
    """Phase `stopped` for a systemic failure (a spend limit is one) or a signal, with why (manifest
    `extra.stop`); the error again, naming this run's resume."""
    again = type(e)(
        f"run {ctx.run_id} stopped: {e.message}",
        hint=e.hint.replace("RUN_ID", ctx.run_id) if "RUN_ID" in e.hint else f"`docmill resume {ctx.run_id}`",
        **{**e.fields, "run_id": ctx.run_id},
    )
    kind = "signal" if isinstance(e, Interrupted) else "breaker"
    try:
        mark_stop(ctx, Phase.STOPPED, kind, again.one_line(), f"docmill resume {ctx.run_id}")
    except Exception as exc:  # the stop is what the user must see
        log.error("could not mark run %s stopped: %s", ctx.run_id, exc)
    return again


def _drive(ctx: RunContext, params: RunParams, map_chunks: MapChunks, progress: bool) -> dict[str, Any]:
    # a resumed run has spent what its cost ledger says, plus what a crash left in flight
    ctx.client.budget.spent_usd = spent_usd(ctx)
    ManifestStore(ctx.store).set_phase(ctx.run_id, Phase.INVENTORY)
    chunk_ids = write_inventory(ctx, params.source)
    file_pass = choose_pass(ctx, params, map_chunks=map_chunks)
    ManifestStore(ctx.store).set_phase(ctx.run_id, Phase.PER_FILE, chunks=len(chunk_ids))
    # chunks whose documents and keys a finished chunk of an earlier run had: its outcomes, whole
    unchanged = Pass.of(ctx)
    _, digests = reuse_unchanged(unchanged, chunk_ids)
    per_file_pass(ctx, file_pass, chunk_ids, progress)
    if params.submit_only:  # batches created; the flow run continues from here (flows.run.early)
        return {"run_id": ctx.run_id, "phase": "submitted", "mode": recorded(file_pass.kind)}
    remember_chunks(unchanged, digests)
    outcomes = all_outcomes(ctx)
    summary = summarize(outcomes)
    ManifestStore(ctx.store).set_phase(
        ctx.run_id, Phase.INTEGRATION, documents=summary["documents"], **summary["states"]
    )
    integration = integrate(
        outcomes,
        recipe=ctx.recipe,
        run_id=ctx.run_id,
        store=ctx.store,
        client=ctx.client,
        settings=ctx.settings,
        source=source_id(params.source),
    )
    ManifestStore(ctx.store).set_phase(ctx.run_id, Phase.REPORT)
    costs = CostLedger(ctx.store, ctx.run_id).totals()
    manifest = ManifestStore(ctx.store).load(ctx.run_id)
    root = ctx.store.uri.rstrip("/")
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
        "report": f"{root}/runs/{ctx.run_id}/report.md",
        "review_queue": f"{root}/review/{ctx.run_id}/",
        "exports": f"{root}/runs/{ctx.run_id}/exports/",
    }

"""Where a run starts without Prefect bookkeeping: `run_extract` (which run: flows.run.continuation;
its settings, clients, shared limit, workers and deadline) and `resume_run`; the flows of
flows.orchestration.prefect_flows call the same functions."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from checkpoints.costs import CostLedger
from checkpoints.manifest import ManifestStore
from checkpoints.store import open_store
from docmill.errors import ConfigError, InputError
from docmill.logs import get_logger
from docmill.settings import Settings, get_settings
from flows.run import driver, early
from flows.run.context import (
    RunContext,
    RunParams,
    api_endpoint,
    new_run_id,
    open_clients,
    record_possibly_billed,
    share_limit,
)
from flows.run.continuation import choose_run, pinned_settings, set_dotted, source_id
from flows.run.passes import MapChunks, plain_map
from flows.run.progress import OnProgress
from flows.workers import spread
from tasks.api.models import check_models, check_served
from tasks.deadline.plan import parse_finish_by
from tasks.recipes import load_recipe

log = get_logger("flows")


# The settings a run's arguments set, by the argument's name (a `docmill run` flag, a flow parameter).
GIVEN = {
    "allow_empty": "allow_empty",
    "max_doc_cost_usd": "cost.max_doc_cost_usd",
    "follow_symlinks": "inventory.follow_symlinks",
    "chunk_size": "chunk_size",
    "max_cost_usd": "cost.max_cost_usd",
    "concurrency": "api.concurrency",
    "model": "api.model",
    "max_tokens": "api.max_tokens",
    "include": "inventory.include",
    "exclude": "inventory.exclude",
    "integration": "integration.mode",
}


def given_settings(args: dict[str, Any]) -> dict[str, Any]:
    """Dotted settings overrides of the arguments in `args` that set one (`GIVEN`); an argument left
    out (None, or a switch left off) keeps the configured value."""
    return {GIVEN[k]: None if v is False else v for k, v in args.items() if k in GIVEN}


def settings_for(store: str | None, overrides: dict[str, Any]) -> Settings:
    """The settings of one run: the environment's, with `store` and dotted overrides
    (`"api.model": ...`; None keeps the configured value) applied and validated."""
    base = get_settings().model_dump()
    if store:
        base["store"] = store
    for dotted, value in overrides.items():
        if value is not None:
            set_dotted(base, dotted, value)
    return Settings.model_validate(base)


@dataclass(frozen=True)
class RunWiring:
    """How this process runs a run: its chunks through `map_chunks` (a thread pool, Prefect tasks:
    flows.run.passes), progress shown or not, `on_progress` hearing (documents done, total) of the
    per-file pass, the Prefect flow run it is bound to (a retry of that flow run continues the same
    run), and `launcher` starting shard workers (default: runs of the shard-worker deployment;
    flows.workers.spread)."""

    map_chunks: MapChunks = plain_map
    progress: bool = True
    on_progress: OnProgress | None = None
    flow_run_id: str | None = None
    launcher: spread.Launcher | None = None


def run_extract(
    params: RunParams,
    *,
    settings: Settings | None = None,
    store: str | None = None,
    wiring: RunWiring | None = None,
) -> dict[str, Any]:
    """The chain without Prefect bookkeeping (used by the flows and by fast tests). `params.workers`:
    the per-file pass spread over that many shard workers; `params.finish_by` (a time: `+2h`, `06:00`,
    ISO 8601): batch what can finish by then, the rest realtime (flows.run.deadline). A continued run
    keeps its own of both unless given. `settings`: else the environment's, with `store`.

    The run driven is the one `flows.run.continuation.choose_run` picks: `params.run_id`, the run
    bound to the wiring's flow run, a stopped run of the same recipe, model and source (unless
    `params.new_run`), or a new one. A continued run takes its settings from its manifest; of
    `params.given` only the safe ones apply to it. `params.submit_only`: stop once its batches are
    created, the run's lease kept for the call that continues it in this process (flows.run.early)."""
    wiring = wiring or RunWiring()
    settings = settings or settings_for(store, {})
    st = open_store(settings.store, endpoint_url=settings.s3_endpoint_url)
    choice = choose_run(
        st,
        settings,
        params.source,
        params.recipe,
        run_id=params.run_id,
        new_run=params.new_run,
        flow_run_id=wiring.flow_run_id,
        new_id=new_run_id,
    )
    lines = choice.lines
    workers, finish_by = params.workers, params.finish_by
    if choice.manifest is not None:
        m = choice.manifest
        settings, more = pinned_settings(settings, m, dict(params.given or {}))
        lines = lines + more
        if (m.source and source_id(m.source) != source_id(params.source)) or (
            m.recipe and m.recipe != params.recipe
        ):
            raise ConfigError(
                f"run {m.run_id} was started with source {m.source!r} and recipe {m.recipe!r}",
                hint="resume it with `docmill resume RUN_ID`, or start a new run without --run-id",
            )
        workers = workers or m.extra.get("workers")
        finish_by = finish_by or m.extra.get("finish_by")
    refuse_workers_with_deadline(workers, finish_by)
    for note in check_models(settings):  # a retired or (under a cap) unpriced model stops here
        log.warning("docmill: %s", note)
    if early.taken(choice.run_id):  # its lines were said when its batches were created
        lines = []
    for line in lines:
        print(line, file=sys.stderr)
        log.info("%s", line)
    rec = load_recipe(params.recipe)
    launcher = wiring.launcher
    if workers:
        launcher = launcher or spread.PrefectLauncher(settings.workers.deployment)
        if isinstance(launcher, spread.PrefectLauncher):
            launcher.check()  # a server and the deployment, before anything is sent
    driver.refuse_empty(st, choice.run_id, params.source, settings)
    with (
        api_endpoint(settings, quiet=not wiring.progress, store=st) as endpoint,
        open_clients(settings, endpoint) as (client, sdk),
    ):
        for note in check_served(settings, sdk):  # a model nobody serves stops here, nothing sent
            log.warning("docmill: %s", note)
        ctx = RunContext(
            recipe=rec,
            run_id=choice.run_id,
            store=st,
            client=client,
            settings=settings,
            endpoint=endpoint,
            batch_sdk=sdk,
            workers=int(workers) if workers else None,
            finish_by=deadline_iso(finish_by) if finish_by else None,
            left_behind=tuple(choice.left_behind),  # stopped runs not continued: their spend is reported
            on_progress=wiring.on_progress,
        )
        client.on_possibly_billed = partial(record_possibly_billed, CostLedger(st, ctx.run_id))
        map_chunks = wiring.map_chunks
        if ctx.workers and launcher is not None:
            map_chunks = spread.spread_map(ctx, launcher, local=map_chunks, progress=wiring.progress)
        with share_limit(ctx, name="driver"):  # the organisation's limit, shared with other processes
            summary = driver.run(
                ctx, replace(params, run_id=choice.run_id), map_chunks=map_chunks, progress=wiring.progress
            )
    if params.submit_only:  # the flow run that continues it in this process says nothing of continuing
        early.SUBMITTED.add(choice.run_id)
    return summary


def refuse_workers_with_deadline(workers: int | None, finish_by: str | None) -> None:
    """A deadline runs its batches and realtime tail in the driver alone: with `--workers` the
    workers would idle while the run claims to use them, so the pair is refused (exit 2, nothing sent)."""
    if workers and finish_by:
        raise InputError(
            "--workers and --finish-by cannot be combined: a deadline's batches and realtime tail run in "
            "one process",
            hint="drop --workers (batches need no workers), or drop --finish-by to spread a realtime run",
        )


def deadline_iso(text: str) -> str:
    """A --finish-by time as an ISO 8601 instant (`+2h` and `06:00` counted from now, local time)."""
    from datetime import datetime

    try:
        when = datetime.fromisoformat(text)
        if when.tzinfo is not None:
            return when.isoformat()
    except ValueError:
        pass
    return parse_finish_by(text, datetime.now().astimezone()).isoformat()


def resume_run(
    run_id: str,
    *,
    store: str | None = None,
    settings: Settings | None = None,
    max_cost_usd: float | None = None,
    concurrency: int | None = None,
    wiring: RunWiring | None = None,
) -> dict[str, Any]:
    """Continue a run with its own settings (its manifest's); only the cost cap and the concurrency
    may be given anew. A run spread over workers is continued over workers (the wiring's `launcher`:
    flows.workers.spread)."""
    settings = settings or settings_for(store, {})
    m = ManifestStore(open_store(settings.store, endpoint_url=settings.s3_endpoint_url)).load(run_id)
    given = {"cost.max_cost_usd": max_cost_usd, "api.concurrency": concurrency}
    return run_extract(
        RunParams(m.source, m.recipe, run_id=run_id, given=given), settings=settings, wiring=wiring
    )

"""Prefect flows over the run driver in flows/pipeline.py.

Prefect tasks work on chunks (settings.chunk_size documents), never one task per document;
the task runner is always bounded. Per-document state lives in docmill's ledger, not in
Prefect. Set DOCMILL_CHUNK_LIMIT_NAME to hold a Prefect global concurrency limit
(strict=True) per chunk, so N workers together never run more chunks than allowed.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from functools import partial
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NONE
from prefect.settings import PREFECT_API_URL
from prefect.states import Cancelled, State
from prefect.task_runners import ThreadPoolTaskRunner

from checkpoints.costs import CostEntry, CostLedger, possibly_billed_entry
from docmill.errors import BudgetExhausted, Interrupted
from docmill.logs import current_run, get_logger, to_prefect_run
from docmill.settings import Settings, get_settings
from docmill.shutdown import SHUTDOWN, install, resume_line
from flows import pipeline, spread
from flows.artifacts import publish_run
from flows.context import RunContext, api_endpoint, make_clients, new_run_id, share_limit
from tasks.api.client import PossiblyBilled
from tasks.api.models import check_models, check_served
from tasks.reporting.summary import integration_text

log = get_logger("flows")
RUNNER: Any = ThreadPoolTaskRunner(max_workers=pipeline.CHUNK_WORKERS)  # always bounded

if not PREFECT_API_URL.value():  # a flow called from Python gets the server the CLI gets
    from flows.prefect_server import adopt_ephemeral_server

    adopt_ephemeral_server()


def chunk_label(cid: str, docs: list[dict[str, Any]]) -> str:
    """What a chunk holds, for its task-run name: `000003: 2026-05/inv-001004.html .. 2026-06/inv-001020.md
    (20 docs)` (first and last doc id; long ids shortened to their tail)."""

    def short(doc_id: str) -> str:
        return doc_id if len(doc_id) <= 60 else "…" + doc_id[-59:]

    if not docs:
        return f"{cid}: empty"
    first, last = short(str(docs[0]["doc_id"])), short(str(docs[-1]["doc_id"]))
    span = first if len(docs) == 1 else f"{first} .. {last}"
    return f"{cid}: {span} ({len(docs)} doc{'s' if len(docs) != 1 else ''})"


# A run that stops on purpose is not a failure: its chunk task runs and its flow run end Cancelled,
# under these names (what the Prefect UI shows), with the one line that says how to continue.
INTERRUPTED, BUDGET_SPENT = "Interrupted", "Budget spent"
STOP_STATES = (INTERRUPTED, BUDGET_SPENT)


def interrupted_state(e: Interrupted, data: Any) -> State[Any]:
    """A chunk or flow run a signal stopped: nothing new was sent, the answers received are kept."""
    return Cancelled(
        name=INTERRUPTED, message=resume_line(e.signal_name, e.run_id or current_run()), data=data
    )


def budget_state(message: str, data: Any) -> State[Any]:
    """A chunk or flow run the cost cap stopped (`message` names the resume with a higher cap)."""
    return Cancelled(name=BUDGET_SPENT, message=f"docmill: {message}", data=data)


class StopStateLevel(logging.Filter):
    """Prefect's engine logs every task run that does not end Completed at ERROR ("Finished in state
    ..."); one a signal or the budget stopped ends Cancelled on purpose: a WARNING, not an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.WARNING and is_stop_record(record):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def is_stop_record(record: logging.LogRecord) -> bool:
    """Prefect's "Finished in state" line of a run that ended in one of docmill's stop states."""
    msg = record.msg if isinstance(record.msg, str) else ""
    return msg.startswith("Finished in state ") and msg[18:].startswith(tuple(f"{n}(" for n in STOP_STATES))


for _name in ("prefect.task_runs", "prefect.flow_runs"):
    logging.getLogger(_name).addFilter(StopStateLevel())


# The task's name stays `per-file-chunk` (what limits, filters and dashboards key on); each run of it
# is named after the documents it holds.
@task(name="per-file-chunk", task_run_name="per-file-chunk {label}", cache_policy=NONE, retries=0)
def chunk_task(fn: Any, cid: str, docs: list[dict[str, Any]], label: str = "") -> Any:
    """One chunk; a chunk a signal or the budget stopped ends Cancelled (see STOP_STATES), not Failed."""
    limit = get_settings().chunk_limit_name
    if limit:
        from prefect.concurrency.sync import concurrency

        guard: Any = concurrency(limit, occupy=1, strict=True)
    else:
        guard = nullcontext()
    with guard:
        try:
            counts = fn(cid, docs)
        except Interrupted as e:
            return interrupted_state(e, {"interrupted": 1})
    if counts.get("budget"):
        run_id = current_run() or "RUN_ID"
        line = (
            f"the run's cost cap stopped this chunk; `docmill resume {run_id} --max-cost-usd N` continues it"
        )
        return budget_state(line, counts)
    return counts


def prefect_map(fn: pipeline.ChunkFn, chunks: Iterable[pipeline.Chunk]) -> list[dict[str, int]]:
    """Chunks as Prefect task runs on the flow's bounded runner, submitted as `chunks` hands them out.
    A chunk a signal stopped makes the run stop as it does without Prefect (Interrupted), once every
    chunk has ended."""
    futures = [chunk_task.submit(fn, cid, docs, label=chunk_label(cid, docs)) for cid, docs in chunks]
    results: list[dict[str, int]] = []
    for f in futures:
        f.wait()
        stopped = f.state.is_cancelled() and f.state.name in STOP_STATES
        results.append(dict(f.result(raise_on_failure=False)) if stopped else f.result())
    if any(r.get("interrupted") for r in results):
        SHUTDOWN.check()
        raise Interrupted("a chunk was interrupted", hint="`docmill resume RUN_ID` continues the run")
    return results


class ProgressArtifact:
    """The per-file pass as a Prefect progress artifact of the flow run: documents done of the
    documents left at its start, realtime and batch alike. Made when the pass starts, updated at
    most every `every` seconds (the Prefect API is not a progress bar) and when it ends."""

    def __init__(self, every: float = 5.0, clock: Any = time.monotonic) -> None:
        self.every, self.clock = every, clock
        self.artifact_id: Any = None
        self.last = float("-inf")

    def __call__(self, done: int, total: int) -> None:
        try:
            if self.artifact_id is None:
                self.artifact_id = create_progress_artifact(
                    progress=0.0, key="docmill-progress",
                    description=f"docmill per-file pass: documents done of {total}",
                )  # fmt: skip
            now = self.clock()
            if done < total and now - self.last < self.every:
                return
            self.last = now
            update_progress_artifact(
                artifact_id=self.artifact_id,
                progress=100.0 * done / total if total else 100.0,
                description=f"docmill per-file pass: {done} of {total} documents done",
            )  # type: ignore[arg-type]
        except Exception as e:  # progress reporting must never break a run
            log.warning("could not update the Prefect progress artifact: %s", e)


def _settings(store: str | None, overrides: dict[str, Any]) -> Settings:
    base = get_settings().model_dump()
    if store:
        base["store"] = store
    for dotted, value in overrides.items():
        if value is None:
            continue
        node = base
        *path, leaf = dotted.split(".")
        for p in path:
            node = node[p]
        node[leaf] = value
    return Settings.model_validate(base)


def _filters(include: list[str] | None, exclude: list[str] | None) -> dict[str, Any]:
    """Settings overrides of the source's include / exclude globs (None keeps the configured ones)."""
    return {"inventory.include": include, "inventory.exclude": exclude}


def run_extract(
    source: str,
    recipe: str,
    *,
    store: str | None = None,
    mode: str = "realtime",
    run_id: str | None = None,
    settings: Settings | None = None,
    map_chunks: pipeline.MapChunks = pipeline.plain_map,
    progress: bool = True,
    on_progress: pipeline.OnProgress | None = None,
    new_run: bool = False,
    given: dict[str, Any] | None = None,
    flow_run_id: str | None = None,
    workers: int | None = None,
    launcher: Any = None,
    finish_by: str | None = None,
) -> dict[str, Any]:
    """The chain without Prefect bookkeeping (used by the flows and by fast tests); `on_progress`
    hears (documents done, total) of the per-file pass. `workers`: the per-file pass spread over
    that many shard workers started by `launcher` (default: runs of the shard-worker deployment;
    flows.spread); `finish_by` (a time: `+2h`, `06:00`, ISO 8601): batch what can finish by then,
    the rest realtime (flows.deadline). A continued run keeps its own of both unless given.

    The run driven is the one `flows.continuation.choose_run` picks: `run_id`, the run bound to
    `flow_run_id`, a stopped run of the same recipe, model and source (unless `new_run`), or a new
    one. A continued run takes its settings from its manifest; of `given` (dotted setting -> value,
    None = not given) only the safe ones apply to it."""
    from checkpoints.store import open_store
    from docmill.errors import ConfigError
    from flows.continuation import choose_run, mode_of, pinned_settings, source_id
    from tasks.recipes import load_recipe

    settings = settings or _settings(store, {})
    st = open_store(settings.store, endpoint_url=settings.s3_endpoint_url)
    choice = choose_run(
        st, settings, source, recipe, run_id=run_id, new_run=new_run, flow_run_id=flow_run_id,
        new_id=new_run_id,
    )  # fmt: skip
    lines = choice.lines
    if choice.manifest is not None:
        m = choice.manifest
        settings, more = pinned_settings(settings, m, given)
        lines = lines + more
        if (m.source and source_id(m.source) != source_id(source)) or (m.recipe and m.recipe != recipe):
            raise ConfigError(
                f"run {m.run_id} was started with source {m.source!r} and recipe {m.recipe!r}",
                hint="resume it with `docmill resume RUN_ID`, or start a new run without --run-id",
            )
        mode = mode_of(st, m, mode)
        workers = workers or m.extra.get("workers")
        finish_by = finish_by or m.extra.get("finish_by")
    if finish_by:  # a deadline: the batch pass, with what will not finish in time sent realtime
        finish_by, mode = deadline_iso(finish_by), "batch"
    for note in check_models(settings):  # a retired or (under a cap) unpriced model stops here
        log.warning("docmill: %s", note)
    for line in lines:
        print(line, file=sys.stderr)
        log.info("%s", line)
    rec = load_recipe(recipe)
    if workers:
        launcher = launcher or spread.PrefectLauncher(settings.workers.deployment)
        if isinstance(launcher, spread.PrefectLauncher):
            launcher.check()  # a server and the deployment, before anything is sent
    with api_endpoint(settings, quiet=not progress, store=st) as endpoint:
        client, sdk = make_clients(settings, endpoint)
        for note in check_served(settings, sdk):  # a model nobody serves stops here, nothing sent
            log.warning("docmill: %s", note)
        ctx = RunContext(settings, st, rec, choice.run_id, endpoint, client, sdk, on_progress=on_progress)
        client.on_possibly_billed = partial(record_possibly_billed, CostLedger(st, ctx.run_id))
        if finish_by:
            ctx.extra["finish_by"] = finish_by
        if workers:
            ctx.extra["workers"] = int(workers)
            map_chunks = spread.spread_map(ctx, int(workers), launcher, local=map_chunks, progress=progress)
        with share_limit(ctx, name="driver"):  # the organisation's limit, shared with other processes
            return pipeline.run(
                ctx,
                pipeline.RunParams(source, recipe, mode, choice.run_id),
                map_chunks=map_chunks,
                progress=progress,
            )


def deadline_iso(text: str) -> str:
    """A --finish-by time as an ISO 8601 instant (`+2h` and `06:00` counted from now, local time)."""
    from datetime import datetime

    from tasks.deadline.plan import parse_finish_by

    try:
        when = datetime.fromisoformat(text)
        if when.tzinfo is not None:
            return when.isoformat()
    except ValueError:
        pass
    return parse_finish_by(text, datetime.now().astimezone()).isoformat()


def record_possibly_billed(ledger: CostLedger, p: PossiblyBilled) -> None:
    """An attempt that may have been billed without a whole answer (a timeout after sending, a broken
    stream) goes into the run's cost ledger at once: exact when the stream reported its final usage,
    else flagged possibly billed at its upper bound."""
    if p.usage is not None:
        entry = CostEntry.from_usage(
            run_id=ledger.run_id, pass_name=p.pass_name, doc_id=p.doc_id, key=p.key, attempt=p.attempt,
            model=p.model, usage=p.usage, at=p.at,
        ).model_copy(update={"usd": p.usd, "possibly_billed": p.possibly, "unanswered": True})  # fmt: skip
    else:
        entry = possibly_billed_entry(
            run_id=ledger.run_id, pass_name=p.pass_name, doc_id=p.doc_id, key=p.key, attempt=p.attempt,
            model=p.model, input_tokens=p.input_tokens, max_tokens=p.max_tokens, usd=p.usd, at=p.at,
        )  # fmt: skip
    ledger.record(f"{p.reason}-{p.key or p.doc_id}-{p.attempt}-{int(p.at * 1000)}", [entry])


def _logged_to_run(call: Any) -> dict[str, Any]:
    """Run the chain inside a flow, docmill's log lines going to the flow run's Logs tab."""
    # Prefect's flow engine turns SIGTERM into a crash of the flow run; docmill's own handler
    # stops sending and lets requests in flight finish (docmill.shutdown), on this path too.
    restore = install(get_settings().shutdown_grace_seconds)
    with to_prefect_run():
        try:
            return dict(call())
        finally:
            restore()


def _publish(summary: dict[str, Any], settings: Settings) -> None:
    from checkpoints.store import open_store

    store = open_store(settings.store, endpoint_url=settings.s3_endpoint_url)
    publish_run(summary, store, link_seconds=settings.report_link_seconds)
    get_run_logger().info(
        "docmill run %s: %s, cost $%.4f", summary["run_id"], summary["states"], summary["cost_usd"]
    )
    if summary.get("integration") in ("partial", "failed"):
        get_run_logger().warning(
            "docmill run %s: %s", summary["run_id"], integration_text(summary, markdown=True)
        )


def _in_flow(chain: Callable[..., dict[str, Any]], *args: Any, **kw: Any) -> Any:
    """The chain inside a flow: chunks as Prefect tasks, progress as an artifact, the summary, report
    link and failures published as artifacts, and the docmill run bound to this flow run (a retry of
    the flow run continues the same docmill run). Ends that are not failures end the flow run
    Cancelled with their one line, so failure alerts do not fire: a deliberate skip (another live run
    covers the same documents), a signal (`Interrupted`) and the cost cap (`Budget spent`); the error
    is the state's data, so a caller of the flow (the CLI) gets it raised and prints its own line."""
    from prefect.runtime import flow_run

    from docmill.errors import RunOverlap

    settings = kw.get("settings") or _settings(kw.get("store"), {})
    bound = str(flow_run.id) if flow_run.id else None
    try:
        summary = _logged_to_run(
            lambda: chain(
                *args, map_chunks=prefect_map, on_progress=ProgressArtifact(), flow_run_id=bound, **kw
            )
        )
    except RunOverlap as e:
        get_run_logger().warning(
            "docmill: skipped: %s", e.one_line(), exc_info=e
        )  # the CLI prints its own line
        return Cancelled(message=f"skipped: {e.one_line()}", data=e)
    except Interrupted as e:
        return interrupted_state(e, e)
    except BudgetExhausted as e:
        return budget_state(e.one_line(), e)
    _publish(summary, settings)
    return summary


# A flow run that fails (an outage, a dead store, a crash of the chain) is retried and continues the
# same docmill run (bound to the flow run). The only retry layer at this level: chunk tasks have
# retries=0 and requests retry in their own transport layer (retries would multiply otherwise).
FLOW_RETRIES = Settings().flow_retries
FLOW_RETRY_DELAYS = Settings().flow_retry_delay_seconds


def _flow(name: str) -> Any:
    return flow(
        name=name, task_runner=RUNNER, log_prints=False, retries=FLOW_RETRIES,
        retry_delay_seconds=FLOW_RETRY_DELAYS,
    )  # fmt: skip


@_flow("extract")
def extract(
    source: str,
    recipe: str | None = None,
    store: str | None = None,
    mode: str = "realtime",
    run_id: str | None = None,
    chunk_size: int | None = None,
    max_cost_usd: float | None = None,
    concurrency: int | None = None,
    model: str | None = None,
    include: list[str] | None = None,
    exclude: list[str] | None = None,
    integration: str | None = None,
    progress: bool = False,
    new_run: bool = False,
    max_doc_cost_usd: float | None = None,
    follow_symlinks: bool = False,
    allow_empty: bool = False,
    workers: int | None = None,
    finish_by: str | None = None,
) -> dict[str, Any]:
    """The chain: inventory -> per-file pass -> gate -> integration -> report. A stopped run of the
    same recipe, model and source is continued unless `new_run`. `recipe`: a built-in name or
    path/to/module.py:NAME (None: DOCMILL_RECIPE, default invoices); `model`, `max_cost_usd`: None
    keeps DOCMILL_API__MODEL, DOCMILL_COST__MAX_COST_USD. `include` / `exclude`: glob patterns over
    paths relative to the source (default: every file). `integration`: incremental (default), full
    or skip. `workers`: spread the per-file pass over that many shard workers of the work pool.
    `finish_by` (`+2h`, `06:00`, ISO 8601): batch what can finish by then, the rest realtime."""
    given = {
        "chunk_size": chunk_size,
        "cost.max_cost_usd": max_cost_usd,
        "api.concurrency": concurrency,
        "api.model": model,
        **_filters(include, exclude),
        "integration.mode": integration,
        "cost.max_doc_cost_usd": max_doc_cost_usd,
        "inventory.follow_symlinks": follow_symlinks or None,
        "allow_empty": allow_empty or None,
    }
    return _in_flow(
        run_extract, source, _recipe(recipe), mode=mode, run_id=run_id, settings=_settings(store, given),
        progress=progress, new_run=new_run, given=given, workers=workers, finish_by=finish_by,
    )  # fmt: skip


def _recipe(recipe: str | None) -> str:
    """A flow's recipe parameter; None (a deployment's default) is the worker's DOCMILL_RECIPE."""
    return recipe or get_settings().recipe


@_flow("nightly")
def nightly(
    source: str,
    recipe: str | None = None,
    store: str | None = None,
    model: str | None = None,
    max_cost_usd: float | None = None,
    include: list[str] | None = None,
    exclude: list[str] | None = None,
    integration: str | None = None,
    workers: int | None = None,
    finish_by: str | None = None,
) -> dict[str, Any]:
    """Incremental: unchanged documents hit the ledger by content hash and cost nothing, and the
    integration merges only new or changed results into the source's stored state. `recipe`,
    `model`, `max_cost_usd`: as for `extract` (None: the worker's settings). `workers`: spread over
    that many workers of the pool; `finish_by` (e.g. `06:00`): the new documents as batches, what will
    not finish by then realtime."""
    given = {
        "api.model": model, "cost.max_cost_usd": max_cost_usd, **_filters(include, exclude),
        "integration.mode": integration,
    }  # fmt: skip
    return _in_flow(
        run_extract, source, _recipe(recipe), settings=_settings(store, given), progress=False, given=given,
        workers=workers, finish_by=finish_by,
    )  # fmt: skip


@_flow("backfill")
def backfill(
    source: str,
    recipe: str | None = None,
    store: str | None = None,
    mode: str = "batch",
    run_id: str | None = None,
    chunk_size: int | None = None,
    max_cost_usd: float | None = None,
    model: str | None = None,
    include: list[str] | None = None,
    exclude: list[str] | None = None,
    integration: str | None = None,
    workers: int | None = None,
    finish_by: str | None = None,
) -> dict[str, Any]:
    """A large source, batch mode by default; continues a stopped backfill of the same source.
    `recipe`, `model`, `max_cost_usd`: as for `extract` (None: the worker's settings). `workers`
    (realtime): spread over that many workers of the pool; `finish_by`: what will not finish as
    batches by then goes realtime near it."""
    given = {
        "chunk_size": chunk_size, "cost.max_cost_usd": max_cost_usd, "api.model": model,
        **_filters(include, exclude), "integration.mode": integration,
    }  # fmt: skip
    return _in_flow(
        run_extract, source, _recipe(recipe), mode=mode, run_id=run_id, settings=_settings(store, given),
        progress=False, given=given, workers=workers, finish_by=finish_by,
    )  # fmt: skip


@_flow("resume")
def resume(
    run_id: str, store: str | None = None, max_cost_usd: float | None = None, concurrency: int | None = None
) -> dict[str, Any]:
    """Continue a run from its manifest: nothing in the ledger is sent again."""
    return _in_flow(
        resume_run, run_id, store=store, progress=False, max_cost_usd=max_cost_usd, concurrency=concurrency
    )


def resume_run(
    run_id: str,
    *,
    store: str | None = None,
    map_chunks: pipeline.MapChunks = pipeline.plain_map,
    progress: bool = True,
    settings: Settings | None = None,
    max_cost_usd: float | None = None,
    concurrency: int | None = None,
    on_progress: pipeline.OnProgress | None = None,
    flow_run_id: str | None = None,
    launcher: Any = None,
) -> dict[str, Any]:
    """Continue a run with its own settings (its manifest's); only the cost cap and the concurrency
    may be given anew. A run spread over workers is continued over workers (`launcher`: flows.spread)."""
    from checkpoints.manifest import ManifestStore
    from checkpoints.store import open_store

    settings = settings or _settings(store, {})
    m = ManifestStore(open_store(settings.store, endpoint_url=settings.s3_endpoint_url)).load(run_id)
    return run_extract(
        m.source,
        m.recipe,
        mode=m.mode,
        run_id=run_id,
        settings=settings,
        map_chunks=map_chunks,
        progress=progress,
        on_progress=on_progress,
        given={"cost.max_cost_usd": max_cost_usd, "api.concurrency": concurrency},
        flow_run_id=flow_run_id,
        launcher=launcher,
    )

"""Prefect flows over the run driver in flows/run/driver.py.

Prefect tasks work on chunks (settings.chunk_size documents), never one task per document;
the task runner is always bounded. Per-document state lives in docmill's ledger, not in
Prefect. Set DOCMILL_CHUNK_LIMIT_NAME to hold a Prefect global concurrency limit
(strict=True) per chunk, so N workers together never run more chunks than allowed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prefect import flow, get_run_logger
from prefect.settings import PREFECT_API_URL
from prefect.states import Cancelled

from checkpoints.store import open_store
from docmill.errors import BudgetExhausted, Interrupted, RunOverlap
from docmill.logs import get_logger, to_prefect_run
from docmill.settings import Settings, get_settings
from docmill.shutdown import install
from flows.entry import RunWiring, given_settings, resume_run, run_extract, settings_for
from flows.orchestration.artifacts import publish_run
from flows.orchestration.chunk_tasks import (
    RUNNER,
    ProgressArtifact,
    budget_state,
    interrupted_state,
    prefect_map,
)
from flows.run.context import RunParams
from tasks.reporting.summary import integration_text

log = get_logger("flows")

if not PREFECT_API_URL.value():  # a flow called from Python gets the server the CLI gets
    from flows.orchestration.server import adopt_ephemeral_server

    adopt_ephemeral_server()


def _publish(summary: dict[str, Any], settings: Settings) -> None:
    store = open_store(settings.store, endpoint_url=settings.s3_endpoint_url)
    publish_run(summary, store, link_seconds=settings.report_link_seconds)
    get_run_logger().info(
        "docmill run %s: %s, cost $%.4f", summary["run_id"], summary["states"], summary["cost_usd"]
    )
    if summary.get("integration") in ("partial", "failed"):
        get_run_logger().warning(
            "docmill run %s: %s", summary["run_id"], integration_text(summary, markdown=True)
        )


def _in_flow(chain: Callable[..., dict[str, Any]], *args: Any, progress: bool = False, **kw: Any) -> Any:
    """The chain inside a flow: chunks as Prefect tasks, progress as an artifact, the summary, report
    link and failures published as artifacts, and the docmill run bound to this flow run (a retry of
    the flow run continues the same docmill run). Ends that are not failures end the flow run
    Cancelled with their one line, so failure alerts do not fire: a deliberate skip (another live run
    covers the same documents), a signal (`Interrupted`) and the cost cap (`Budget spent`); the error
    is the state's data, so a caller of the flow (the CLI) gets it raised and prints its own line."""
    from prefect.runtime import flow_run

    settings = kw.get("settings") or settings_for(kw.get("store"), {})
    bound = str(flow_run.id) if flow_run.id else None
    wiring = RunWiring(prefect_map, progress, on_progress=ProgressArtifact(), flow_run_id=bound)
    # Prefect's flow engine turns SIGTERM into a crash of the flow run; docmill's own handler stops
    # sending and lets requests in flight finish (docmill.shutdown), on this path too
    restore = install(get_settings().shutdown_grace_seconds)
    try:
        with to_prefect_run():  # docmill's log lines go to the flow run's Logs tab
            summary = dict(chain(*args, wiring=wiring, **kw))
    except RunOverlap as e:  # the CLI prints its own line
        get_run_logger().warning("docmill: skipped: %s", e.one_line(), exc_info=e)
        return Cancelled(message=f"skipped: {e.one_line()}", data=e)
    except Interrupted as e:
        return interrupted_state(e, e)
    except BudgetExhausted as e:
        return budget_state(e.one_line(), e)
    finally:
        restore()
    _publish(summary, settings)
    return summary


RETRY = Settings()  # the flows' retry policy, read once at import


def _flow(name: str) -> Any:
    """A run flow. One that fails (an outage, a dead store, a crash of the chain) is retried and
    continues the same docmill run (bound to the flow run): the only retry layer at this level (chunk
    tasks have retries=0, requests retry in their transport; retries would multiply otherwise)."""
    return flow(
        name=name,
        task_runner=RUNNER,
        log_prints=False,
        retries=RETRY.flow_retries,
        retry_delay_seconds=RETRY.flow_retry_delay_seconds,
    )


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
    given = given_settings(locals())  # the parameters that set a setting, by name
    asked = RunParams(
        source,
        _recipe(recipe),
        mode,
        run_id,
        new_run=new_run,
        workers=workers,
        finish_by=finish_by,
        given=given,
    )
    return _in_flow(run_extract, asked, settings=settings_for(store, given), progress=progress)


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
    given = given_settings(locals())  # the parameters that set a setting, by name
    asked = RunParams(source, _recipe(recipe), workers=workers, finish_by=finish_by, given=given)
    return _in_flow(run_extract, asked, settings=settings_for(store, given))


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
    given = given_settings(locals())  # the parameters that set a setting, by name
    asked = RunParams(
        source, _recipe(recipe), mode, run_id, workers=workers, finish_by=finish_by, given=given
    )
    return _in_flow(run_extract, asked, settings=settings_for(store, given))


@_flow("resume")
def resume(
    run_id: str,
    store: str | None = None,
    max_cost_usd: float | None = None,
    concurrency: int | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Continue a run from its manifest: nothing in the ledger is sent again. `progress`: the
    emulator line and the progress line on stderr, as `docmill run` shows them."""
    return _in_flow(
        resume_run, run_id, progress=progress, store=store, max_cost_usd=max_cost_usd, concurrency=concurrency
    )

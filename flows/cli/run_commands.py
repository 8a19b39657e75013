"""`docmill run` and `docmill resume`: the checks before anything starts, Prefect's temporary server
started first thing (flows.orchestration.boot) and kept quiet, the run through its flow (or without Prefect),
and the summary it ends with."""

from __future__ import annotations

import argparse
import inspect
import os
import sys
from typing import TYPE_CHECKING, Any

from docmill.errors import DocmillError, InputError
from docmill.settings import Settings, get_settings
from flows.cli.checks import check_store, known_run
from flows.cli.commands import cli_store, store_uri
from flows.cli.exit_codes import EXIT_INTEGRATION, EXIT_OK, EXIT_RUN
from flows.orchestration import boot as prefect_boot
from flows.run import early
from tasks.reporting.summary import integration_text

if TYPE_CHECKING:
    from flows.run.context import RunParams


def _quiet_prefect_services() -> None:
    """Prefect's background queues warn while they flush at exit ("Still processing items");
    that is not news to someone running docmill, so only their errors are shown. A docmill error
    that ends a flow run (another run holds it, a bad source, ...) is printed by `main` in one
    line, so Prefect's console traceback of it is dropped (it still reaches the Prefect API)."""
    import logging

    for name in ("EventsWorker", "APILogWorker"):
        logging.getLogger(name).setLevel(logging.ERROR)
    if os.environ.get("DOCMILL_RAISE_ERRORS", "").lower() in ("1", "true", "yes"):
        return
    from prefect.logging.handlers import PrefectConsoleHandler

    for name in ("", "prefect", "prefect.flow_runs", "prefect.task_runs"):  # "" is the root logger
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, PrefectConsoleHandler) and _one_line_errors not in handler.filters:
                handler.addFilter(_one_line_errors)


def _one_line_errors(record: Any) -> bool:
    """False for a log record carrying a docmill error, or Prefect's "Finished in state" line of a
    run a signal or the budget stopped (the CLI prints each in one line of its own)."""
    exc = record.exc_info[1] if record.exc_info else None
    if isinstance(exc, DocmillError):
        return False
    tasks = sys.modules.get("flows.orchestration.chunk_tasks")
    return tasks is None or not tasks.is_stop_record(record)


def _own_processes(*, prefect: bool) -> None:
    """Stop what a killed earlier run left running (one line says so); `prefect`: the run goes
    through Prefect, its temporary server starts now (flows.orchestration.boot). The caller then
    makes the server die with it (`_adopt_server`, which imports Prefect)."""
    from docmill.processes import reap_stale, reaped_line

    stale = reap_stale(get_settings().runtime_dir)
    if stale:
        print(reaped_line(stale), file=sys.stderr)
    if prefect and get_settings().prefect_prespawn:
        prefect_boot.prespawn(get_settings().runtime_dir)  # boots while the rest imports


def _adopt_server() -> None:
    """Make the Prefect server this run may start die with it, however it ends (docmill.processes,
    flows.orchestration.server)."""
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():  # else no server starts (and its heavy module stays unimported)
        from flows.orchestration.server import adopt_ephemeral_server

        if adopt_ephemeral_server():
            return
    prefect_boot.discard()  # a profile names a server, or a test harness runs one: not needed


def _summary_line(s: dict[str, Any]) -> str:
    st, n = s["states"], int(s.get("retryable") or 0)
    retryable = f" ({n} transiently: resume retries them)" if n else ""
    return (
        f"docmill: run {s['run_id']} {s['phase']}: {st['succeeded']} succeeded, {st['needs_review']} need review, "
        f"{st['failed']} failed{retryable}, {st.get('skipped', 0)} skipped of {s['documents']} documents ({s['from_ledger']} reused from the ledger); "
        f"cost ${s['cost_usd']:.4f}; {s['conflicts']} conflict{'' if s['conflicts'] == 1 else 's'} across documents.\n"
        f"  {integration_text(s)}\n"
        f"  report: {s['report']}\n  exports: {s['exports']}\n  review queue: {s['review_queue']}"
    )


def _finish(summary: dict[str, Any]) -> int:
    """Print a run's summary. Documents left failed for a transient cause are not a finished run:
    exit 3 and the resume command. (A budget stop or a signal arrives as an error: `_dispatch`.)"""
    print(_summary_line(summary))
    if summary.get("retryable"):
        print(
            f"docmill: {summary['retryable']} document(s) failed for a transient cause (outage, overload, "
            f"rate limit, endpoint or account); `docmill resume {summary['run_id']}` retries them",
            file=sys.stderr,
        )
        return EXIT_RUN
    return EXIT_INTEGRATION if summary.get("integration") in ("partial", "failed") else EXIT_OK


def cmd_run(a: argparse.Namespace) -> int:
    if a.workers and a.finish_by:  # one line before anything starts (flows.entry says why)
        from flows.entry import refuse_workers_with_deadline

        refuse_workers_with_deadline(a.workers, a.finish_by)
    if a.workers:  # workers need a Prefect server with a pool: no temporary one is started for them
        from flows.workers.spread import PrefectLauncher

        PrefectLauncher.needs_server()
    # then at once: Prefect's temporary server boots while the rest imports (flows.orchestration.boot),
    # unless the run may turn out to have nothing to send (`_small_run`): then after that count
    may_be_small = _may_be_small(a)
    _own_processes(prefect=not a.no_prefect and not a.workers and not may_be_small)
    from flows.entry import given_settings, run_extract, settings_for

    if a.finish_by:  # a bad time is one line before anything starts
        from flows.entry import deadline_iso

        a.finish_by = deadline_iso(a.finish_by)
    if not os.path.exists(a.source) and not a.source.startswith("s3://"):
        raise InputError(f"source {a.source!r} does not exist", hint="give a folder or an s3://bucket/prefix")
    check_store(cli_store(a), store_uri(a))
    recipe = a.recipe or get_settings().recipe
    overrides = given_settings(vars(a))
    settings = settings_for(a.store, overrides)
    if a.no_prefect or (may_be_small and _small_run(a, recipe, settings)):
        if a.workers:
            raise InputError("--workers spreads a run over Prefect workers", hint="drop --no-prefect")
        return _finish(
            run_extract(_run_params(a, recipe, overrides, finish_by=a.finish_by), settings=settings)
        )
    early_id = _early_batches(a, recipe, overrides, settings)
    a.run_id = early_id or a.run_id
    _adopt_server()  # Prefect imported (~5 s of CPU) while the batches run
    from flows.orchestration.prefect_flows import extract

    _quiet_prefect_services()  # after the import: Prefect's console handlers exist now
    with early.unfollowed(early_id):  # in the foreground the person (or cron) running it is the retry
        return _finish(_in_prefect(extract, a, recipe))


def _may_be_small(a: argparse.Namespace) -> bool:
    """Whether `_small_run` will count what the run has to send: a new run without --workers,
    --finish-by or --run-id that would start Prefect's temporary server (no API URL in the environment
    nor in a loaded Prefect's settings: a running server costs no start-up and keeps the run's record).
    The server then starts after that count, which costs a small run less than booting it."""
    if a.no_prefect or a.workers or a.finish_by or a.run_id or os.environ.get("PREFECT_API_URL"):
        return False
    if "prefect" in sys.modules:  # a process with Prefect loaded (an embedding program, tests)
        from prefect.settings import PREFECT_API_URL

        return not PREFECT_API_URL.value()
    return True


def _small_run(a: argparse.Namespace, recipe: str, settings: Settings) -> bool:
    """A run `_may_be_small` let through with fewer documents to send than
    settings.prefect_min_documents runs without Prefect (flows.run.small), and one line says so;
    otherwise Prefect's temporary server starts now."""
    from flows.run.small import work_left

    limit = settings.prefect_min_documents
    n = work_left(a.source, recipe, settings, limit=limit)
    if n >= limit:
        if settings.prefect_prespawn:
            prefect_boot.prespawn(settings.runtime_dir)
        return False
    print(  # `n` counts files not read yet as documents to send: at most this many
        f"docmill: at most {n} document(s) to send, fewer than prefect_min_documents ({limit}): running "
        "without Prefect (no temporary server to wait for)",
        file=sys.stderr,
    )
    return True


def _in_prefect(extract: Any, a: argparse.Namespace, recipe: str) -> dict[str, Any]:
    """The extract flow, given each of `docmill run`'s arguments it takes by the same name."""
    names = inspect.signature(extract.fn).parameters.keys() - {"source", "recipe", "progress"}
    given = {name: getattr(a, name) for name in names}
    return dict(extract.with_options(retries=0)(a.source, recipe, progress=True, **given))


def _run_params(a: argparse.Namespace, recipe: str, overrides: dict[str, Any], **more: Any) -> RunParams:
    """What `docmill run`'s arguments ask of the run (`more`: the deadline, or submit only)."""
    from flows.run.context import RunParams

    return RunParams(
        a.source, recipe, mode=a.mode, run_id=a.run_id, new_run=a.new_run, given=overrides, **more
    )


def _early_batches(
    a: argparse.Namespace, recipe: str, overrides: dict[str, Any], settings: Settings
) -> str | None:
    """A batch run's batches created before Prefect is imported and its server is up (flows.run.early);
    the run's id, which the flow run then continues."""
    from flows.entry import RunWiring, run_extract

    if not early.eligible(settings, a.mode, finish_by=a.finish_by, workers=a.workers):
        return None
    summary = run_extract(
        _run_params(a, recipe, overrides, submit_only=True),
        settings=settings,
        wiring=RunWiring(progress=False),
    )
    return str(summary["run_id"])


def cmd_resume(a: argparse.Namespace) -> int:
    _own_processes(prefect=not a.no_prefect)
    _adopt_server()
    from flows.entry import resume_run
    from flows.orchestration.prefect_flows import resume

    _quiet_prefect_services()  # after the import: Prefect's console handlers exist now

    store = cli_store(a)
    check_store(store, store_uri(a))
    known_run(store, a.run_id)
    given = {"store": a.store, "max_cost_usd": a.max_cost_usd, "concurrency": a.concurrency}
    if a.no_prefect:
        return _finish(resume_run(a.run_id, **given))
    return _finish(resume.with_options(retries=0)(a.run_id, progress=True, **given))

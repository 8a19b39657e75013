"""The docmill command line. Errors reach the user here as one line.

Exit codes (the table in README.md):
  0  the run finished (documents that failed for good or need review are reported, not errors)
  2  bad input or configuration: a flag, setting, recipe, run id, store or source (nothing was sent)
  3  the run stopped on an error or a systemic failure, or documents failed transiently;
     `docmill resume RUN_ID` continues it
  4  the run's budget is spent; resume with a higher --max-cost-usd
  5  another process drives this run (its lease has not expired), or another live run of the
     same recipe and model covers the same documents (the overlap check; nothing was sent)
  6  the run finished but its integration pass is partial or failed (see the report); the next
     run of the same source asks again only what is missing
  130 interrupted (SIGINT), 143 terminated (SIGTERM): resume continues it
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flows import cli_args, prefect_boot
from flows.cli_checks import check_store, known_run
from tasks.reporting.summary import integration_text

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore

EXIT_OK, EXIT_INPUT, EXIT_RUN, EXIT_BUDGET, EXIT_LEASE, EXIT_INTERRUPT = 0, 2, 3, 4, 5, 130
EXIT_INTEGRATION = 6


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
    from docmill.errors import DocmillError

    exc = record.exc_info[1] if record.exc_info else None
    if isinstance(exc, DocmillError):
        return False
    extract = sys.modules.get("flows.extract")
    return extract is None or not extract.is_stop_record(record)


def _quiet_prefect() -> None:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_LOGGING_LOG_PRINTS", "false")
    os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "ERROR")


def _own_processes(*, prefect: bool = False) -> None:
    """Stop what a killed earlier run left running (one line says so), and make the Prefect server
    this run may start die with it, however it ends (docmill.processes, flows.prefect_server);
    `prefect`: the run goes through Prefect, its temporary server starts now (flows.prefect_boot)."""
    from docmill.processes import reap_stale, reaped_line
    from docmill.settings import get_settings

    stale = reap_stale(get_settings().runtime_dir)
    if stale:
        print(reaped_line(stale), file=sys.stderr)
    if prefect and get_settings().prefect_prespawn:
        prefect_boot.prespawn(get_settings().runtime_dir)  # boots while the rest imports
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():  # else no server starts (and its heavy module stays unimported)
        from flows.prefect_server import adopt_ephemeral_server

        if adopt_ephemeral_server():
            return
    prefect_boot.discard()  # a profile names a server, or a test harness runs one: not needed


def _summary_line(s: dict[str, Any]) -> str:
    st = s["states"]
    return (
        f"docmill: run {s['run_id']} {s['phase']}: {st['succeeded']} succeeded, {st['needs_review']} need review, "
        f"{st['failed']} failed{_retryable(s)}, {st.get('skipped', 0)} skipped of {s['documents']} documents ({s['from_ledger']} reused from the ledger); "
        f"cost ${s['cost_usd']:.4f}; {s['conflicts']} conflict{'' if s['conflicts'] == 1 else 's'} across documents.\n"
        f"  {integration_text(s)}\n"
        f"  report: {s['report']}\n  exports: {s['exports']}\n  review queue: {s['review_queue']}"
    )


def _retryable(s: dict[str, Any]) -> str:
    n = int(s.get("retryable") or 0)
    return f" ({n} transiently: resume retries them)" if n else ""


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
    if a.workers:  # workers need a Prefect server with a pool: no temporary one is started for them
        from flows.spread import PrefectLauncher

        PrefectLauncher.needs_server()
    # then at once: Prefect's temporary server boots while the rest imports (flows.prefect_boot)
    _own_processes(prefect=not a.no_prefect and not a.workers)
    from docmill.settings import get_settings
    from flows.extract import _settings, extract, run_extract

    _quiet_prefect_services()  # after the import: Prefect's console handlers exist now

    if a.finish_by:  # a bad time is one line before anything starts
        from flows.extract import deadline_iso

        a.finish_by = deadline_iso(a.finish_by)
    if not os.path.exists(a.source) and not a.source.startswith("s3://"):
        from docmill.errors import InputError

        raise InputError(f"source {a.source!r} does not exist", hint="give a folder or an s3://bucket/prefix")
    check_store(_store(a), _store_uri(a))
    recipe = a.recipe or get_settings().recipe
    overrides = {
        "allow_empty": a.allow_empty or None,
        "cost.max_doc_cost_usd": a.max_doc_cost_usd,
        "inventory.follow_symlinks": a.follow_symlinks or None,
        "chunk_size": a.chunk_size,
        "cost.max_cost_usd": a.max_cost_usd,
        "api.concurrency": a.concurrency,
        "api.model": a.model,
        "inventory.include": a.include,
        "inventory.exclude": a.exclude,
        "integration.mode": a.integration,
    }
    if a.no_prefect:
        if a.workers:
            from docmill.errors import InputError

            raise InputError("--workers spreads a run over Prefect workers", hint="drop --no-prefect")
        summary = run_extract(
            a.source, recipe, mode=a.mode, run_id=a.run_id, settings=_settings(a.store, overrides),
            new_run=a.new_run, given=overrides, finish_by=a.finish_by,
        )  # fmt: skip
    else:  # in the foreground the person (or cron) running the command is the retry
        summary = extract.with_options(retries=0)(
            a.source,
            recipe,
            store=a.store,
            mode=a.mode,
            run_id=a.run_id,
            chunk_size=a.chunk_size,
            max_cost_usd=a.max_cost_usd,
            concurrency=a.concurrency,
            model=a.model,
            include=a.include,
            exclude=a.exclude,
            integration=a.integration,
            max_doc_cost_usd=a.max_doc_cost_usd,
            follow_symlinks=a.follow_symlinks,
            allow_empty=a.allow_empty,
            progress=True,
            new_run=a.new_run,
            workers=a.workers,
            finish_by=a.finish_by,
        )
    return _finish(summary)


def cmd_resume(a: argparse.Namespace) -> int:
    _own_processes(prefect=not a.no_prefect)
    from flows.extract import resume, resume_run

    _quiet_prefect_services()  # after the import: Prefect's console handlers exist now

    store = _store(a)
    check_store(store, _store_uri(a))
    known_run(store, a.run_id)
    cap, conc = a.max_cost_usd, a.concurrency
    if a.no_prefect:
        summary = resume_run(a.run_id, store=a.store, max_cost_usd=cap, concurrency=conc)
    else:
        summary = resume.with_options(retries=0)(a.run_id, store=a.store, max_cost_usd=cap, concurrency=conc)
    return _finish(summary)


def _store_uri(a: argparse.Namespace) -> str:
    from docmill.settings import get_settings

    return str(getattr(a, "store", None) or get_settings().store)


def _store(a: argparse.Namespace) -> Any:
    from checkpoints.store import open_store
    from docmill.settings import get_settings

    return open_store(_store_uri(a), endpoint_url=get_settings().s3_endpoint_url)


def _run_id(a: argparse.Namespace, store: ObjectStore) -> str | None:
    from checkpoints.manifest import ManifestStore

    if a.run_id:
        known_run(store, a.run_id)
        return str(a.run_id)
    return max(ManifestStore(store).list_runs(), default=None)


def cmd_status(a: argparse.Namespace) -> int:
    from tasks.reporting.status import run_status, status_text

    store = _store(a)
    run_id = _run_id(a, store)
    if run_id is None:
        print(_no_runs(a))
        return EXIT_OK
    st = run_status(store, run_id)
    if a.json:
        print(
            json.dumps(
                st["manifest"] | {"status": {k: v for k, v in st.items() if k != "manifest"}},
                indent=2,
                sort_keys=True,
            )
        )
    else:
        print(status_text(st))
    return EXIT_OK


def cmd_runs(a: argparse.Namespace) -> int:
    from tasks.reporting.status import runs_table

    lines = runs_table(_store(a))
    print("\n".join(lines) if len(lines) > 1 else _no_runs(a))
    return EXIT_OK


def _no_runs(a: argparse.Namespace) -> str:
    """ "No runs" naming the store looked in (a relative default depends on the current folder)."""
    return f"docmill: no runs in the store {_store_shown(a)} yet; {NO_RUNS_HINT}"


NO_RUNS_HINT = "give the store of your runs with --store PATH (or DOCMILL_STORE)"


def _store_shown(a: argparse.Namespace) -> str:
    uri = _store_uri(a)
    return uri if uri.startswith("s3://") or os.path.isabs(uri) else f"{uri} ({os.path.abspath(uri)})"


def _review_target(a: argparse.Namespace, store: Any) -> tuple[str, str | None]:
    """(run id, doc id) of a `review` command: the run defaults to the newest; `review show DOC_ID`
    (one argument that is not a run) is a document of the newest run."""
    from checkpoints.manifest import ManifestStore
    from docmill.errors import InputError

    runs = set(ManifestStore(store).list_runs())
    run_id, doc_id = a.run_id, a.doc_id
    if a.action == "show" and doc_id is None and run_id is not None and run_id not in runs:
        run_id, doc_id = None, run_id
    run_id = run_id or max(runs, default=None)
    if run_id is None:
        raise InputError(f"no runs in the store {_store_shown(a)} yet", hint=NO_RUNS_HINT)
    if run_id not in runs:
        raise InputError(f"no run {run_id!r} in this store", hint="see `docmill runs`")
    return run_id, doc_id


def _write_out(text: str, path: str | None) -> None:
    """`--out FILE`, else standard output."""
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


def cmd_review(a: argparse.Namespace) -> int:
    from checkpoints.review_queue import ReviewQueue
    from docmill.errors import InputError

    store = _store(a)
    run_id, doc_id = _review_target(a, store)
    if a.action in ("accept", "correct", "reject"):
        if not doc_id:
            raise InputError(f"`docmill review {a.action}` needs a document id", hint="RUN_ID DOC_ID")
        return cmd_decide(a, store, run_id, doc_id)
    q = ReviewQueue(store, run_id)
    if a.action == "list":
        from checkpoints.decisions import ReviewDecisions

        items = list(q.list())
        decided = ReviewDecisions(store, run_id).in_force()
        for item in items:
            first = str((item.get("errors") or [""])[0])[:100]
            d = decided.get(str(item.get("doc_id")))
            state = f"{d.action.value} by {d.by}" if d else "undecided"
            print(
                f"{item.get('doc_id')}\t{item.get('reason')}\t{item.get('attempts', 0)} attempt(s)\t{state}\t{first}"
            )
        print(f"{len(items)} item(s) to review in run {run_id}", file=sys.stderr)
    elif a.action == "show":
        if not doc_id:
            raise InputError(
                "`docmill review show` needs a document id", hint=f"see `docmill review list {run_id}`"
            )
        from checkpoints.decisions import ReviewDecisions
        from checkpoints.outcomes import OutcomeLog
        from tasks.review import review_view

        outcome = next((o for o in OutcomeLog(store, run_id).all() if o["doc_id"] == doc_id), None)
        history = ReviewDecisions(store, run_id).history(doc_id)
        shown = review_view(run_id, doc_id, q.get(doc_id), outcome, history)
        if shown is None:
            state = f" (state: {outcome['state']})" if outcome else ""
            raise InputError(
                f"no review item or decision for {doc_id!r} in run {run_id}{state}",
                hint=f"see `docmill review list {run_id}`",
            )
        print(json.dumps(shown, indent=2, sort_keys=True, ensure_ascii=False))
    elif a.labels:  # the decisions as an `eval --labels` file
        from checkpoints.decisions import ReviewDecisions
        from checkpoints.outcomes import OutcomeLog
        from tasks.review import label_records

        records = label_records(
            list(OutcomeLog(store, run_id).all()), ReviewDecisions(store, run_id).in_force()
        )
        lines = "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in records)
        _write_out(lines, a.out)
        print(f"{len(records)} labelled document(s) from review decisions in run {run_id}", file=sys.stderr)
    else:
        lines = "".join(json.dumps(item, sort_keys=True, ensure_ascii=False) + "\n" for item in q.list())
        _write_out(lines, a.out)
    return EXIT_OK


# ---- review decisions: accept | correct | reject (append-only, who and when) ----------------


def cmd_decide(a: argparse.Namespace, store: Any, run_id: str, doc_id: str) -> int:
    """Record a reviewer's decision on one document of a run."""
    import getpass

    from checkpoints.decisions import Action, ReviewDecisions
    from checkpoints.manifest import ManifestStore
    from checkpoints.outcomes import OutcomeLog
    from docmill.errors import DocmillError, InputError
    from tasks.recipes import load_recipe
    from tasks.review import corrected_output, parse_assignments

    action = Action(a.action)
    values = parse_assignments(a.set or [])
    if action is Action.ACCEPT and values:
        raise InputError("accept takes no --set", hint="use `docmill review correct ... --set field=value`")
    if action is Action.CORRECT and not values:
        raise InputError("correct needs at least one --set field=value", hint="e.g. --set total=1234.50")
    manifest = ManifestStore(store).load(run_id)
    outcome = next((o for o in OutcomeLog(store, run_id).all() if o["doc_id"] == doc_id), None)
    if outcome is None:
        raise InputError(
            f"no document {doc_id!r} in run {run_id}", hint=f"see `docmill review list {run_id}`"
        )
    if values:
        try:
            recipe = load_recipe(manifest.recipe)
        except DocmillError:
            recipe = None
        corrected_output(recipe, outcome.get("output") or {}, values)  # refuses what does not fit the schema
    by = a.by or os.environ.get("DOCMILL_REVIEWER") or getpass.getuser()
    d = ReviewDecisions(store, run_id).record(doc_id, action, by=by, values=values, note=a.note)
    print(
        f"docmill: {doc_id} in run {run_id}: {action.value} by {by} (decision #{d.seq}); "
        f"`docmill report {run_id}` applies it to the report and exports"
    )
    return EXIT_OK


def cmd_report(a: argparse.Namespace) -> int:
    """Write report.md, report.html and the exports again from the store (any phase)."""
    from checkpoints.manifest import ManifestStore
    from checkpoints.outcomes import OutcomeLog
    from tasks.reporting.report import write_report

    store = _store(a)
    run_id = _run_id(a, store)
    if run_id is None:
        print(_no_runs(a))
        return EXIT_OK
    m = ManifestStore(store).load(run_id)
    outcomes = sorted(OutcomeLog(store, run_id).all(), key=lambda o: o["doc_id"])
    integration = store.get_json_or_none(f"runs/{run_id}/integration.json")
    keys = write_report(store, m.model_dump(mode="json"), outcomes, integration)
    root = store.uri.rstrip("/")
    print("\n".join(f"{name}: {root}/{key}" for name, key in keys.items()))
    return EXIT_OK


def cmd_estimate(a: argparse.Namespace) -> int:
    from flows.extract import _settings
    from tasks.estimate import estimate_source

    overrides = {
        "api.model": a.model,
        "api.max_tokens": a.max_tokens,
        "inventory.include": a.include,
        "inventory.exclude": a.exclude,
    }
    settings = _settings(getattr(a, "store", None), overrides)
    print("\n".join(estimate_source(a.source, a.recipe or settings.recipe, settings).lines()))
    return EXIT_OK


def cmd_eval(a: argparse.Namespace) -> int:
    from checkpoints.decisions import ReviewDecisions
    from checkpoints.outcomes import OutcomeLog
    from docmill.errors import InputError
    from tasks.evaluate import (
        doc_types,
        eval_lines,
        evaluate,
        load_labels,
        mismatches_csv,
        queue_sample,
        stratified_sample,
    )
    from tasks.review import labels_from_decisions

    store = _store(a)
    known_run(store, a.run_id)
    outcomes = list(OutcomeLog(store, a.run_id).all())
    reviewed = labels_from_decisions(outcomes, ReviewDecisions(store, a.run_id).in_force())
    if not a.labels and not a.sample and not reviewed:
        raise InputError(
            "nothing to do", hint="give --labels FILE.jsonl and/or --sample N, or record review decisions"
        )
    if not outcomes:
        raise InputError(f"run {a.run_id} has no outcomes yet", hint="see `docmill runs`")
    types = doc_types(store, a.run_id)
    if a.labels or reviewed:
        from_file = load_labels(a.labels) if a.labels else {}
        labels = {**reviewed, **from_file}  # a labels file wins for a document in both
        print(f"labels: {len(labels)} document(s): {_label_sources(a.labels, from_file, reviewed)}")
        result = evaluate(outcomes, labels, types)
        print("\n".join(eval_lines(result)))
        if a.mismatches:
            with open(a.mismatches, "wb") as f:
                f.write(mismatches_csv(result))
            print(f"mismatches: {len(result['mismatches'])} row(s) written to {a.mismatches}")
    if a.sample:
        from checkpoints.review_queue import ReviewQueue

        queued = {str(i.get("doc_id")) for i in ReviewQueue(store, a.run_id).list()}
        picked = stratified_sample(outcomes, types, a.sample, seed=a.seed, exclude=queued)
        added = queue_sample(store, a.run_id, picked, types)
        print(f'sample: {added} succeeded document(s) added to the review queue (reason "sample")')
    return EXIT_OK


def _label_sources(path: str | None, from_file: dict[str, Any], reviewed: dict[str, Any]) -> str:
    """Where `eval`'s labels came from: the file (if one was given) and the review decisions."""
    parts = [f"{len(from_file)} from {path}"] if path else []
    decided = len(set(reviewed) - set(from_file))
    if decided or not path:
        parts.append(f"{decided} from review decisions")
    return ", ".join(parts)


def cmd_doctor(a: argparse.Namespace) -> int:
    """Check the configuration and the endpoint (real API with a key, else the emulator)."""
    import anthropic

    from docmill.settings import get_settings
    from flows.context import api_endpoint
    from tasks.doctor import run_doctor
    from tasks.recipes import BuiltIn, load_recipe

    settings = get_settings()
    if a.model:  # as `docmill run --model` pins it
        settings = settings.model_copy(update={"api": settings.api.model_copy(update={"model": a.model})})
    recipes = [load_recipe(r) for r in (a.recipe or [b.value for b in BuiltIn])]
    with api_endpoint(settings) as endpoint:
        sdk = anthropic.Anthropic(
            api_key=endpoint.api_key, base_url=endpoint.base_url, max_retries=2, timeout=60.0
        )
        checks = run_doctor(settings, sdk, recipes)
        sdk.close()
    where = "the emulator (offline)" if endpoint.offline else (endpoint.base_url or "the Anthropic API")
    print(f"docmill doctor against {where}:")
    for check in checks:
        print("  " + check.line())
    failed = [c for c in checks if not c.ok]
    total = sum(c.usd for c in checks)
    warned = sum(1 for c in checks if c.ok and c.warn)
    note = f" ({warned} with a warning)" if warned else ""
    print(f"{len(checks) - len(failed)} of {len(checks)} checks passed{note}; the checks cost ${total:.6f}")
    for check in failed:
        print(f"docmill: doctor: {check.name}: {check.detail}", file=sys.stderr)
    return EXIT_INPUT if failed else EXIT_OK


def cmd_emulator(a: argparse.Namespace) -> int:
    from emulator.cli import main as emulator_main

    return int(emulator_main(a.rest) or 0)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": cmd_run,
    "resume": cmd_resume,
    "status": cmd_status,
    "runs": cmd_runs,
    "review": cmd_review,
    "report": cmd_report,
    "estimate": cmd_estimate,
    "doctor": cmd_doctor,
    "eval": cmd_eval,
    "emulator": cmd_emulator,
}


def build_parser() -> argparse.ArgumentParser:
    """The parser (flows/cli_args.py) with this module's exit codes as its description."""
    return cli_args.build_parser(__doc__)


TEARDOWN_SECONDS = 5.0  # after an interrupted command returned: the interpreter's exit, at most


def main(argv: list[str] | None = None) -> int:
    console = argv is None  # the `docmill` command itself (tests pass argv and go on running)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["emulator"]:  # the emulator has its own parser and --help
        from emulator.cli import main as emulator_main

        return int(emulator_main(argv[1:]) or 0)
    _quiet_prefect()
    from docmill.logs import redact
    from docmill.settings import get_settings
    from docmill.shutdown import SHUTDOWN, install, leave_within

    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help (0) or a bad command line (2, one line already printed)
        return int(e.code or 0) if not isinstance(e.code, str) else EXIT_INPUT
    try:
        raise_errors = get_settings().raise_errors
    except Exception as e:  # invalid settings: say which, in one line
        errors: list[Any] = getattr(e, "errors", lambda: [])()
        what = "; ".join(f"DOCMILL_{'__'.join(map(str, x['loc'])).upper()}: {x['msg']}" for x in errors[:3])
        print(f"docmill: ConfigError: invalid setting {redact(what or str(e))}", file=sys.stderr)
        return EXIT_INPUT
    SHUTDOWN.reset()
    restore = install(get_settings().shutdown_grace_seconds)  # SIGINT/SIGTERM: stop, finish, 130/143
    code = EXIT_RUN
    try:
        code = _dispatch(args, raise_errors)
        if console:
            sys.stdout.flush()  # a reader that went away shows here, not in the interpreter's exit
        return code
    except BrokenPipeError:  # the reader went away (`docmill status | head`): nothing left to say
        code = EXIT_OK
        if console:  # the interpreter's last flush of stdout must not complain either
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return code
    finally:
        restore()
        if console and SHUTDOWN.requested:  # what is left is teardown: it must not need a server
            leave_within(TEARDOWN_SECONDS, code)
        SHUTDOWN.reset()  # the stop belonged to this command (tests call main() again in-process)


def _dispatch(args: argparse.Namespace, raise_errors: bool) -> int:
    """Run the command; every docmill error leaves as one line and its exit code."""
    from docmill.errors import BudgetExhausted, ConfigError, DocmillError, InputError, Interrupted, LeaseHeld
    from docmill.logs import configure, current_run, redact
    from docmill.settings import get_settings
    from docmill.shutdown import EXIT_CODES, SHUTDOWN, say_stopped

    try:
        settings = get_settings()
        configure(args.log_format or settings.log_format, level=args.log_level)
        if getattr(args, "store", None):
            os.environ["DOCMILL_STORE"] = args.store
        return int(COMMANDS[args.fn](args))
    except KeyboardInterrupt:
        say_stopped("SIGINT", current_run() or getattr(args, "run_id", None))
        return EXIT_INTERRUPT
    except BrokenPipeError:
        raise  # `main` ends quietly
    except Interrupted as e:  # a signal stopped the run gracefully (docmill.shutdown)
        if raise_errors:
            raise
        say_stopped(e.signal_name, e.run_id)
        return EXIT_CODES.get(e.signal_name, EXIT_INTERRUPT)
    except DocmillError as e:
        if raise_errors:
            raise
        print(f"docmill: {redact(e.one_line())}", file=sys.stderr)
        codes = {
            BudgetExhausted: EXIT_BUDGET,
            LeaseHeld: EXIT_LEASE,
            ConfigError: EXIT_INPUT,
            InputError: EXIT_INPUT,
        }
        return next((c for t, c in codes.items() if isinstance(e, t)), EXIT_RUN)
    except Exception as e:
        if raise_errors:
            raise
        if SHUTDOWN.requested:  # whatever broke after a signal (an orchestrator gone) is the signal's
            say_stopped(SHUTDOWN.signal_name, current_run() or getattr(args, "run_id", None))
            return EXIT_CODES.get(SHUTDOWN.signal_name, EXIT_INTERRUPT)
        print(
            f"docmill: unexpected {type(e).__name__}: {redact(str(e))[:300]} "
            "(set DOCMILL_RAISE_ERRORS=1 for the traceback; resume continues the run)",
            file=sys.stderr,
        )
        return EXIT_RUN


if __name__ == "__main__":
    sys.exit(main())

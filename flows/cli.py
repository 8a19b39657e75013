"""The docmill command line. Errors reach the user here as one line.

Exit codes:
  0  the run finished (documents that failed or need review are reported, not errors)
  2  bad input or configuration (nothing was changed)
  3  the run stopped on an error; `docmill resume RUN_ID` continues it
  4  the run's budget is spent; resume with a higher --max-cost-usd
  5  another process drives this run (its lease has not expired)
  130 interrupted; resume continues it
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore

EXIT_OK, EXIT_INPUT, EXIT_RUN, EXIT_BUDGET, EXIT_LEASE, EXIT_INTERRUPT = 0, 2, 3, 4, 5, 130


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
    """False for a log record carrying a docmill error (the CLI prints it in one line)."""
    from docmill.errors import DocmillError

    exc = record.exc_info[1] if record.exc_info else None
    return not isinstance(exc, DocmillError)


def _quiet_prefect() -> None:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_LOGGING_LOG_PRINTS", "false")
    os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "ERROR")


def _summary_line(s: dict[str, Any]) -> str:
    st = s["states"]
    return (
        f"docmill: run {s['run_id']} {s['phase']}: {st['succeeded']} succeeded, {st['needs_review']} need review, "
        f"{st['failed']} failed of {s['documents']} documents ({s['from_ledger']} reused from the ledger); "
        f"cost ${s['cost_usd']:.4f}; {s['conflicts']} conflicts across documents.\n"
        f"  report: {s['report']}\n  exports: {s['exports']}\n  review queue: {s['review_queue']}"
    )


def _finish(summary: dict[str, Any]) -> int:
    """Print a run's summary; a Prefect flow returns a budget stop as a summary (exit 4)."""
    if summary.get("phase") == "budget_exhausted":
        print(f"docmill: {summary['message']}", file=sys.stderr)
        return EXIT_BUDGET
    print(_summary_line(summary))
    return EXIT_OK


def cmd_run(a: argparse.Namespace) -> int:
    from flows.extract import _settings, extract, run_extract

    _quiet_prefect_services()

    if not os.path.exists(a.source) and not a.source.startswith("s3://"):
        from docmill.errors import InputError

        raise InputError(f"source {a.source!r} does not exist", hint="give a folder or an s3://bucket/prefix")
    overrides = {
        "chunk_size": a.chunk_size,
        "cost.max_cost_usd": a.max_cost_usd,
        "api.concurrency": a.concurrency,
        "api.model": a.model,
    }
    if a.no_prefect:
        summary = run_extract(
            a.source, a.recipe, mode=a.mode, run_id=a.run_id, settings=_settings(a.store, overrides),
            new_run=a.new_run, given=overrides,
        )  # fmt: skip
    else:  # in the foreground the person (or cron) running the command is the retry
        summary = extract.with_options(retries=0)(
            a.source,
            a.recipe,
            store=a.store,
            mode=a.mode,
            run_id=a.run_id,
            chunk_size=a.chunk_size,
            max_cost_usd=a.max_cost_usd,
            concurrency=a.concurrency,
            model=a.model,
            progress=True,
            new_run=a.new_run,
        )
    return _finish(summary)


def cmd_resume(a: argparse.Namespace) -> int:
    from flows.extract import resume, resume_run

    _quiet_prefect_services()
    cap, conc = a.max_cost_usd, a.concurrency
    if a.no_prefect:
        summary = resume_run(a.run_id, store=a.store, max_cost_usd=cap, concurrency=conc)
    else:
        summary = resume.with_options(retries=0)(a.run_id, store=a.store, max_cost_usd=cap, concurrency=conc)
    return _finish(summary)


def _store(a: argparse.Namespace) -> Any:
    from checkpoints.store import open_store
    from docmill.settings import get_settings

    s = get_settings()
    return open_store(getattr(a, "store", None) or s.store, endpoint_url=s.s3_endpoint_url)


def _run_id(a: argparse.Namespace, store: ObjectStore) -> str | None:
    from checkpoints.manifest import ManifestStore

    return a.run_id or max(ManifestStore(store).list_runs(), default=None)


def cmd_status(a: argparse.Namespace) -> int:
    from tasks.reporting.status import run_status, status_text

    store = _store(a)
    run_id = _run_id(a, store)
    if run_id is None:
        print("docmill: no runs in this store yet")
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
    print("\n".join(lines) if len(lines) > 1 else "docmill: no runs in this store yet")
    return EXIT_OK


def cmd_review(a: argparse.Namespace) -> int:
    from checkpoints.review_queue import ReviewQueue
    from docmill.errors import InputError

    q = ReviewQueue(_store(a), a.run_id)
    if a.action == "list":
        items = list(q.list())
        for item in items:
            first = str((item.get("errors") or [""])[0])[:100]
            print(
                f"{item.get('doc_id')}\t{item.get('reason')}\t{item.get('attempts', 0)} attempt(s)\t{first}"
            )
        print(f"{len(items)} item(s) to review in run {a.run_id}", file=sys.stderr)
    elif a.action == "show":
        if not a.doc_id:
            raise InputError(
                "`docmill review show` needs a document id", hint="see `docmill review list RUN_ID`"
            )
        shown = q.get(a.doc_id)
        if shown is None:
            raise InputError(
                f"no review item for {a.doc_id!r} in run {a.run_id}", hint="see `docmill review list RUN_ID`"
            )
        print(json.dumps(shown, indent=2, sort_keys=True, ensure_ascii=False))
    else:
        lines = "".join(json.dumps(item, sort_keys=True, ensure_ascii=False) + "\n" for item in q.list())
        if a.out:
            with open(a.out, "w", encoding="utf-8") as f:
                f.write(lines)
        else:
            sys.stdout.write(lines)
    return EXIT_OK


def cmd_report(a: argparse.Namespace) -> int:
    """Write report.md, report.html and the exports again from the store (any phase)."""
    from checkpoints.manifest import ManifestStore
    from checkpoints.outcomes import OutcomeLog
    from tasks.reporting.report import write_report

    store = _store(a)
    run_id = _run_id(a, store)
    if run_id is None:
        print("docmill: no runs in this store yet")
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

    settings = _settings(getattr(a, "store", None), {"api.model": a.model, "api.max_tokens": a.max_tokens})
    print("\n".join(estimate_source(a.source, a.recipe, settings).lines()))
    return EXIT_OK


def cmd_eval(a: argparse.Namespace) -> int:
    from checkpoints.outcomes import OutcomeLog
    from docmill.errors import InputError
    from tasks.evaluate import doc_types, eval_lines, evaluate, load_labels, queue_sample, stratified_sample

    if not a.labels and not a.sample:
        raise InputError("nothing to do", hint="give --labels FILE.jsonl and/or --sample N")
    store = _store(a)
    outcomes = list(OutcomeLog(store, a.run_id).all())
    if not outcomes:
        raise InputError(f"run {a.run_id} has no outcomes yet", hint="see `docmill runs`")
    types = doc_types(store, a.run_id)
    if a.labels:
        print("\n".join(eval_lines(evaluate(outcomes, load_labels(a.labels), types))))
    if a.sample:
        from checkpoints.review_queue import ReviewQueue

        queued = {str(i.get("doc_id")) for i in ReviewQueue(store, a.run_id).list()}
        picked = stratified_sample(outcomes, types, a.sample, seed=a.seed, exclude=queued)
        added = queue_sample(store, a.run_id, picked, types)
        print(f'sample: {added} succeeded document(s) added to the review queue (reason "sample")')
    return EXIT_OK


def cmd_emulator(a: argparse.Namespace) -> int:
    from emulator.cli import main as emulator_main

    return int(emulator_main(a.rest) or 0)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="docmill", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--store", help="state root: a folder or s3://bucket/prefix (env DOCMILL_STORE)")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="extract a source with a recipe")
    r.add_argument("source", help="a folder or s3://bucket/prefix of documents")
    r.add_argument("--recipe", default="invoices", help="invoices, code-review, or path/to/module.py:NAME")
    r.add_argument("--store", dest="store", default=argparse.SUPPRESS)
    r.add_argument("--mode", choices=["realtime", "batch", "auto"], default="realtime")
    r.add_argument("--concurrency", type=int, help="requests in flight at once")
    r.add_argument("--model", help="pinned model id for the per-file pass")
    r.add_argument("--chunk-size", type=int, help="documents per Prefect task")
    r.add_argument("--max-cost-usd", type=float, help="stop spending before this is exceeded")
    r.add_argument("--run-id", help="continue or name a run")
    r.add_argument(
        "--new-run",
        action="store_true",
        help="start a fresh run even if a stopped run of the same recipe, model and source exists "
        "(by default that run is continued)",
    )
    r.add_argument("--no-prefect", action="store_true", help="run without the Prefect engine")
    r.set_defaults(fn=cmd_run)

    rs = sub.add_parser("resume", help="continue a run from its checkpoint")
    rs.add_argument("run_id")
    rs.add_argument("--store", dest="store", default=argparse.SUPPRESS)
    rs.add_argument("--no-prefect", action="store_true")
    rs.add_argument("--max-cost-usd", type=float, help="a new cost cap (default: the run's own)")
    rs.add_argument("--concurrency", type=int, help="requests in flight at once (default: the run's own)")
    rs.set_defaults(fn=cmd_resume)

    s = sub.add_parser("status", help="phase, counts, batches, cost and ETA of a run (default: the newest)")
    s.add_argument("run_id", nargs="?")
    s.add_argument("--json", action="store_true", help="the manifest and status as JSON")
    s.set_defaults(fn=cmd_status)
    sub.add_parser("runs", help="list runs in the store").set_defaults(fn=cmd_runs)

    rv = sub.add_parser("review", help="the human review queue of a run")
    rv.add_argument("action", choices=["list", "show", "export"])
    rv.add_argument("run_id")
    rv.add_argument("doc_id", nargs="?", help="for show")
    rv.add_argument("--out", help="for export: write JSONL here instead of stdout")
    rv.set_defaults(fn=cmd_review)

    rp = sub.add_parser("report", help="write report.md, report.html and exports again")
    rp.add_argument("run_id", nargs="?")
    rp.set_defaults(fn=cmd_report)

    es = sub.add_parser("estimate", help="estimate the cost of a source, realtime vs batch (no model call)")
    es.add_argument("source")
    es.add_argument("--recipe", default="invoices")
    es.add_argument("--model", help="price this model instead of the configured one")
    es.add_argument("--max-tokens", type=int, help="max_tokens per request (worst case)")
    es.set_defaults(fn=cmd_estimate)

    ev = sub.add_parser("eval", help="per-field accuracy against labels; sample succeeded docs for review")
    ev.add_argument("run_id")
    ev.add_argument("--labels", help='JSONL: {"record": "document", "doc_id": ..., "fields": {...}} per line')
    ev.add_argument("--sample", type=int, default=0, help="add N succeeded documents (stratified) to review")
    ev.add_argument("--seed", type=int, default=0, help="random seed of the sample")
    ev.set_defaults(fn=cmd_eval)

    e = sub.add_parser(
        "emulator", help="run the offline API emulator (see `docmill emulator --help`)", add_help=False
    )
    e.add_argument("rest", nargs=argparse.REMAINDER)
    e.set_defaults(fn=cmd_emulator)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["emulator"]:  # the emulator has its own parser and --help
        from emulator.cli import main as emulator_main

        return int(emulator_main(argv[1:]) or 0)
    _quiet_prefect()
    from docmill.errors import BudgetExhausted, ConfigError, DocmillError, InputError, LeaseHeld
    from docmill.logs import configure, redact
    from docmill.settings import get_settings

    args = build_parser().parse_args(argv)
    try:
        raise_errors = get_settings().raise_errors
    except Exception as e:  # invalid settings: say which, in one line
        errors: list[Any] = getattr(e, "errors", lambda: [])()
        what = "; ".join(f"DOCMILL_{'__'.join(map(str, x['loc'])).upper()}: {x['msg']}" for x in errors[:3])
        print(f"docmill: ConfigError: invalid setting {redact(what or str(e))}", file=sys.stderr)
        return EXIT_INPUT
    try:
        settings = get_settings()
        configure(settings.log_format)
        if getattr(args, "store", None):
            os.environ["DOCMILL_STORE"] = args.store
        return int(args.fn(args))
    except KeyboardInterrupt:
        print("docmill: interrupted; `docmill resume RUN_ID` continues the run", file=sys.stderr)
        return EXIT_INTERRUPT
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
        print(
            f"docmill: unexpected {type(e).__name__}: {redact(str(e))[:300]} "
            "(set DOCMILL_RAISE_ERRORS=1 for the traceback; resume continues the run)",
            file=sys.stderr,
        )
        return EXIT_RUN


if __name__ == "__main__":
    sys.exit(main())

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
from typing import Any

EXIT_OK, EXIT_INPUT, EXIT_RUN, EXIT_BUDGET, EXIT_LEASE, EXIT_INTERRUPT = 0, 2, 3, 4, 5, 130


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


def cmd_run(a: argparse.Namespace) -> int:
    from flows.extract import _settings, extract, run_extract

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
            a.source, a.recipe, mode=a.mode, run_id=a.run_id, settings=_settings(a.store, overrides)
        )
    else:
        summary = extract(
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
        )
    print(_summary_line(summary))
    return EXIT_OK


def cmd_resume(a: argparse.Namespace) -> int:
    from flows.extract import resume, resume_run

    summary = resume_run(a.run_id, store=a.store) if a.no_prefect else resume(a.run_id, store=a.store)
    print(_summary_line(summary))
    return EXIT_OK


def _store(a: argparse.Namespace) -> Any:
    from checkpoints.store import open_store
    from docmill.settings import get_settings

    s = get_settings()
    return open_store(a.store or s.store, endpoint_url=s.s3_endpoint_url)


def cmd_status(a: argparse.Namespace) -> int:
    from checkpoints.manifest import ManifestStore

    ms = ManifestStore(_store(a))
    run_id = a.run_id or max(ms.list_runs(), default=None)
    if run_id is None:
        print("docmill: no runs in this store yet")
        return EXIT_OK
    m = ms.load(run_id)
    print(json.dumps(m.model_dump(mode="json", exclude={"config"}), indent=2, sort_keys=True))
    return EXIT_OK


def cmd_runs(a: argparse.Namespace) -> int:
    from checkpoints.manifest import ManifestStore

    ms = ManifestStore(_store(a))
    for run_id in sorted(ms.list_runs()):
        m = ms.load(run_id)
        counts = " ".join(f"{k}={v}" for k, v in sorted(m.counts.items()))
        print(f"{run_id}  {m.phase!s:<16} {m.recipe:<12} ${m.cost_usd:.4f}  {counts}")
    return EXIT_OK


def cmd_review(a: argparse.Namespace) -> int:
    from checkpoints.review_queue import ReviewQueue

    q = ReviewQueue(_store(a), a.run_id)
    if a.action == "list":
        for item in q.list():
            print(f"{item.get('doc_id')}\t{item.get('reason')}")
    elif a.action == "show":
        print(json.dumps(q.get(a.doc_id), indent=2, sort_keys=True))
    else:
        for item in q.list():
            print(json.dumps(item, sort_keys=True))
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
    r.add_argument("--no-prefect", action="store_true", help="run without the Prefect engine")
    r.set_defaults(fn=cmd_run)

    rs = sub.add_parser("resume", help="continue a run from its checkpoint")
    rs.add_argument("run_id")
    rs.add_argument("--store", dest="store", default=argparse.SUPPRESS)
    rs.add_argument("--no-prefect", action="store_true")
    rs.set_defaults(fn=cmd_resume)

    s = sub.add_parser("status", help="phase, counts and cost of a run (default: the newest)")
    s.add_argument("run_id", nargs="?")
    s.set_defaults(fn=cmd_status)
    sub.add_parser("runs", help="list runs in the store").set_defaults(fn=cmd_runs)

    rv = sub.add_parser("review", help="the human review queue of a run")
    rv.add_argument("action", choices=["list", "show", "export"])
    rv.add_argument("run_id")
    rv.add_argument("doc_id", nargs="?")
    rv.set_defaults(fn=cmd_review)

    e = sub.add_parser(
        "emulator", help="run the offline API emulator (see `docmill emulator --help`)", add_help=False
    )
    e.add_argument("rest", nargs=argparse.REMAINDER)
    e.set_defaults(fn=cmd_emulator)
    return p


def main(argv: list[str] | None = None) -> int:
    _quiet_prefect()
    from docmill.errors import BudgetExhausted, ConfigError, DocmillError, InputError, LeaseHeld
    from docmill.logs import configure, redact
    from docmill.settings import get_settings

    args = build_parser().parse_args(argv)
    raise_errors = os.environ.get("DOCMILL_RAISE_ERRORS", "").lower() in ("1", "true", "yes")
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

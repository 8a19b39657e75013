"""The `docmill` argument parser: commands, their options and help text (flows/cli/main.py runs them).

`--store`, `--log-format` and `--log-level` are accepted before or after any command: the top-level
parser sets them, and every command's parser repeats them with a suppressed default, so a value
given after the command wins and an absent one does not reset what was given before it.
"""

from __future__ import annotations

import argparse

from flows.cli.checks import OneLineParser, run_id_flag, setting_flag

RECIPE_HELP = "invoices, code-review, or path/to/module.py:NAME (default: DOCMILL_RECIPE, else invoices)"
DEFAULT_RUN = "the run (default: the newest one a process drives now, else the newest in the store)"


def _common(sub: bool) -> OneLineParser:
    """Options every command takes, before or after its name (`docmill --store X status` and
    `docmill status --store X` alike): the top level sets them, a subcommand may override them."""
    c = OneLineParser(add_help=False)
    default = argparse.SUPPRESS if sub else None  # a subcommand never resets what the top level set
    c.add_argument(
        "--store", default=default, help="state root: a folder or s3://bucket/prefix (env DOCMILL_STORE)"
    )
    c.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=default,
        help="log lines on stderr as text or one JSON object per line (env DOCMILL_LOG_FORMAT)",
    )
    c.add_argument(
        "--log-level",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        default=default,
        help="log level on stderr; INFO shows one line per API call (env DOCMILL_LOG_LEVEL)",
    )
    return c


def worker_count(text: str) -> int:
    """--workers N: 1 to 256."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 256:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid number of workers: give 1 to 256")
    return n


def _source_filters(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--include",
        action="append",
        metavar="GLOB",
        help="take only files whose path (relative to the source) matches; repeatable, e.g. '*.py' "
        "('**' spans folders, a pattern without / matches the name at any depth; default: everything)",
    )
    p.add_argument(
        "--exclude",
        action="append",
        metavar="GLOB",
        help="leave out files whose relative path matches; repeatable, e.g. 'tests/**'",
    )


def build_parser(description: str | None = None) -> argparse.ArgumentParser:
    """The `docmill` parser; `command` names the handler (flows/cli/main.py's `COMMANDS`)."""
    p = OneLineParser(
        prog="docmill",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_common(sub=False)],
    )
    sub = p.add_subparsers(dest="command", required=True)
    common: list[OneLineParser] = [_common(sub=True)]

    r = sub.add_parser("run", help="extract a source with a recipe", parents=common)
    r.add_argument("source", help="a folder or s3://bucket/prefix of documents")
    r.add_argument("--recipe", help=RECIPE_HELP)
    r.add_argument(
        "--mode",
        choices=["realtime", "batch", "auto"],
        default="realtime",
        help="realtime (Messages API), batch (Message Batches: half price, results within 24 h), or auto "
        "(batch from DOCMILL_BATCH__AUTO_THRESHOLD documents)",
    )
    r.add_argument(
        "--concurrency",
        type=setting_flag("api.concurrency", int),
        help="a ceiling on requests in flight (default: as many as the rate limits need)",
    )
    r.add_argument("--model", help="pinned model id for the per-file pass")
    r.add_argument("--chunk-size", type=setting_flag("chunk_size", int), help="documents per Prefect task")
    r.add_argument(
        "--max-cost-usd",
        type=setting_flag("cost.max_cost_usd", float),
        help="stop spending before this is exceeded",
    )
    r.add_argument(
        "--max-doc-cost-usd",
        type=setting_flag("cost.max_doc_cost_usd", float),
        help="per-document guard: a document that could cost more goes to review unsent (default $2)",
    )
    r.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="read symlinks that point outside the source and walk symlinked folders",
    )
    r.add_argument(
        "--allow-empty",
        action="store_true",
        help="a source with no files is a run of 0 documents, not an error",
    )
    r.add_argument(
        "--workers",
        type=worker_count,
        metavar="N",
        help="spread the run over N Prefect workers of the work pool (they share the organisation's rate "
        "limit; needs PREFECT_API_URL and the shard-worker deployment: deploy/README.md); not with "
        "--finish-by",
    )
    r.add_argument(
        "--finish-by",
        metavar="TIME",
        help="a deadline (+2h, 06:00, or ISO 8601): send as batches (half price) what can finish by then, "
        "and what will not realtime near it, in this one process (not with --workers); the report says "
        "which went which way, what it cost and why it switched when it did",
    )
    r.add_argument("--run-id", type=run_id_flag, help="continue or name a run")
    r.add_argument(
        "--new-run",
        action="store_true",
        help="start a fresh run even if a stopped run of the same recipe, model and source exists "
        "(by default that run is continued)",
    )
    r.add_argument(
        "--integration",
        choices=["incremental", "full", "skip"],
        help="integration pass: merge only new or changed results into this source's stored state "
        "(incremental, default), integrate everything again (full), or none (skip)",
    )
    _source_filters(r)
    r.add_argument("--no-prefect", action="store_true", help="run without the Prefect engine")

    rs = sub.add_parser(
        "resume",
        help="continue a run from its checkpoint (one process drives a run: a resume started while another "
        "drives it exits 5, sending nothing)",
        parents=common,
    )
    rs.add_argument("run_id", type=run_id_flag, help="the run to continue (see `docmill runs`)")
    rs.add_argument("--no-prefect", action="store_true", help="run without the Prefect engine")
    rs.add_argument(
        "--max-cost-usd",
        type=setting_flag("cost.max_cost_usd", float),
        help="a new cost cap (default: the run's own)",
    )
    rs.add_argument(
        "--concurrency",
        type=setting_flag("api.concurrency", int),
        help="a ceiling on requests in flight (default: the run's own)",
    )

    s = sub.add_parser(
        "status",
        help="phase, counts, batches, cost and ETA of a run (default: the one running, else the newest)",
        parents=common,
    )
    s.add_argument("run_id", nargs="?", type=run_id_flag, help=DEFAULT_RUN)
    s.add_argument("--json", action="store_true", help="the manifest and status as JSON")
    sub.add_parser(
        "runs", help="list runs in the store (the same counts and cost as `status`)", parents=common
    )

    rv = sub.add_parser(
        "review", help="the human review queue of a run; accept, correct or reject results", parents=common
    )
    rv.add_argument(
        "action",
        choices=["list", "show", "export", "accept", "correct", "reject"],
        help="list the items, show one document (needs DOC_ID; its evidence on its pages or in its text), "
        "export all as JSONL; "
        "accept / correct / reject DOC_ID's result (a decision recorded with who and when)",
    )
    rv.add_argument("run_id", nargs="?", help=DEFAULT_RUN)
    rv.add_argument(
        "doc_id",
        nargs="?",
        help="for show, accept, correct, reject: the document (`review show DOC_ID` takes the default run)",
    )
    rv.add_argument("--out", help="for export: write JSONL here instead of stdout")
    rv.add_argument(
        "--open",
        action="store_true",
        help="for show: open each cited page image (evidence boxed and labelled) in the desktop's viewer",
    )
    # review decisions (accept | correct | reject), applied by `docmill report`
    rv.add_argument(
        "--labels", action="store_true", help="for export: the decisions as an `eval --labels` file"
    )
    rv.add_argument(
        "--set", action="append", metavar="FIELD=VALUE", help="for correct/reject: the right value"
    )
    rv.add_argument("--note", help="for accept/correct/reject: why (kept with the decision)")
    rv.add_argument(
        "--by", help="for accept/correct/reject: who decides (default $DOCMILL_REVIEWER, else the user)"
    )

    rp = sub.add_parser("report", help="write report.md, report.html and exports again", parents=common)
    rp.add_argument("run_id", nargs="?", type=run_id_flag, help=DEFAULT_RUN)

    es = sub.add_parser(
        "estimate", help="estimate the cost of a source, realtime vs batch (no model call)", parents=common
    )
    es.add_argument("source", help="a folder or s3://bucket/prefix of documents")
    es.add_argument("--recipe", help=RECIPE_HELP)
    es.add_argument("--model", help="price this model instead of the configured one")
    es.add_argument(
        "--max-tokens", type=setting_flag("api.max_tokens", int), help="max_tokens per request (worst case)"
    )
    _source_filters(es)

    ev = sub.add_parser(
        "eval",
        help="per-field coverage and accuracy against labels (a file and review decisions); "
        "mismatches; sample succeeded docs for review",
        parents=common,
    )
    ev.add_argument("run_id", type=run_id_flag, help="the run to evaluate (see `docmill runs`)")
    ev.add_argument("--labels", help='JSONL: {"record": "document", "doc_id": ..., "fields": {...}} per line')
    ev.add_argument("--sample", type=int, default=0, help="add N succeeded documents (stratified) to review")
    ev.add_argument("--seed", type=int, default=0, help="random seed of the sample")
    ev.add_argument("--mismatches", metavar="FILE.csv", help="write every mismatch (document, field) as CSV")

    dr = sub.add_parser(
        "doctor",
        help="check the key, the pinned models, each recipe's schemas and the rate limits (a few cents)",
        description="Check what would otherwise fail at the first document of a night, for a few cents: "
        "the key (one count_tokens), that each pinned model answers (one tiny message each), that each "
        "recipe's per-file and integration schema is accepted, its prompt-cache prefix, and the rate "
        "limits of the key. Lines read ok, warn (passes, but act on it: a legacy or unpriced model) or "
        "FAIL; exit 0 when nothing fails, 2 with one line per failure. Without ANTHROPIC_API_KEY the "
        "checks run against the built-in emulator.",
        parents=common,
    )
    dr.add_argument(
        "--recipe",
        action="append",
        help="check this recipe: a built-in name or path/to/module.py:NAME (repeatable; default: the built-in ones)",
    )
    dr.add_argument("--model", help="check this model for the per-file pass (default: DOCMILL_API__MODEL)")

    e = sub.add_parser(
        "emulator", help="run the offline API emulator (see `docmill emulator --help`)", add_help=False
    )
    e.add_argument("rest", nargs=argparse.REMAINDER, help="the emulator's own arguments")
    return p

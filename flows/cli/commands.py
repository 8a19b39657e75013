"""The other commands: status, runs, review, report, estimate, eval, doctor, emulator (each reads the
store or the recipe; none starts a run)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from docmill.errors import DocmillError, InputError
from docmill.settings import get_settings
from flows.cli.checks import known_run
from flows.cli.exit_codes import EXIT_INPUT, EXIT_OK

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore


def store_uri(a: argparse.Namespace) -> str:
    return str(getattr(a, "store", None) or get_settings().store)


def cli_store(a: argparse.Namespace) -> Any:
    from checkpoints.store import open_store

    return open_store(store_uri(a), endpoint_url=get_settings().s3_endpoint_url)


def _run_id(a: argparse.Namespace, store: ObjectStore) -> str | None:
    if a.run_id:
        known_run(store, a.run_id)
        return str(a.run_id)
    return default_run(store)


def default_run(store: ObjectStore) -> str | None:
    """The run a command takes when none is named: the newest of those a process drives now (a
    continued run is older than the runs finished since it started), else the newest."""
    from checkpoints.active import ActiveRuns
    from checkpoints.lease import live_lease
    from checkpoints.manifest import ManifestStore

    now = time.time()
    driven = [r for r, _ in ActiveRuns(store).items() if live_lease(store, r, now)]
    return max(driven, default=None) or max(ManifestStore(store).list_runs(), default=None)


def cmd_status(a: argparse.Namespace) -> int:
    from tasks.reporting.status import run_status, status_text

    store = cli_store(a)
    run_id = _run_id(a, store)
    if run_id is None:
        print(_no_runs(a))
        return EXIT_OK
    st = run_status(store, run_id)
    if a.json:
        status = {k: v for k, v in st.items() if k != "manifest"}
        print(json.dumps(st["manifest"] | {"status": status}, indent=2, sort_keys=True))
    else:
        print(status_text(st))
    return EXIT_OK


def cmd_runs(a: argparse.Namespace) -> int:
    from tasks.reporting.status import runs_table

    lines = runs_table(cli_store(a))
    print("\n".join(lines) if len(lines) > 1 else _no_runs(a))
    return EXIT_OK


def _no_runs(a: argparse.Namespace) -> str:
    """ "No runs" naming the store looked in (a relative default depends on the current folder)."""
    return f"docmill: no runs in the store {_store_shown(a)} yet; {NO_RUNS_HINT}"


NO_RUNS_HINT = "give the store of your runs with --store PATH (or DOCMILL_STORE)"


def _store_shown(a: argparse.Namespace) -> str:
    uri = store_uri(a)
    return uri if uri.startswith("s3://") or os.path.isabs(uri) else f"{uri} ({os.path.abspath(uri)})"


def _review_target(a: argparse.Namespace, store: Any) -> tuple[str, str | None]:
    """(run id, doc id) of a `review` command: the run defaults to `default_run`; `review show DOC_ID`
    (one argument that is not a run) is a document of that run."""
    from checkpoints.manifest import ManifestStore

    runs = set(ManifestStore(store).list_runs())
    run_id, doc_id = a.run_id, a.doc_id
    if a.action == "show" and doc_id is None and run_id is not None and run_id not in runs:
        run_id, doc_id = None, run_id
    run_id = run_id or default_run(store)
    if run_id is None:
        raise InputError(f"no runs in the store {_store_shown(a)} yet", hint=NO_RUNS_HINT)
    if run_id not in runs:
        raise InputError(f"no run {run_id!r} in this store", hint="see `docmill runs`")
    return run_id, doc_id


def _write_jsonl(rows: Iterable[dict[str, Any]], path: str | None) -> None:
    """One JSON object a line, to `--out FILE`, else standard output."""
    text = "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows)
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


def cmd_review(a: argparse.Namespace) -> int:
    from checkpoints.decisions import ReviewDecisions
    from checkpoints.outcomes import OutcomeLog
    from checkpoints.review_queue import ReviewQueue
    from tasks.provenance import support_line, weakest
    from tasks.review import label_records, review_view

    store = cli_store(a)
    if a.action == "list" and a.run_id is None and default_run(store) is None:
        print(_no_runs(a))  # nothing to review, as `status` and `runs` say it
        return EXIT_OK
    run_id, doc_id = _review_target(a, store)
    if a.action in ("accept", "correct", "reject"):
        if not doc_id:
            raise InputError(f"`docmill review {a.action}` needs a document id", hint="RUN_ID DOC_ID")
        return cmd_decide(a, store, run_id, doc_id)
    q = ReviewQueue(store, run_id)
    if a.action == "list":
        items = sorted(q.list(), key=weakest)  # the least supported values first
        decided = ReviewDecisions(store, run_id).in_force()
        for item in items:
            first = str((item.get("errors") or [""])[0])[:100]
            d = decided.get(str(item.get("doc_id")))
            state = f"{d.action.value} by {d.by}" if d else "undecided"
            print(
                f"{item.get('doc_id')}\t{item.get('reason')}\t{support_line(item)}\t"
                f"{item.get('attempts', 0)} attempt(s)\t{state}\t{first}"
            )
        print(f"{len(items)} item(s) to review in run {run_id}", file=sys.stderr)
    elif a.action == "show":
        if not doc_id:
            raise InputError(
                "`docmill review show` needs a document id", hint=f"see `docmill review list {run_id}`"
            )
        outcome = next((o for o in OutcomeLog(store, run_id).all() if o["doc_id"] == doc_id), None)
        history = ReviewDecisions(store, run_id).history(doc_id)
        shown = review_view(run_id, doc_id, q.get(doc_id), outcome, history)
        if shown is None:
            raise InputError(
                f"no review item, decision or document {doc_id!r} in run {run_id}",
                hint=f"see `docmill review list {run_id}`",
            )
        if outcome is not None:
            _show_evidence(store, run_id, outcome, shown, opening=a.open)
        print(json.dumps(shown, indent=2, sort_keys=True, ensure_ascii=False))
    elif a.labels:  # the decisions as an `eval --labels` file
        records = label_records(
            list(OutcomeLog(store, run_id).all()), ReviewDecisions(store, run_id).in_force()
        )
        _write_jsonl(records, a.out)
        print(f"{len(records)} labelled document(s) from review decisions in run {run_id}", file=sys.stderr)
    else:
        _write_jsonl(q.list(), a.out)
    return EXIT_OK


def _show_evidence(
    store: ObjectStore, run_id: str, outcome: dict[str, Any], shown: dict[str, Any], *, opening: bool
) -> None:
    """`review show`: the document's evidence on standard error for the reviewer (the boxed page images'
    links, or the evidence in its text), its pages and support classes into the JSON on standard output;
    `--open` opens each boxed page image."""
    import webbrowser

    from tasks.provenance import supports
    from tasks.reporting.pages import run_documents
    from tasks.reporting.review_pages import document_evidence, evidence_lines

    evidence = document_evidence(store, run_id, outcome, run_documents(store, run_id))
    shown["support"] = supports(outcome)
    shown["pages"] = evidence.pages
    print("\n".join(evidence_lines(evidence, color=sys.stderr.isatty())), file=sys.stderr)
    if opening:
        for p in evidence.pages:
            if p["image"] and not webbrowser.open(p["image"]):
                print(f"docmill: no viewer to open {p['image']}", file=sys.stderr)


def cmd_decide(a: argparse.Namespace, store: Any, run_id: str, doc_id: str) -> int:
    """Record a reviewer's decision on one document of a run."""
    import getpass

    from checkpoints.decisions import Action, ReviewDecisions
    from checkpoints.manifest import ManifestStore
    from checkpoints.outcomes import OutcomeLog
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

    store = cli_store(a)
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
    from flows.entry import given_settings, settings_for
    from tasks.cost.estimate import estimate_source

    settings = settings_for(getattr(a, "store", None), given_settings(vars(a)))
    print("\n".join(estimate_source(a.source, a.recipe or settings.recipe, settings).lines()))
    return EXIT_OK


def cmd_eval(a: argparse.Namespace) -> int:
    from checkpoints.decisions import ReviewDecisions
    from checkpoints.outcomes import OutcomeLog
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

    store = cli_store(a)
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
    from docmill.sdk import anthropic
    from flows.run.context import api_endpoint
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

"""Everything a finished (or stopped) run leaves for people, written in one place (`write_report`):
conflict review items, report.md, report.html and the exports.

Counts add up: every inventoried document appears exactly once with its terminal state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from checkpoints.batches import BatchRecords
from checkpoints.costs import CostLedger
from checkpoints.decisions import ReviewDecisions
from checkpoints.inflight import InFlight, run_spend
from checkpoints.review_queue import ReviewQueue
from docmill.collector import relaxed_gc
from docmill.errors import DocmillError
from docmill.settings import Settings
from tasks.recipes import load_recipe
from tasks.records import Conflict, IntegrationResult, ReviewItem
from tasks.reporting.export_files import write_exports
from tasks.reporting.html import html_report
from tasks.reporting.markdown import markdown
from tasks.reporting.pages import report_pages
from tasks.reporting.results import ReportExtras, listed, listed_views
from tasks.reporting.spread import deadline_summary, spread_summary
from tasks.review import apply_decisions

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore

REPORT_UNCHANGED_ROWS = Settings.model_fields["report_unchanged_rows"].default  # a run from before it


def conflict_items(
    run_id: str, conflicts: list[Conflict], outcomes: list[dict[str, Any]]
) -> list[ReviewItem]:
    """One review item per document involved in a cross-document conflict (reason "conflict")."""
    by_doc = {o["doc_id"]: o for o in outcomes}
    items: dict[str, ReviewItem] = {}
    for c in conflicts:
        for v in c.get("values") or []:
            doc_id = v.get("doc_id")
            if not doc_id:
                continue
            o = by_doc.get(doc_id, {})
            item = items.setdefault(
                doc_id,
                {
                    "doc_id": doc_id,
                    "run_id": run_id,
                    "pass_name": "integration",
                    "reason": "conflict",
                    "errors": [],
                    "conflicts": [],
                    "raw_output": o.get("raw_output"),
                    "output": o.get("output"),
                    "provenance": o.get("provenance"),
                    "model": o.get("model"),
                    "attempts": o.get("attempts", 0),
                    "tried": [],
                },
            )
            others = "; ".join(f"{x.get('value')!r} in {x.get('doc_id')}" for x in c["values"] if x is not v)
            item["errors"].append(
                f"{c.get('key_field')} {c.get('key')!r}: field {c.get('field')} is {v.get('value')!r} here, {others}"
            )
            item["conflicts"].append(c)
    return list(items.values())


def queue_conflicts(
    store: ObjectStore, run_id: str, conflicts: list[Conflict], outcomes: list[dict[str, Any]]
) -> int:
    """Add conflict items to the run's review queue; an existing item keeps its reason and gains
    "conflict" (its errors and conflicts are merged). Returns the number of items written."""
    queue = ReviewQueue(store, run_id)
    n = 0
    for item in conflict_items(run_id, conflicts, outcomes):
        old = queue.get(item["doc_id"])
        if old and old.get("pass_name") != "integration":
            reasons = [r for r in str(old.get("reason") or "").split(";") if r and r != "conflict"]
            queue.add(
                {
                    **old,
                    "reason": ";".join([*reasons, "conflict"]),
                    "errors": [
                        *(e for e in old.get("errors") or [] if e not in item["errors"]),
                        *item["errors"],
                    ],
                    "conflicts": item.get("conflicts", []),
                }
            )
        else:
            queue.add(item)
        n += 1
    return n


def report_extras(store: Any, manifest: dict[str, Any], decided: int) -> ReportExtras:
    """The recipe's key fields (when the recipe still loads), the batch records, the decision count."""
    run_id = str(manifest["run_id"])
    try:
        key_fields = tuple(load_recipe(str(manifest.get("recipe") or "")).key_fields)
    except DocmillError:  # a user recipe that moved away: the report still renders
        key_fields = ()
    batches = (
        [b.model_dump(mode="json") for b in BatchRecords(store, run_id).load_all()]
        if manifest.get("mode") == "batch"
        else []
    )
    return {"key_fields": key_fields, "batches": batches, "decided": decided}


def write_report(
    store: ObjectStore,
    manifest: dict[str, Any],
    outcomes: list[dict[str, Any]],
    integration: IntegrationResult | None,
    costs: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Everything a finished (or stopped) run leaves for people: conflict review items,
    report.md, report.html and the exports, with the review decisions in force applied (the
    model's values kept beside the corrected ones). Returns the keys written."""
    run_id = str(manifest["run_id"])
    base = f"runs/{run_id}"
    conflicts = (
        list(integration["checks"].get("conflicts") or []) if integration and "checks" in integration else []
    )
    queue_conflicts(store, run_id, conflicts, outcomes)
    decisions = ReviewDecisions(store, run_id).in_force()
    outcomes = apply_decisions(outcomes, decisions)
    ledger = CostLedger(store, run_id)
    read = list(ledger.entries())
    entries = [e.model_dump(mode="json") for e in read]
    costs = costs if costs is not None else ledger.totals()
    left = InFlight(store, run_id).totals({i for e in read if (i := e.identity)})
    costs = {**costs, "in_flight": left}  # invariant 13: an upper bound, and answers saved before a kill
    if left["saved_usd"]:
        costs["usd"] = float(costs.get("usd", 0.0)) + left["saved_usd"]
    behind = (manifest.get("extra") or {}).get("left_behind") or []
    costs["left_behind"] = [{"run_id": r, **run_spend(store, str(r))} for r in behind]  # --new-run
    review = list(ReviewQueue(store, run_id).list())
    extra = report_extras(store, manifest, len(decisions))
    extra["spread"] = spread_summary(store, run_id)
    extra["deadline"] = deadline_summary(store, run_id, entries)
    most = int((manifest.get("config") or {}).get("report_unchanged_rows", REPORT_UNCHANGED_ROWS))
    shown, extra["unlisted"] = listed(outcomes, most)
    # pages of the listed documents only: a nightly does not render what it did not touch
    extra["pages"] = report_pages(store, run_id, shown)
    with relaxed_gc():  # many small objects (docmill.collector)
        extra["views"] = listed_views(manifest, shown, extra)  # one set for report.md and report.html
    keys = {"report.md": f"{base}/report.md", "report.html": f"{base}/report.html"}
    store.put(
        keys["report.md"],
        markdown(
            manifest, outcomes, integration, costs, review, extra=extra, entries=entries, listed=shown
        ).encode(),
    )
    html = html_report(manifest, outcomes, integration, costs, review, entries, extra=extra, listed=shown)
    store.put(keys["report.html"], html.encode())
    keys.update(write_exports(store, base, outcomes))  # copied when the results did not change
    return keys

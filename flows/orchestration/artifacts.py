"""What a finished flow run shows in Prefect besides its logs: the run summary (markdown), a link to
the HTML report, and a table of failures by reason. Read from the store (the record of the run);
publishing never breaks a run (a failing Prefect API is logged, not raised)."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

from checkpoints.outcomes import OutcomeLog
from docmill.logs import get_logger
from tasks.reporting.summary import integration_text

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore

log = get_logger("flows.orchestration.artifacts")
EXAMPLES = 5  # document ids shown per reason


def failures_by_reason(outcomes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (state, reason) of the documents that did not succeed (skipped ones included,
    with their reason), most documents first, with a few example ids."""
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for o in outcomes:
        if o.get("state") == "succeeded":
            continue
        why = str(o.get("failure_type") or o.get("reason") or "-")
        groups[(str(o.get("state")), why)].append(str(o.get("doc_id")))
    rows = [
        {"state": state, "reason": why, "documents": len(ids), "examples": ", ".join(sorted(ids)[:EXAMPLES])}
        for (state, why), ids in groups.items()
    ]
    return sorted(rows, key=lambda r: (-int(r["documents"]), r["state"], r["reason"]))


def summary_markdown(summary: dict[str, Any], report_link: str) -> str:
    states = summary["states"]
    return (
        f"# docmill run `{summary['run_id']}`\n\n| state | documents |\n|---|---|\n"
        + "".join(f"| {k} | {v} |\n" for k, v in states.items())
        + f"\nCost: ${summary['cost_usd']:.4f}. Conflicts: {summary['conflicts']}.\n\n"
        + f"{integration_text(summary, markdown=True)}\n\n"
        f"Report: [report.html]({report_link}) (text: `{summary['report']}`)  \n"
        f"Review queue: `{summary['review_queue']}`\n"
    )


def publish_run(summary: dict[str, Any], store: ObjectStore, *, link_seconds: int) -> None:
    """The summary, the report link and the failures table of a finished run, as flow-run artifacts.
    `link_seconds`: lifetime of a presigned link (0: the store path, never presigned)."""
    run_id = str(summary["run_id"])
    key = f"runs/{run_id}/report.html"
    try:
        report = store.link(key, expires_seconds=link_seconds) if link_seconds else f"{store.uri}/{key}"
        create_markdown_artifact(
            markdown=summary_markdown(summary, report),
            key="docmill-run-summary",
            description="docmill run summary",
        )
        create_link_artifact(
            link=report,
            link_text=f"docmill report of run {run_id}",
            key="docmill-report",
            description="The HTML report of this run (self-contained; a presigned link on S3 stores)",
        )
        rows = failures_by_reason(list(OutcomeLog(store, run_id).all()))
        create_table_artifact(
            table=rows
            or [{"state": "-", "reason": "every document succeeded", "documents": 0, "examples": ""}],
            key="docmill-failures",
            description=f"docmill run {run_id}: documents that did not succeed, by reason",
        )
    except Exception as e:  # artifacts are a view; the run and its store are the record
        log.warning("could not publish the Prefect artifacts of run %s: %s", run_id, e)

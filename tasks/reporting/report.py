"""Run report (markdown) and per-document exports (JSONL, CSV, optional Parquet).

Counts add up: every inventoried document appears exactly once with its terminal state.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from tasks.integration.run import compact_value

STATES = ("succeeded", "needs_review", "failed")


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested output -> flat columns (`total`, `line_items.0.amount`); `{value, evidence}` splits in two."""
    flat: dict[str, Any] = {}
    if isinstance(value, dict):
        if "value" in value and set(value) <= {"value", "evidence", "confidence", "quote"}:
            flat[prefix] = value.get("value")
            if value.get("evidence") is not None:
                flat[f"{prefix}.evidence"] = value["evidence"]
            return flat
        for k, v in value.items():
            flat.update(flatten(v, f"{prefix}.{k}" if prefix else k))
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        flat[prefix] = json.dumps(value, ensure_ascii=False)
    elif isinstance(value, list):
        flat[prefix] = "; ".join(map(str, value))
    else:
        flat[prefix] = value
    return flat


def export_rows(outcomes: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for o in outcomes:
        row = {
            "doc_id": o["doc_id"],
            "state": o["state"],
            "reason": o.get("reason") or o.get("failure_type"),
            "model": o.get("model"),
            "attempts": o.get("attempts", 0),
            "cost_usd": round(float(o.get("cost_usd") or 0.0), 6),
        }
        row.update({f"value.{k}": v for k, v in flatten(o.get("output") or {}).items()})
        rows.append(row)
    return rows


def to_jsonl(outcomes: Iterable[dict[str, Any]]) -> bytes:
    lines = []
    for o in outcomes:
        lines.append(
            json.dumps(
                {
                    "doc_id": o["doc_id"],
                    "state": o["state"],
                    "reason": o.get("reason"),
                    "failure_type": o.get("failure_type"),
                    "model": o.get("model"),
                    "values": compact_value(o.get("output")),
                    "output": o.get("output"),
                    "flags": o.get("flags") or [],
                    "cost_usd": o.get("cost_usd") or 0.0,
                },
                ensure_ascii=False,
                sort_keys=True,
            )
        )
    return ("\n".join(lines) + ("\n" if lines else "")).encode()


def to_csv(rows: list[dict[str, Any]]) -> bytes:
    columns: list[str] = []
    for r in rows:
        columns.extend(c for c in r if c not in columns)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns)
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in r.items()})
    return buf.getvalue().encode()


def to_parquet(rows: list[dict[str, Any]]) -> bytes | None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return None
    columns: list[str] = []
    for r in rows:
        columns.extend(c for c in r if c not in columns)
    table = pa.table({c: [None if r.get(c) is None else str(r.get(c)) for r in rows] for c in columns})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def summarize(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    states = Counter(o["state"] for o in outcomes)
    reasons = Counter(
        f"{o['state']}: {o.get('failure_type') or o.get('reason') or '-'}"
        for o in outcomes
        if o["state"] != "succeeded"
    )
    return {
        "documents": len(outcomes),
        "states": {s: states.get(s, 0) for s in STATES},
        "reasons": dict(reasons.most_common()),
        "from_ledger": sum(1 for o in outcomes if o.get("from_ledger")),
        "cost_usd": round(
            sum(float(o.get("cost_usd") or 0.0) for o in outcomes if not o.get("from_ledger")), 6
        ),
    }


def markdown(
    manifest: dict[str, Any],
    outcomes: list[dict[str, Any]],
    integration: dict[str, Any] | None,
    costs: dict[str, Any] | None = None,
    review: list[dict[str, Any]] | None = None,
) -> str:
    s = summarize(outcomes)
    lines = [
        f"# docmill run {manifest.get('run_id')}",
        "",
        f"Source `{manifest.get('source')}`, recipe `{manifest.get('recipe')}` v{manifest.get('recipe_version')}, "
        f"mode {manifest.get('mode')}, phase **{manifest.get('phase')}**.",
        "",
        "## Summary",
        "",
        "| state | documents |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in s["states"].items()],
        f"| **total** | **{s['documents']}** |",
        "",
        f"Reused from the ledger without an API call: {s['from_ledger']}.",
    ]
    if costs:
        lines += [
            "",
            "## Cost",
            "",
            f"Total: ${costs.get('usd', 0.0):.4f} over {costs.get('entries', 0)} billed answers "
            "(every attempt, retries and repairs included).",
            "",
        ]
        for group in ("by_pass", "by_model"):
            for k, v in sorted((costs.get(group) or {}).items()):
                lines.append(f"- {group[3:]} `{k}`: ${v:.4f}")
        tokens = costs.get("tokens") or {}
        if tokens:
            lines.append("- tokens: " + ", ".join(f"{k} {v:,}" for k, v in tokens.items() if v))
        top = sorted((costs.get("by_doc") or {}).items(), key=lambda kv: -kv[1])[:5]
        if top:
            lines.append("- most expensive documents: " + ", ".join(f"`{d}` ${u:.4f}" for d, u in top))
    if s["reasons"]:
        lines += [
            "",
            "## Not succeeded, by reason",
            "",
            "| state: reason | documents | examples |",
            "|---|---|---|",
        ]
        for reason, n in s["reasons"].items():
            examples = [
                o["doc_id"]
                for o in outcomes
                if f"{o['state']}: {o.get('failure_type') or o.get('reason') or '-'}" == reason
            ][:3]
            lines.append(f"| {reason} | {n} | {', '.join(f'`{e}`' for e in examples)} |")
    if integration:
        checks = integration.get("checks", {})
        conflicts = checks.get("conflicts", [])
        lines += ["", "## Conflicts across documents", ""]
        if not conflicts:
            lines.append("None found.")
        for c in conflicts:
            vals = "; ".join(f"`{v['value']}` in `{v['doc_id']}`" for v in c["values"])
            lines.append(f"- {c['key_field']} `{c['key']}`, field `{c['field']}`: {vals}")
        gaps = checks.get("coverage_gaps", [])
        lines += ["", "## Coverage gaps", ""]
        lines += [f"- {g.get('doc_id') or g.get('field')}: {g.get('reason')}" for g in gaps] or ["None."]
        out = integration.get("output") or {}
        findings = out.get("key_findings") or []
        if findings:
            lines += ["", "## Key findings (integration pass)", "", *[f"- {f}" for f in findings]]
        if checks.get("flags"):
            lines += ["", "## Integration flags", "", *[f"- {json.dumps(f)}" for f in checks["flags"]]]
    if review is not None:
        lines += ["", f"## Review queue ({len(review)})", ""]
        lines += [
            f"- `{r.get('doc_id')}`: {r.get('reason')}"
            + (f" — {str((r.get('errors') or [''])[0])[:160]}" if r.get("errors") else "")
            for r in review
        ] or ["Empty."]
    lines.append("")
    return "\n".join(lines)


def conflict_items(
    run_id: str, conflicts: list[dict[str, Any]], outcomes: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """One review item per document involved in a cross-document conflict (reason "conflict")."""
    by_doc = {o["doc_id"]: o for o in outcomes}
    items: dict[str, dict[str, Any]] = {}
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
    store: Any, run_id: str, conflicts: list[dict[str, Any]], outcomes: list[dict[str, Any]]
) -> int:
    """Add conflict items to the run's review queue; an existing item keeps its reason and gains
    "conflict" (its errors and conflicts are merged). Returns the number of items written."""
    from checkpoints.review_queue import ReviewQueue

    queue = ReviewQueue(store, run_id)
    n = 0
    for item in conflict_items(run_id, conflicts, outcomes):
        old = queue.get(item["doc_id"])
        if old and old.get("pass_name") != "integration":
            reasons = [r for r in str(old.get("reason") or "").split(";") if r and r != "conflict"]
            item = {
                **old,
                "reason": ";".join([*reasons, "conflict"]),
                "errors": [*(e for e in old.get("errors") or [] if e not in item["errors"]), *item["errors"]],
                "conflicts": item["conflicts"],
            }
        queue.add(item)
        n += 1
    return n


def write_report(
    store: Any,
    manifest: dict[str, Any],
    outcomes: list[dict[str, Any]],
    integration: dict[str, Any] | None,
    costs: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Everything a finished (or stopped) run leaves for people: conflict review items,
    report.md, report.html and the exports. Returns the keys written."""
    from checkpoints.costs import CostLedger
    from checkpoints.review_queue import ReviewQueue
    from tasks.reporting.html import html_report

    run_id = str(manifest["run_id"])
    base = f"runs/{run_id}"
    conflicts = ((integration or {}).get("checks") or {}).get("conflicts") or []
    queue_conflicts(store, run_id, conflicts, outcomes)
    ledger = CostLedger(store, run_id)
    entries = [e.model_dump(mode="json") for e in ledger.entries()]
    costs = costs if costs is not None else ledger.totals()
    review = list(ReviewQueue(store, run_id).list())
    keys = {
        "report.md": f"{base}/report.md",
        "report.html": f"{base}/report.html",
        "jsonl": f"{base}/exports/results.jsonl",
        "csv": f"{base}/exports/results.csv",
    }
    store.put(keys["report.md"], markdown(manifest, outcomes, integration, costs, review).encode())
    store.put(
        keys["report.html"], html_report(manifest, outcomes, integration, costs, review, entries).encode()
    )
    rows = export_rows(outcomes)
    store.put(keys["jsonl"], to_jsonl(outcomes))
    store.put(keys["csv"], to_csv(rows))
    parquet = to_parquet(rows)
    if parquet is not None:
        keys["parquet"] = f"{base}/exports/results.parquet"
        store.put(keys["parquet"], parquet)
    return keys

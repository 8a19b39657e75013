"""The run report as markdown (report.md)."""

from __future__ import annotations

import json
from typing import Any

from tasks.records import IntegrationResult
from tasks.reporting.summary import reason_label, summarize


def markdown(
    manifest: dict[str, Any],
    outcomes: list[dict[str, Any]],
    integration: IntegrationResult | None,
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
    if s["retryable"]:
        lines.append(
            f"Of the failed, {s['retryable']} failed for a transient cause (outage, overload, rate limit, "
            f"endpoint or account): `docmill resume {manifest.get('run_id')}` sends them again."
        )
    if costs:
        lines += [
            "",
            "## Cost",
            "",
            f"Total: ${costs.get('usd', 0.0):.4f} over {costs.get('entries', 0)} billed answers "
            "(every attempt, retries and repairs included).",
            "",
        ]
        left = costs.get("in_flight") or {}
        if left.get("groups"):
            lines += [
                f"Possibly billed but not recorded: up to ${left['usd']:.4f} for at most {left['requests']} "
                "request(s) in flight when a run was killed (an upper bound; counted by the budget cap).",
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
            examples = [o["doc_id"] for o in outcomes if reason_label(o) == reason][:3]
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

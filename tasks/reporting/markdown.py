"""The run report as markdown (report.md): the sections of report.html, in text.

When the run started and ended; counts (skipped inputs apart from failures); the timeline;
the integration pass's key findings and flags; the recipe's view (findings by file and severity
with the quoted lines, or fields with evidence and their support classes); the values by support
class; every document with its key fields, evidence, offsets, support class and links to its page
images; conflicts and coverage gaps; failures and skipped inputs; the review queue explained; cost.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from tasks.provenance import MISSING, NO_EVIDENCE, SUPPORT_MEANING, SUPPORT_ORDER, support_counts
from tasks.records import IntegrationResult
from tasks.reporting.findings import by_file, findings_of, has_findings, severity_counts
from tasks.reporting.results import (
    DocView,
    ReportExtras,
    display_counts,
    field_stats,
    key_columns,
    listed_views,
    not_succeeded,
    queue_parts,
    where_text,
)
from tasks.reporting.spread import markdown_section
from tasks.reporting.summary import cache_line, integration_state, stop
from tasks.reporting.timeline import run_timeline, span_texts, timeline_text


def _cell(v: Any) -> str:
    return str("" if v is None else v).replace("|", "\\|").replace("\n", " ")


def _was(v: Any) -> str:
    """The model's value beside a correction: `null` when it had none (never an empty "(was )")."""
    return "null" if v is None or v == "" else _cell(v)


def stop_lines(manifest: dict[str, Any]) -> list[str]:
    note = stop(manifest)
    if note is None:
        return []
    return [
        "",
        f"**The run stopped before it was done.** {_cell(note.get('error'))}",
        "",
        f"Everything answered so far is kept; `{note.get('continue')}` continues the run"
        + (" once the cause is fixed." if note.get("kind") == "breaker" else "."),
    ]


def _when(manifest: dict[str, Any], entries: list[dict[str, Any]], extra: ReportExtras) -> list[str]:
    t = run_timeline(manifest, entries, extra.get("batches"))
    head = "Started {}, ended {}, duration {}.".format(*span_texts(t))
    unit = "documents" if t["mode"] == "realtime" else "batch requests"
    return [head, "", f"## Timeline ({unit})", "", timeline_text(t)]


def _integration(integration: IntegrationResult | None) -> list[str]:
    if not integration:
        return ["", "## Integration", "", "The integration pass did not run."]
    out = integration.get("output") or {}
    lines = ["", "## Key findings (integration pass)", ""]
    lines += [f"- {f}" for f in out.get("key_findings") or []] or ["None reported."]
    for name, items in out.items():
        if name in ("key_findings", "conflicts", "coverage_gaps") or not isinstance(items, list) or not items:
            continue
        lines += ["", f"### {name} ({len(items)})", ""]
        for i in items[:200]:
            lines.append("- " + (json.dumps(i, ensure_ascii=False)[:400] if isinstance(i, dict) else str(i)))
    flags = (integration.get("checks") or {}).get("flags") or []
    lines += ["", f"## Integration flags ({len(flags)})", ""]
    for f in flags:
        rest = {k: v for k, v in f.items() if k != "problem"} if isinstance(f, dict) else {}
        what = f.get("problem", "flag") if isinstance(f, dict) else str(f)
        lines.append(
            f"- **{what}** "
            + "; ".join(f"{k}: {json.dumps(v, ensure_ascii=False)[:300]}" for k, v in rest.items())
        )
    if not flags:
        lines.append("None: every integration answer was valid and cited known documents.")
    return lines


def _conflicts(integration: IntegrationResult | None) -> list[str]:
    if not integration:
        return []
    checks = integration.get("checks", {})
    lines = ["", "## Conflicts across documents", ""]
    conflicts = checks.get("conflicts", [])
    if not conflicts:
        lines.append("None found.")
    for c in conflicts:
        vals = "; ".join(f"`{v['value']}` in `{v['doc_id']}`" for v in c["values"])
        lines.append(f"- {c['key_field']} `{c['key']}`, field `{c['field']}`: {vals}")
    gaps = checks.get("coverage_gaps", [])
    lines += ["", "## Coverage gaps", ""]
    lines += [f"- {g.get('doc_id') or g.get('field')}: {g.get('reason')}" for g in gaps] or ["None."]
    return lines


def _findings(outcomes: list[dict[str, Any]], recipe: str) -> list[str]:
    findings = findings_of(outcomes)
    counts = ", ".join(f"{n} {s}" for s, n in severity_counts(findings).items() if n)
    lines = [
        "",
        f"## Findings by file and severity ({recipe})",
        "",
        f"{len(findings)} finding(s): {counts or 'none'}.",
    ]
    for file, fs in by_file(findings).items():
        lines += ["", f"### `{file}`", ""]
        for f in fs:
            lines.append(f"- **{f['severity']}** `{file}:{f['lines']}` {f['category']}: {f['message']}")
            lines += ["", "  ```", *(f"  {q}" for q in f["quote"].splitlines()), "  ```"]
    return lines


def _fields(views: list[DocView]) -> list[str]:
    lines = [
        "",
        "## Fields with evidence",
        "",
        "| field | stated in | " + " | ".join(SUPPORT_ORDER) + " | example with evidence |",
        "|---|---|" + "---|" * len(SUPPORT_ORDER) + "---|",
    ]
    for name, s in field_stats(views).items():
        example = ""
        if s.example:
            doc_id, f = s.example
            where = f" ({where_text(f)})" if where_text(f) else ""
            example = f"`{doc_id}`: {_cell(f['value'])} — «{_cell(f['evidence'])}»{where}"
        support = " | ".join(str(s.support[c]) for c in SUPPORT_ORDER)
        lines.append(f"| {name} | {s.stated} | {support} | {example} |")
    return lines


def support_lines(outcomes: list[dict[str, Any]]) -> list[str]:
    """The values of every document by support class, least supported first, each class explained."""
    counts = support_counts(outcomes)
    if not any(counts.values()):
        return []
    lines = ["", "Values by support (least supported first):", ""]
    lines += [f"- {c}: {counts[c]} — {SUPPORT_MEANING[c]}" for c in SUPPORT_ORDER]
    return lines


def page_links(pages: Any) -> dict[str, str]:
    """doc id -> links to its page images beside the report (` ([p. 1](pages/…-p1.jpg))`)."""
    links: dict[str, list[str]] = defaultdict(list)
    for v in pages or []:
        if v.image:
            links[v.doc_id].append(f"[p. {v.page}]({_cell(v.image)})")
    return {d: f" ({', '.join(ls)})" for d, ls in links.items()}


def unlisted_lines(n: int) -> list[str]:
    """Where the documents left out of the tables are (nothing when none is)."""
    if not n:
        return []
    return [
        "",
        f"{n} documents unchanged since an earlier run (succeeded, results reused from the ledger) are "
        "counted above but not listed here or under the fields; every document is in "
        "[exports/results.csv](exports/results.csv) and [results.jsonl](exports/results.jsonl).",
    ]


def _documents(views: list[DocView], columns: list[str], pages: dict[str, str]) -> list[str]:
    lines = ["", f"## Documents ({len(views)})", "", "| document | state | " + " | ".join(columns) + " |"]
    lines.append("|---|---|" + "---|" * len(columns))
    for v in views:
        by = {f["name"]: f for f in v["fields"]}
        cells = []
        for c in columns:
            f = by.get(c)
            if f is None:
                n = v["items"].get(c)
                cells.append("" if n is None else f"{n} item(s)")
                continue
            shown = _cell(f["value"]) + (f" (was {_was(f['original'])})" if f["corrected"] else "")
            if f["evidence"]:
                if f.get("page") is not None or not f.get("verified", True):
                    where = f" @{where_text(f)}"
                else:
                    where = f" @{f['start']}–{f['end']}" if f["start"] is not None else ""
                shown += f" «{_cell(f['evidence'])[:120]}»{where}"
            cells.append(shown + (f" · {f['support']}" if f["support"] not in (MISSING, NO_EVIDENCE) else ""))
        review = f" ({v['review']['action']}ed by {v['review']['by']})" if v["review"] else ""
        state = v["state"] + review + (f": {_cell(v['why'])}" if v["why"] else "")
        state += f" ({_cell(v['note'])})" if v.get("note") else ""
        link = f" ([result]({_cell('../../' + v['result_key'])}))" if v["result_key"] else ""
        link += f" ([responses]({_cell('../../' + v['responses_key'])}))" if v["responses_key"] else ""
        link += pages.get(v["doc_id"], "")
        lines.append(f"| `{_cell(v['doc_id'])}`{link} | {state} | " + " | ".join(cells) + " |")
    return lines


def _not_succeeded(views: list[DocView]) -> list[str]:
    groups = not_succeeded(views)
    if not groups:
        return []
    lines = [
        "",
        "## Not succeeded: failures and skipped inputs",
        "",
        "| state | reason | documents | examples |",
        "|---|---|---|---|",
    ]
    for state, why, docs in groups:
        examples = ", ".join(f"`{d['doc_id']}`" for d in docs[:3])
        lines.append(f"| {state} | {why} | {len(docs)} | {examples} |")
    return lines


def _review(review: list[dict[str, Any]], counts: dict[str, int], decided: int) -> list[str]:
    parts = queue_parts(review, counts)
    lines = [
        "",
        f"## Review queue ({len(review)})",
        "",
        f"The queue holds {len(review)} item(s): " + "; ".join(parts) + ".",
        f"{decided} review decision(s) in force.",
        "",
    ]
    lines += [
        f"- `{r.get('doc_id')}`: {r.get('reason')}"
        + (f" — {str((r.get('errors') or [''])[0])[:160]}" if r.get("errors") else "")
        for r in review
    ] or ["Empty."]
    return lines


def _decisions(outcomes: list[dict[str, Any]]) -> list[str]:
    """Every review decision in force: who, when, each corrected field with the model's value."""
    marked = [o for o in outcomes if o.get("review")]
    if not marked:
        return []
    lines = ["", f"## Review decisions ({len(marked)})", ""]
    for o in marked:
        mark = o["review"]
        fixes = "; ".join(
            f"{k} {_cell(c.get('to'))} (was {_was(c.get('from'))})"
            for k, c in (mark.get("corrections") or {}).items()
        )
        note = f" — {_cell(mark.get('note'))}" if mark.get("note") else ""
        lines.append(
            f"- `{_cell(o['doc_id'])}`: {mark['action']} by {mark['by']} at {mark['at']}"
            + (f": {fixes}" if fixes else "")
            + note
        )
    return lines


def _costs(costs: dict[str, Any]) -> list[str]:
    notes = [
        f"Total: ${costs.get('usd', 0.0):.4f} over {costs.get('entries', 0)} billed answers "
        "(every attempt, retries and repairs included)."
    ]
    left = costs.get("in_flight") or {}
    if left.get("saved_answers"):
        notes.append(
            f"Saved before a kill: {left['saved_answers']} answer(s), ${left['saved_usd']:.4f} (in the total), "
            "costed from the response log."
        )
    if left.get("requests"):
        notes.append(
            f"Possibly billed but not recorded: up to ${left['usd']:.4f} for at most {left['requests']} "
            "request(s) in flight when a process was killed (an upper bound; counted by the budget cap)."
        )
    for run in costs.get("left_behind") or []:
        notes.append(
            f"Run `{run['run_id']}` stopped over these documents and was not continued (this run was started "
            f"with --new-run): ${run['recorded_usd'] + run['saved_usd']:.4f} recorded"
            + (
                f", up to ${run['possibly_usd']:.4f} more possibly billed by at most {run['possibly_requests']} "
                "request(s) in flight when it was killed"
                if run["possibly_requests"]
                else ""
            )
            + " (not in this run's total)."
        )
    if costs.get("possibly_billed"):
        notes.append(
            f"**Possibly billed:** {costs['possibly_billed']} request(s) timed out or broke after they were "
            f"sent; counted at their upper bound (${costs.get('possibly_billed_usd', 0.0):.4f}, in the total)."
        )
    if costs.get("unpriced"):
        notes.append(
            f"**Unpriced:** {costs['unpriced']} answer(s) of "
            f"{', '.join(f'`{m}`' for m in costs.get('unpriced_models') or [])} have no price: their "
            f"{costs.get('unpriced_tokens', 0):,} tokens are counted below, their cost is not in the total "
            "(declare a price with DOCMILL_PRICES or DOCMILL_PRICES_FILE)."
        )
    lines = ["", "## Cost", ""]
    for note in notes:  # paragraphs, each followed by a blank line
        lines += [note, ""]
    for group in ("by_pass", "by_model"):
        for k, v in sorted((costs.get(group) or {}).items()):
            lines.append(f"- {group[3:]} `{k}`: ${v:.4f}")
    tokens = costs.get("tokens") or {}
    if tokens:
        lines.append("- tokens: " + ", ".join(f"{k} {v:,}" for k, v in tokens.items() if v))
    if tokens.get("thinking_tokens"):
        lines.append(
            f"- thinking: {tokens['thinking_tokens']:,} of the output tokens were adaptive thinking, "
            f"${costs.get('thinking_usd', 0.0):.4f} of the cost (the recipe's effort sets how much)"
        )
    if cache := cache_line(costs):
        lines.append("- " + cache)
    top = sorted((costs.get("by_doc") or {}).items(), key=lambda kv: -kv[1])[:5]
    if top:
        lines.append("- most expensive documents: " + ", ".join(f"`{d}` ${u:.4f}" for d, u in top))
    return lines


def integration_state_lines(integration: IntegrationResult | None) -> list[str]:
    """The integration pass's state: complete, partial, failed or skipped, what this run merged, and
    every problem with the documents it concerns."""
    state = integration_state(integration)
    if not integration or not state:
        return ["", "Integration: not run."]
    merged = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in (integration.get("delta") or {}).items() if v)
    lines = [
        "",
        f"Integration: **{state['status'].upper() if state['bad'] else state['status']}** "
        f"({state['mode']}; {state['calls']} model call(s) this run"
        + (f"; {merged}" if merged else "; nothing new to integrate")
        + ").",
    ]
    for problem, ids, errors in state["problems"]:
        shown = ", ".join(f"`{d}`" for d in ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        lines.append(f"- {problem}" + (f" ({shown})" if ids else "") + f": {errors}")
    if state["bad"]:
        lines.append(
            "- conflicts, duplicates and gaps below are code-built and complete; the next run asks again."
        )
    return lines


def markdown(
    manifest: dict[str, Any],
    outcomes: list[dict[str, Any]],
    integration: IntegrationResult | None,
    costs: dict[str, Any] | None = None,
    review: list[dict[str, Any]] | None = None,
    *,
    extra: ReportExtras | None = None,
    entries: list[dict[str, Any]] | None = None,
    listed: list[dict[str, Any]] | None = None,
) -> str:
    """report.md. `listed`: the outcomes the per-document sections show (default: all)."""
    extra = extra or {}
    counts = display_counts(outcomes)
    shown = outcomes if listed is None else listed  # the rest: unchanged, in the exports (write_report)
    views = listed_views(manifest, shown, extra)
    recipe = str(manifest.get("recipe") or "")
    lines = [
        f"# docmill run {manifest.get('run_id')}",
        "",
        f"Source `{manifest.get('source')}`, recipe `{recipe}` v{manifest.get('recipe_version')}, "
        f"mode {manifest.get('mode')}, phase **{manifest.get('phase')}**.",
        *stop_lines(manifest),
        *_when(manifest, entries or [], extra),
        "",
        "## Summary",
        "",
        "| state | documents |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in counts.items()],
        f"| **total** | **{len(outcomes)}** |",
        "",
        f"Reused from the ledger without an API call: {sum(1 for o in outcomes if o.get('from_ledger'))}.",
        *support_lines(outcomes),
        *integration_state_lines(integration),
        *markdown_section(extra.get("spread"), extra.get("deadline")),
    ]
    lines += _integration(integration)
    lines += _findings(outcomes, recipe) if has_findings(outcomes) else _fields(views)
    columns = key_columns(recipe, tuple(extra.get("key_fields") or ()), views)
    lines += _documents(views, columns, page_links(extra.get("pages")))
    lines += unlisted_lines(int(extra.get("unlisted") or 0))
    lines += _conflicts(integration)
    lines += _not_succeeded(views)
    if review is not None:
        lines += _review(review, counts, int(extra.get("decided") or 0))
    lines += _decisions(outcomes)
    if costs:
        lines += _costs(costs)
    lines.append("")
    return "\n".join(lines)

"""A run's outcomes counted (a leaf): states, reasons, ledger reuse and cost, as every report reads them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from tasks.records import IntegrationResult, RunSummary

STATES = ("succeeded", "needs_review", "failed", "skipped")


def reason_label(o: dict[str, Any]) -> str:
    """`state: failure type or reason`, marked `(retryable)` for a transient failure (a resume
    retries it), so reports keep those apart from final failures."""
    label = f"{o['state']}: {o.get('failure_type') or o.get('reason') or '-'}"
    return f"{label} (retryable)" if o.get("retryable") else label


def summarize(outcomes: list[dict[str, Any]]) -> RunSummary:
    states = Counter(o["state"] for o in outcomes)
    reasons = Counter(reason_label(o) for o in outcomes if o["state"] != "succeeded")
    return {
        "documents": len(outcomes),
        "states": {s: states.get(s, 0) for s in STATES},
        "retryable": sum(1 for o in outcomes if o["state"] == "failed" and o.get("retryable")),
        "reasons": dict(reasons.most_common()),
        "from_ledger": sum(1 for o in outcomes if o.get("from_ledger")),
        "cost_usd": round(
            sum(float(o.get("cost_usd") or 0.0) for o in outcomes if not o.get("from_ledger")), 6
        ),
    }


def integration_text(summary: Mapping[str, Any], *, markdown: bool = False) -> str:
    """The integration pass of a run summary in one line: the CLI's summary line, and (markdown)
    the Prefect summary artifact and the flow run's warning line."""
    status = summary.get("integration", "complete")
    if status not in ("partial", "failed"):
        return f"Integration: {status}." if markdown else f"integration: {status}"
    problems = f"{summary.get('integration_problems', 0)} problem(s)"
    if markdown:
        return f"**Integration: {status.upper()}** ({problems}; see the report; the next run asks again only what is missing)."
    return (
        f"integration: {status.upper()} ({problems}; code-built conflicts, duplicates and gaps are complete; "
        "see the report; the next run asks again)"
    )


def cache_line(costs: dict[str, Any]) -> str:
    """The prompt cache in one line: tokens read and written, and what it saved ("" without either)."""
    tokens = costs.get("tokens") or {}
    if not (tokens.get("cache_read_input_tokens") or tokens.get("cache_creation_input_tokens")):
        return ""
    saved = float(costs.get("cache_saved_usd") or 0.0)
    verdict = f"saved ${saved:.4f}" if saved >= 0 else f"cost ${-saved:.4f} more (writes never read)"
    return (
        f"prompt cache: {tokens.get('cache_read_input_tokens', 0):,} input tokens read from the cache, "
        f"{tokens.get('cache_creation_input_tokens', 0):,} written; {verdict} against the same requests "
        "uncached"
    )


def stop(manifest: dict[str, Any]) -> dict[str, str] | None:
    """Why a stopped run stopped and the command that continues it (manifest `extra.stop`, written by
    the run driver); None unless the run is stopped or out of budget."""
    note = (manifest.get("extra") or {}).get("stop")
    return (
        note if manifest.get("phase") in ("stopped", "budget_exhausted") and isinstance(note, dict) else None
    )


def integration_state(integration: IntegrationResult | None) -> dict[str, Any] | None:
    """The integration pass's state as report.md and report.html show it: complete, partial or
    failed (`bad`), its mode and model calls this run, and each problem as (what, the documents it
    concerns, its errors)."""
    if not integration:
        return None
    status = str(integration.get("status") or "complete")
    return {
        "status": status,
        "bad": status in ("partial", "failed"),
        "mode": integration.get("mode", "full"),
        "calls": integration.get("calls", 0),
        "problems": [
            (
                p.get("problem"),
                p.get("doc_ids") or [],
                "; ".join(p.get("errors") or [p.get("error") or ""])[:300],
            )
            for p in integration.get("problems") or []
        ],
    }

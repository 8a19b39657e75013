"""`docmill status`: where a run is, read from the store only (no API call, no lease).

Final states come from the per-chunk outcome files written so far, progress also from the cost
ledger (a document is processed once it has an answer: batch answers are costed as each batch is
collected, before their chunks are written; realtime answers when their chunk ends), cost from
the cost ledger, batches from the batch records, and the ETA from throughput so far: documents
answered divided by the time between billed answers (each entry keeps the time its answer came).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from checkpoints.batches import BatchRecords
from checkpoints.costs import CostLedger
from checkpoints.inflight import InFlight
from checkpoints.lease import live_lease
from checkpoints.manifest import ManifestStore
from checkpoints.outcomes import OutcomeLog
from checkpoints.review_queue import ReviewQueue
from tasks.reporting.spread import deadline_lines, deadline_summary, spread_lines, spread_summary
from tasks.reporting.summary import STATES, stop
from tasks.reporting.timeline import span_text

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore

FINISHED = ("done", "canceled")


def driver_state(store: ObjectStore, run_id: str, phase: str, now: float) -> str:
    """ "running" while a process holds the run's lease, "stopped" when an unfinished run has none
    (it crashed, was killed, or stopped on its budget or an error: `docmill resume` continues it),
    "finished" when it is done or canceled."""
    if phase in FINISHED:
        return "finished"
    return "running" if live_lease(store, run_id, now) is not None else "stopped"


def _inventory_size(store: ObjectStore, run_id: str) -> int | None:
    """Documents inventoried, once the inventory is complete (None before)."""
    done = store.get_json_or_none(f"runs/{run_id}/inventory-done.json")
    if not done:
        return None
    return sum(len(store.get_json_or_none(f"runs/{run_id}/inventory/{c}.json") or []) for c in done["chunks"])


def run_status(store: ObjectStore, run_id: str, *, now: float | None = None) -> dict[str, Any]:
    """Everything `docmill status` shows, as a dict (also the `--json` output)."""
    now = time.time() if now is None else now
    m = ManifestStore(store).load(run_id)
    outcomes = list(OutcomeLog(store, run_id).all())
    states = Counter(o.get("state") for o in outcomes)
    done = sum(states.values())
    total = _inventory_size(store, run_id)
    ledger = CostLedger(store, run_id)
    entries = list(ledger.entries())
    # answers a kill left saved but not costed, and the bound of what was in flight (invariant 13)
    left = InFlight(store, run_id).totals({i for e in entries if (i := e.identity)})
    usd = sum(e.usd for e in entries) + left["saved_usd"]
    times = sorted(e.at for e in entries if e.at is not None)
    batches = BatchRecords(store, run_id).load_all() if m.mode == "batch" else []
    live = [b for b in batches if b.live]
    answered_ids = {e.doc_id for e in entries if e.pass_name == "file"}
    answered = len(answered_ids)
    # outcome files are written per chunk; answers show up at once: a document is processed once it
    # has a final outcome or an answer (kept, whether or not its chunk has ended)
    progress = done + len(answered_ids - {o.get("doc_id") for o in outcomes})
    driver = driver_state(store, run_id, str(m.phase), now)
    running = driver == "running"
    rate = None
    if times and answered:
        span = (max(now, times[-1]) if running else times[-1]) - times[0]
        rate = answered / span if span > 0 else None
    eta = max(total - progress, 0) / rate if total is not None and rate and running else None
    return {
        "run_id": m.run_id,
        "phase": str(m.phase),
        "driver": driver,
        "source": m.source,
        "recipe": m.recipe,
        "mode": m.mode,
        "created_at": m.created_at.isoformat(),
        "updated_at": m.updated_at.isoformat(),
        "documents": total,
        "done": done,
        "answered": answered,
        "progress": progress,
        "states": {s: states.get(s, 0) for s in STATES},
        "review_queue": len(ReviewQueue(store, run_id)),
        "batches_in_flight": [{"n": b.n, "phase": str(b.phase), "requests": b.request_count} for b in live],
        "batches": len(batches),
        "cost_usd": round(usd, 6),
        "in_flight": left,  # upper bound of what a crash left unrecorded (cost_usd has its saved answers)
        "budget_usd": m.budget_usd,
        "billed_answers": len(entries),
        "unpriced_answers": sum(1 for e in entries if e.unpriced),
        "possibly_billed": sum(1 for e in entries if e.possibly_billed),
        "unpriced_models": sorted({e.model for e in entries if e.unpriced}),
        "docs_per_second": rate,
        "eta_seconds": eta,
        "integration": integration_state(store, run_id),
        "spread": spread_summary(store, run_id),  # shards and workers of a run over several workers
        "deadline": deadline_summary(store, run_id, [e.model_dump(mode="json") for e in entries]),
        "stop": stop(m.model_dump(mode="json", include={"phase", "extra"})),
        "manifest": m.model_dump(mode="json", exclude={"config"}),
    }


def integration_state(store: Any, run_id: str) -> dict[str, Any] | None:
    """The integration pass's status, problems, calls and delta (None before it ran)."""
    found = store.get_json_or_none(f"runs/{run_id}/integration.json")
    if not found:
        return None
    return {
        "status": found.get("status", "complete"),
        "mode": found.get("mode"),
        "problems": len(found.get("problems") or []),
        "calls": found.get("calls"),
        "delta": found.get("delta") or {},
    }


def integration_text(st: dict[str, Any]) -> str:
    """The `integration` line of `docmill status`."""
    i = st.get("integration")
    if not i:
        return "integration not run yet"
    status = i["status"].upper() if i["status"] in ("partial", "failed") else i["status"]
    hint = f", {i['problems']} problem(s): see the report; the next run asks again" if i["problems"] else ""
    return f"integration {status} ({i['mode']}, {i['calls']} model call(s) this run{hint})"


def status_text(st: dict[str, Any]) -> str:
    """The human-readable `docmill status`."""
    total = st["documents"]
    pct = f" ({100 * st['progress'] / total:.0f}%)" if total else ""
    states = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in st["states"].items())
    budget = f" of ${st['budget_usd']:.2f} budget" if st["budget_usd"] is not None else " (no budget cap)"
    if st["eta_seconds"] is not None:
        left = round(st["eta_seconds"])
        eta = f"~{span_text(left) if left >= 60 else f'{left}s'} left at {st['docs_per_second']:.2f} docs/s"
    elif st["phase"] == "done":
        eta = "finished"
    else:
        eta = "unknown (no throughput yet)"
    note = st.get("stop") or {}
    kept = st["progress"] - st["done"]  # answered in chunks whose outcomes are not written yet
    lines = [
        f"run        {st['run_id']}  ({st['recipe']}, {st['mode']}, source {st['source']})",
        f"phase      {st['phase']}"
        + (
            f"  -> `docmill resume {st['run_id']} --max-cost-usd N`"
            if st["phase"] == "budget_exhausted"
            else f"  (stopped: no process drives it; `{note.get('continue') or 'docmill resume ' + st['run_id']}` "
            "continues it)"
            if st["driver"] == "stopped"
            else ""
        ),
        *([f"why        {note['error']}"] if note.get("error") else []),
        f"documents  {st['progress']}/{total if total is not None else '?'} processed{pct}; "
        + ("final outcomes: " if st["phase"] == "done" else "final outcomes so far: ")
        + states
        + (
            ""
            if kept <= 0 or st["phase"] == "done"
            else f"; {kept} more answered in chunks still running"
            if st["driver"] == "running"
            else f"; {kept} more answered and kept (their chunks had not ended: the resume takes them from "
            "the ledger, paying nothing again)"
        ),
        f"review     {st['review_queue']} item(s) in the review queue",
        f"batches    {len(st['batches_in_flight'])} in flight of {st['batches']}"
        + "".join(
            f"\n             #{b['n']} {b['phase']} ({b['requests']} requests)"
            for b in st["batches_in_flight"]
        ),
        f"cost       ${st['cost_usd']:.4f} so far{budget} ({st['billed_answers']} billed answers)"
        + (
            f"; {st['unpriced_answers']} unpriced (no price for {', '.join(st['unpriced_models'])}: "
            "tokens recorded, not in the total)"
            if st.get("unpriced_answers")
            else ""
        )
        + (
            f"; {st['possibly_billed']} timed out or broke after sending (possibly billed, at most)"
            if st.get("possibly_billed")
            else ""
        )
        + in_flight_text(st["in_flight"], st["driver"] == "running"),
        f"eta        {eta}",
        *_labelled("workers", spread_lines(st.get("spread"))),
        *_labelled("deadline", deadline_lines(st.get("deadline"))),
        integration_text(st),
        f"updated    {st['updated_at']}",
    ]
    return "\n".join(lines)


def in_flight_text(left: dict[str, Any], running: bool) -> str:
    """The in-flight part of the `cost` line: answers a kill left saved (in the total) and the upper
    bound of the requests in flight (checkpoints.inflight)."""
    out = ""
    if left.get("saved_answers"):
        out += (
            f"; ${left['saved_usd']:.4f} of it: {left['saved_answers']} answer(s) saved before a kill, "
            "costed from the response log"
        )
    if left.get("requests"):
        when = "in flight now or when a process was killed" if running else "in flight when it was killed"
        out += (
            f"\n             + up to ${left['usd']:.4f} possibly billed by at most {left['requests']} "
            f"request(s) {when} (not recorded; counted by the cap)"
        )
    return out


def _labelled(label: str, lines: list[str]) -> list[str]:
    """`label` before the first line, the rest indented under it."""
    return [f"{label if i == 0 else '':<10} {line}" for i, line in enumerate(lines)]


def runs_table(store: ObjectStore, *, now: float | None = None) -> list[str]:
    """One line per run, oldest first: id, phase, driver (running / stopped / finished), recipe, mode,
    documents processed of those inventoried, needs review, failed, cost. Read by `run_status`, the
    reader of `docmill status`, so both commands agree (an interrupted run shows what it did)."""
    now = time.time() if now is None else now
    head = ("RUN", "PHASE", "DRIVER", "RECIPE", "MODE", "DOCS", "REVIEW", "FAILED", "COST")
    rows: list[tuple[str, ...]] = []
    for run_id in sorted(ManifestStore(store).list_runs()):
        st = run_status(store, run_id, now=now)
        c = st["states"]
        docs = f"{st['progress']}/{st['documents'] if st['documents'] is not None else '?'}"
        left = st["in_flight"]  # `+<=$X`: what requests in flight at a kill may have billed, as in `status`
        rows.append(
            (
                run_id,
                st["phase"],
                st["driver"],
                recipe_label(st["recipe"]),
                st["mode"],
                docs,
                str(c.get("needs_review", 0)),
                str(c.get("failed", 0)),
                f"${st['cost_usd']:.4f}" + (f" +<=${left['usd']:.4f}" if left.get("requests") else ""),
            )
        )
    if not rows:
        return [" ".join(head)]
    widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]
    right = {5, 6, 7, 8}  # numbers line up on the right
    return [
        " ".join(
            v.rjust(w) if i in right else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in (head, *rows)
    ]


def recipe_label(recipe: str) -> str:
    """A recipe as `docmill runs` shows it: a built-in by name, a user recipe as `FILE.py:NAME` (its
    folder is in `docmill status`)."""
    path, sep, name = recipe.rpartition(":")
    return (
        f"{path.replace(chr(92), '/').rsplit('/', 1)[-1]}:{name}" if sep and path.endswith(".py") else recipe
    )

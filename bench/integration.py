#!/usr/bin/env python3
"""The integration pass at scale, end to end, against the emulator, and what a night costs.

    .venv/bin/python bench/integration.py --sizes 1000,10000,20000 --incremental-on 10000

For each size N: an invoice corpus from examples/make_invoices.py (planted duplicates and
conflicts, with its truth), one whole run (`run_extract`: inventory -> per-file pass -> integration
-> report; batch mode by default, an emulator process with a fast virtual clock), then the same
run again on the unchanged source. Printed per size, side by side:

- integration wall time (the `integrate` call alone) and the run's wall time;
- integration cost as a share of the per-file pass (target <= 10 %), calls, answers cut;
- completeness: planted conflicts found (every value and doc id), planted duplicates found, every
  doc id accounted for (in an entity or a gap), the status (`complete`);
- the second, unchanged run: API requests billed (emulator accounting; target 0).

With --incremental-on N: +1 and then +100 new documents on that corpus (taken from another seed,
under `incoming/`), each a new run: the new documents' per-file cost, the integration's cost and
calls (target: integration <= 2x the new documents' per-file cost plus one bounded call).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from batch_scale import start_emulator, stop_emulator  # noqa: E402  (bench/ is this script's folder)

import tasks.integration.run as integration_run  # noqa: E402
from checkpoints.costs import CostLedger  # noqa: E402
from checkpoints.store import open_store  # noqa: E402
from docmill.settings import Settings  # noqa: E402
from flows.entry import RunWiring, run_extract  # noqa: E402
from flows.run.context import RunParams  # noqa: E402
from tasks.cost.estimate import integration_estimate  # noqa: E402

TIMES: list[float] = []
_integrate = integration_run.integrate


def _timed_integrate(*args: Any, **kw: Any) -> Any:
    """The pipeline's integrate, timed (the pipeline imports it from the module at call time)."""
    start = time.perf_counter()
    try:
        return _integrate(*args, **kw)
    finally:
        TIMES.append(time.perf_counter() - start)


integration_run.integrate = _timed_integrate


def billed_count(base_url: str) -> int:
    with urllib.request.urlopen(base_url.rstrip("/") + "/_emulator/accounting", timeout=600) as r:
        return int(json.loads(r.read())["billed_count"])


def make_corpus(out: Path, count: int, seed: int) -> list[dict[str, Any]]:
    truth = out.parent / f"{out.name}.truth.jsonl"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples/make_invoices.py"),
            "--out",
            str(out),
            "--count",
            str(count),
            "--seed",
            str(seed),
            "--truth",
            str(truth),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return [json.loads(line) for line in truth.read_text().splitlines() if line.strip()]


def completeness(integration: dict[str, Any], truth: list[dict[str, Any]], ids: set[str]) -> dict[str, Any]:
    """Planted conflicts and duplicates found (with every doc id), every doc id accounted for."""
    out = integration["output"]
    conflicts = {(c["key"], c["field"]): {v["doc_id"] for v in c["values"]} for c in out["conflicts"]}
    planted = [t for t in truth if t["record"] == "conflict"]
    found_c = sum(
        1
        for t in planted
        if {v["doc_id"] for v in t["values"]} <= conflicts.get((t["invoice_number"], t["field"]), set())
    )
    dup_sets = [set(d["doc_ids"]) for d in out["duplicates"]]
    copies = [t for t in truth if t["record"] == "duplicate"]
    found_d = sum(1 for t in copies if any({t["doc_id"], t["duplicate_of"]} <= s for s in dup_sets))
    return {
        "status": integration["status"],
        "planted_conflicts_found": f"{found_c}/{len(planted)}",
        "planted_duplicates_found": f"{found_d}/{len(copies)}",
        "doc_ids_accounted": not integration["checks"].get("unaccounted")
        and set(integration["doc_ids"]) == ids,
        "unaccounted": len(integration["checks"].get("unaccounted") or []),
    }


def one_run(corpus: Path, settings: Settings, mode: str, base_url: str) -> dict[str, Any]:
    TIMES.clear()
    billed = billed_count(base_url)
    start = time.perf_counter()
    summary = run_extract(
        RunParams(str(corpus), "invoices", mode=mode), settings=settings, wiring=RunWiring(progress=False)
    )
    wall = time.perf_counter() - start
    store = open_store(settings.store)
    by_pass = CostLedger(store, summary["run_id"]).totals()["by_pass"]
    integration = store.get_json(f"runs/{summary['run_id']}/integration.json")
    return {
        "summary": summary,
        "integration": integration,
        "wall_s": round(wall, 1),
        "integration_wall_s": round(sum(TIMES), 2),
        "file_usd": round(float(by_pass.get("file", 0.0)), 4),
        "integration_usd": round(float(by_pass.get("integration", 0.0)), 4),
        "billed": billed_count(base_url) - billed,
    }


def one_bounded_call_usd(settings: Settings) -> float:
    """The most one integration call can cost: a full slice in, max_tokens out."""
    from tasks.recipes import load_recipe

    recipe = load_recipe("invoices")
    est = integration_estimate(recipe, settings, len(recipe.integration_prompt) // 4)
    return est.usd(settings.integration.slice_records, worst=True)


def add_documents(corpus: Path, spare: Path, spare_truth: list[dict[str, Any]], n: int, taken: int) -> int:
    """Copy n readable documents of the spare corpus into corpus/incoming/ (new content, new ids)."""
    docs = [t["doc_id"] for t in spare_truth if t["record"] == "document" and t["expected_status"] == "ok"]
    docs = [d for d in docs if not any(t.get("duplicate_of") == d for t in spare_truth)]
    for rel in docs[taken : taken + n]:
        dest = corpus / "incoming" / rel.replace("/", "_")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(spare / rel, dest)
    return taken + n


def incremental(
    corpus: Path, work: Path, settings: Settings, mode: str, base_url: str
) -> list[dict[str, Any]]:
    spare = work / "spare"
    spare_truth = make_corpus(spare, 400, seed=99)
    rows, taken = [], 0
    for n in (1, 100):
        taken = add_documents(corpus, spare, spare_truth, n, taken)
        r = one_run(corpus, settings, mode, base_url)
        i = r["integration"]
        bound = 2 * r["file_usd"] + one_bounded_call_usd(settings)
        rows.append(
            {
                "new_documents": n,
                "per_file_usd_new": r["file_usd"],
                "integration_usd": r["integration_usd"],
                "integration_calls": i["calls"],
                "delta": i["delta"],
                "integration_wall_s": r["integration_wall_s"],
                "status": i["status"],
                "billed": r["billed"],
                "ratio_to_new_per_file": round(r["integration_usd"] / r["file_usd"], 2)
                if r["file_usd"]
                else None,
                "target_usd": round(bound, 4),
                "within_target": r["integration_usd"] <= bound,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--sizes", default="1000,10000,20000", help="corpus sizes, comma-separated")
    p.add_argument("--mode", default="batch", choices=["batch", "realtime"], help="per-file pass mode")
    p.add_argument("--incremental-on", type=int, default=10000, help="size to add +1 and +100 to (0: none)")
    p.add_argument("--workdir", type=Path, help="where corpora and stores go (default: a temp dir)")
    p.add_argument("--clock-speed", type=float, default=600.0, help="emulator virtual s per real s")
    p.add_argument("--concurrency", type=int, default=32, help="api.concurrency (realtime)")
    args = p.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="docmill-integ-bench-"))
    emu, base_url = start_emulator(args.clock_speed)
    rows: list[dict[str, Any]] = []
    try:
        for n in [int(x) for x in args.sizes.split(",") if x]:
            here = work / f"n{n}"
            shutil.rmtree(here, ignore_errors=True)
            truth = make_corpus(here / "corpus", n, seed=7)
            ids = {t["doc_id"] for t in truth if t["record"] in ("document",)}
            settings = Settings(
                store=str(here / "store"),
                api={"base_url": base_url, "concurrency": args.concurrency},  # type: ignore[arg-type]
                batch={"poll_seconds": 0.2, "poll_max_seconds": 1.0},  # type: ignore[arg-type]
            )
            first = one_run(here / "corpus", settings, args.mode, base_url)
            again = one_run(here / "corpus", settings, args.mode, base_url)
            i = first["integration"]
            row: dict[str, Any] = {
                "documents": n,
                "mode": args.mode,
                "run_wall_s": first["wall_s"],
                "integration_wall_s": first["integration_wall_s"],
                "per_file_usd": first["file_usd"],
                "integration_usd": first["integration_usd"],
                "integration_share": round(first["integration_usd"] / first["file_usd"], 4)
                if first["file_usd"]
                else None,
                "integration_calls": i["calls"],
                "answers_cut": i["truncated"],
                **completeness(i, truth, ids),
                "second_run_billed": again["billed"],
                "second_run_integration_calls": again["integration"]["calls"],
            }
            if n == args.incremental_on:
                row["incremental"] = incremental(here / "corpus", here, settings, args.mode, base_url)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        stop_emulator(emu)
    print(json.dumps({"load_average": [round(x, 1) for x in os.getloadavg()], "cpus": os.cpu_count()}))
    for r in rows:
        share = r["integration_share"]
        print(
            f"{r['documents']:>6} docs ({r['mode']}): integration {r['integration_wall_s']}s of a {r['run_wall_s']}s run, "
            f"${r['integration_usd']:.4f} = {100 * (share or 0):.2f}% of the per-file pass "
            f"({'met' if share is not None and share <= 0.10 else 'NOT met'}); conflicts "
            f"{r['planted_conflicts_found']}, duplicates {r['planted_duplicates_found']}, ids accounted "
            f"{r['doc_ids_accounted']}, {r['status']}; unchanged re-run billed {r['second_run_billed']}"
        )
        for inc in r.get("incremental", []):
            print(
                f"        +{inc['new_documents']}: per-file ${inc['per_file_usd_new']:.4f}, integration "
                f"${inc['integration_usd']:.4f} in {inc['integration_calls']} call(s) "
                f"({'met' if inc['within_target'] else 'NOT met'}), {inc['status']}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

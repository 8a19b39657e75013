#!/usr/bin/env python3
"""Backfill N documents through Message Batches against the emulator and print the numbers.

    .venv/bin/python bench/batch_scale.py --docs 100000

- The corpus comes from examples/make_invoices.py (a subprocess, so its memory is not counted).
- The emulator runs as its own process with a fast virtual clock (--clock-speed), so batch
  processing does not wait on wall time; its memory is not counted either.
- This process is the docmill process: inventory -> run_batches -> outcomes, with the real SDK
  over loopback HTTP and a local object store.

Prints: wall time of submission (inventory, request building, spooling, create calls: start to the
first poll), wait for the emulator's processing, results ingestion rate (from the first result line
of a batch to its record `collected`: download, gate, ledger, costs; per second),
peak RSS of this process (and its peak when every batch was created: inventory, streaming, spooling),
and store operations per document by kind. Targets: peak RSS < 500 MB,
ingestion >= 2,000 documents/s. With --integrate, the integration pass then runs over every outcome
(as a run does, with its state in the same store), and its wall time, calls and cost as a share of
the per-file pass are printed too; peak RSS then includes holding every outcome. With --driver, the
run driver's batch pass replaces the direct call: the inventory written in chunk files and the per-file
pass over them (flows.run: chunks read as they are streamed, outcome files written per chunk), as
`docmill run --mode batch` does before integration; the ingestion rate is then not measured.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import anthropic  # noqa: E402

from checkpoints.outcomes import OutcomeLog  # noqa: E402
from checkpoints.store import ObjectStore, open_store  # noqa: E402
from docmill import crash_points  # noqa: E402
from docmill.settings import Settings  # noqa: E402
from flows.run.context import Endpoint, RunContext  # noqa: E402
from flows.run.driver import write_inventory  # noqa: E402
from flows.run.passes import BatchPass, per_file_pass  # noqa: E402
from tasks.api.client import ModelClient  # noqa: E402
from tasks.batch.engine import run_batches  # noqa: E402
from tasks.per_file.scope import RunScope  # noqa: E402
from tasks.recipes import load_recipe  # noqa: E402
from tasks.records import BatchProgress  # noqa: E402
from tasks.source.inventory import inventory  # noqa: E402


class CountingStore(ObjectStore):
    """Delegates to a real store and counts every operation by kind."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner, self.uri, self.ops = inner, inner.uri, Counter[str]()

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        self.ops["get"] += 1
        return self.inner.get_with_etag(key)

    def put(self, key: str, data: bytes) -> str:
        self.ops["put"] += 1
        return self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self.ops["put_if_absent"] += 1
        return self.inner.put_if_absent(key, data)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        self.ops["put_if_match"] += 1
        return self.inner.put_if_match(key, data, etag)

    def exists(self, key: str) -> bool:
        self.ops["exists"] += 1
        return self.inner.exists(key)

    def list(self, prefix: str = "") -> Iterator[str]:
        self.ops["list"] += 1
        return self.inner.list(prefix)

    def list_children(self, prefix: str) -> Iterator[str]:
        self.ops["list"] += 1
        return self.inner.list_children(prefix)

    def delete(self, key: str) -> None:
        self.ops["delete"] += 1
        self.inner.delete(key)


def start_emulator(clock_speed: float) -> tuple[subprocess.Popen[str], str]:
    # Items start 1 virtual second after create, so `create` returns at once and the emulator's
    # own processing happens in the first poll, not inside the submission we time.
    cmd = [sys.executable, "-m", "emulator.cli", "--port", "0", "--clock-speed", str(clock_speed)]
    cmd += ["--batch-base-seconds", "1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise SystemExit(f"emulator did not start: {line!r}")
    return proc, line.split("listening on ", 1)[1].split()[0]


def stop_emulator(emu: subprocess.Popen[str]) -> None:
    emu.terminate()
    try:
        emu.wait(timeout=30)
    except subprocess.TimeoutExpired:  # a loaded machine: the numbers matter more than a clean exit
        emu.kill()
        emu.wait()


def emulator_json(base_url: str, path: str) -> Any:
    with urllib.request.urlopen(base_url.rstrip("/") + path, timeout=600) as r:
        return json.loads(r.read())


def integrate_all(
    outcomes: list[dict[str, Any]], settings: Settings, store: ObjectStore, base_url: str, recipe: Any
) -> dict[str, Any]:
    """The integration pass over every outcome, as a run does it; its time, calls and cost share."""
    from checkpoints.costs import CostLedger
    from tasks.integration.run import integrate

    client = ModelClient(settings, base_url=base_url, api_key="bench-key")
    start = time.perf_counter()
    record = integrate(
        outcomes,
        recipe=recipe,
        run_id="bench",
        store=store,
        client=client,
        settings=settings,
        source="bench-corpus",
    )
    wall = time.perf_counter() - start
    by_pass = CostLedger(store, "bench").totals()["by_pass"]
    file_usd, integ_usd = float(by_pass.get("file", 0.0)), float(by_pass.get("integration", 0.0))
    return {
        "wall_s": round(wall, 1),
        "status": record["status"],
        "calls": record["calls"],
        "unaccounted": len(record["checks"].get("unaccounted") or []),
        "conflicts": len(record["output"]["conflicts"]),
        "duplicates": len(record["output"]["duplicates"]),
        "usd": round(integ_usd, 4),
        "share_of_per_file": round(integ_usd / file_usd, 4) if file_usd else None,
    }


def top_lines(when: str, n: int = 12) -> None:
    """The source lines holding the most traced memory now (--trace-memory), to stderr."""
    stats = tracemalloc.take_snapshot().statistics("lineno")
    total = sum(s.size for s in stats)
    print(f"traced memory {when}: {total / 2**20:.1f} MiB; top lines:", file=sys.stderr)
    for s in stats[:n]:
        frame = s.traceback[0]
        print(
            f"  {s.size / 2**20:7.1f} MiB {s.count:>9} blocks  {frame.filename}:{frame.lineno}",
            file=sys.stderr,
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--docs", type=int, default=100_000, help="documents in the corpus")
    p.add_argument("--workdir", type=Path, help="where corpus and store go (default: a temp dir)")
    p.add_argument("--max-requests", type=int, default=100_000, help="settings.batch.max_requests")
    p.add_argument("--integrate", action="store_true", help="run the integration pass after the batches")
    p.add_argument(
        "--driver",
        action="store_true",
        help="through the run driver's batch pass (inventory chunk files, per-file pass, outcome files)",
    )
    p.add_argument("--corpus", type=Path, help="an invoice corpus made earlier (default: generate one)")
    p.add_argument(
        "--trace-memory",
        action="store_true",
        help="tracemalloc: the lines holding the most memory when submission ends and at the end (slow)",
    )
    p.add_argument(
        "--clock-speed",
        type=float,
        default=60.0,
        help="emulator virtual s per real s (keep 29 days of virtual time well beyond the run)",
    )
    args = p.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="docmill-bench-"))
    corpus, store_dir = args.corpus or work / "corpus", work / "store"

    t0 = time.perf_counter()
    if args.corpus is None:
        make = [sys.executable, str(ROOT / "examples" / "make_invoices.py"), "--out", str(corpus)]
        subprocess.run([*make, "--count", str(args.docs)], check=True, stdout=subprocess.DEVNULL)
    corpus_s = time.perf_counter() - t0
    emu, base_url = start_emulator(args.clock_speed)
    if args.trace_memory:
        tracemalloc.start()
    try:
        settings = Settings(
            store=str(store_dir),
            batch={"max_requests": args.max_requests, "poll_seconds": 0.2, "poll_max_seconds": 1.0},  # type: ignore[arg-type]
        )
        store = CountingStore(open_store(store_dir))
        client = anthropic.Anthropic(api_key="bench-key", base_url=base_url, max_retries=0, timeout=3600)
        recipe = load_recipe("invoices")
        marks: dict[str, float] = {}
        ingest_s = ingest_cpu_s = 0.0

        def hook(point: str) -> None:  # lifecycle points: when submission ends, when ingesting starts
            if point == "polling" and "polling" not in marks:
                marks["polling"] = time.perf_counter()
                marks["rss_submitted"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                if args.trace_memory:
                    top_lines("when submission ends")
            elif point == "streaming_results" and "ingest_start" not in marks:
                marks["ingest_start"] = time.perf_counter()
                marks["ingest_cpu_start"] = time.process_time()

        def progress(e: BatchProgress) -> None:
            nonlocal ingest_s, ingest_cpu_s
            if e["event"] == "collected" and "ingest_start" in marks:
                ingest_s += time.perf_counter() - marks.pop("ingest_start")
                ingest_cpu_s += time.process_time() - marks.pop("ingest_cpu_start")

        crash_points.HOOK = hook
        start = time.perf_counter()
        states: Counter[str] = Counter()
        kept: list[dict[str, Any]] = []
        repairs = ModelClient(
            settings, base_url=base_url, api_key="bench-key"
        )  # settings.batch.repairs_realtime
        if args.driver:
            endpoint = Endpoint(base_url, "bench-key", offline=False)
            ctx = RunContext(
                recipe, "bench", store, repairs, settings, endpoint=endpoint, batch_sdk=lambda: client
            )
            per_file_pass(ctx, BatchPass(), write_inventory(ctx, str(corpus)), progress=False)
            for record in OutcomeLog(store, "bench").all():  # read back one chunk file at a time
                states[record["state"]] += 1
                if args.integrate:
                    kept.append(record)
        else:
            docs = inventory(str(corpus), settings, doc_types=recipe.doc_types)
            scope = RunScope(recipe, "bench", store, repairs, settings)
            for outcome in run_batches(docs, scope, lambda: client, on_progress=progress):
                states[outcome.state.value] += 1
                if args.integrate:
                    kept.append(outcome.model_dump(mode="json"))
        total_s = time.perf_counter() - start
        if args.trace_memory:
            top_lines("at the end")
        integration = integrate_all(kept, settings, store, base_url, recipe) if args.integrate else None
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        billed = emulator_json(base_url, "/_emulator/accounting")
    finally:
        stop_emulator(emu)

    items = [b["custom_id"] for b in billed["billed"] if b.get("custom_id")]  # batch items only
    n = sum(states.values())
    ingested = states["succeeded"] + states["needs_review"]
    report = {
        "documents": n,
        "outcomes": dict(states),
        "corpus_generation_s": round(corpus_s, 1),
        "submission_wall_s": round(marks.get("polling", start) - start, 1),
        "processing_wait_s": round(total_s - (marks.get("polling", start) - start) - ingest_s, 1),
        "ingestion_s": round(ingest_s, 1),
        "ingestion_docs_per_s": round(ingested / ingest_s) if ingest_s else None,
        "ingestion_cpu_s": round(ingest_cpu_s, 1),
        "ingestion_docs_per_cpu_s": round(ingested / ingest_cpu_s) if ingest_cpu_s else None,
        "load_average": [round(x, 1) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "total_wall_s": round(total_s, 1),
        "peak_rss_mb": round(rss_mb),
        "peak_rss_when_submitted_mb": round(marks["rss_submitted"]) if "rss_submitted" in marks else None,
        "store_ops_per_doc": {k: round(v / n, 3) for k, v in sorted(store.ops.items())},
        "store_ops_total_per_doc": round(sum(store.ops.values()) / n, 3),
        "billed_requests": billed["billed_count"],
        "batch_records": len(list(store.inner.list("runs/bench/batches/"))) // 2,
        "billed_twice": len(items) - len(set(items)),
        "fsync": os.environ.get("DOCMILL_STORE_IO__FSYNC", "true"),
        "integration": integration,
    }
    print(json.dumps(report, indent=2))
    rss_ok, rate_ok = rss_mb < 500, (report["ingestion_docs_per_s"] or 0) >= 2000
    print(
        f"peak RSS < 500 MB: {'met' if rss_ok else 'NOT met'}; ingestion >= 2,000 docs/s: {'met' if rate_ok else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

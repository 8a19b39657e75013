"""Realtime throughput: docmill vs a plain asyncio loop making the same SDK calls.

All talk to the same emulator (a separate process) at 0, 50 and 200 ms emulated latency, with the
same concurrency, in one run, so ratios are measured side by side on the same machine. Each
measurement is repeated `--repeat` times, interleaved, and the median is printed.

- plain: `AsyncAnthropic.messages.create` for every document, nothing else.
- durable floor: the plain loop plus the two write-once objects docmill's invariants need for
  every answer (the response, persisted before anything else, and the result), on the same local
  store docmill uses. No pipeline does less and keeps both; it is the control that says how much
  of docmill's gap is durability (the file system) and how much is docmill's own work.
- docmill per-file: the per-file pass of `run_extract` (chunks, gate, ledger, cost, outcomes).
- docmill whole run: also inventory, integration pass and report.

    .venv/bin/python bench/realtime.py [--docs 300] [--concurrency 16] [--repeat 3]

Target: docmill >= 0.8x the plain loop.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_emulator(latency_ms: float) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "emulator.cli", "--port", str(port), "--latency-ms", str(latency_ms)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("emulator did not start")


def plain_loop(corpus: Path, url: str, concurrency: int, store: Path | None = None) -> float:
    """Documents per second of the plain loop; with `store`, also writing the durable floor."""
    import json

    import anthropic

    from checkpoints.ledger import ResponseLog, ResultsLedger
    from checkpoints.store import open_store
    from docmill.settings import Settings
    from tasks.inventory import inventory, load_text
    from tasks.per_file.requests import file_request
    from tasks.recipes import load_recipe

    settings = Settings()
    recipe = load_recipe("invoices")
    docs = [d for d in inventory(str(corpus), settings, doc_types=recipe.doc_types) if d.status == "ok"]
    requests = [
        file_request(recipe, d, load_text(d), model=settings.api.model, max_tokens=settings.api.max_tokens)
        for d in docs
    ]

    durable = open_store(str(store)) if store is not None else None
    responses = ResponseLog(durable) if durable else None
    results = ResultsLedger(durable) if durable else None

    async def main() -> None:
        client = anthropic.AsyncAnthropic(api_key="bench", base_url=url, max_retries=2)
        sem = asyncio.Semaphore(concurrency)

        async def one(req: dict) -> None:
            async with sem:
                if responses is None or results is None:
                    await client.messages.create(**req)
                    return
                raw = await client.messages.with_raw_response.create(**req)
                message = json.loads(raw.http_response.content)
                responses.put("file", message["id"], 1, message)
                results.put("file", message["id"], {"state": "succeeded", "output": message["content"]})

        await asyncio.gather(*(one(r) for r in requests))
        await client.close()

    start = time.perf_counter()
    asyncio.run(main())
    return len(requests) / (time.perf_counter() - start)


def docmill_run(corpus: Path, url: str, concurrency: int, store: Path) -> tuple[float, float]:
    """(docs/s of the per-file pass, docs/s of the whole run incl. integration and report)."""
    from docmill.settings import ApiSettings, Settings
    from flows import pipeline
    from flows.extract import run_extract

    spent = [0.0]

    def timed(fn: pipeline.ChunkFn, chunks: list) -> list:
        t = time.perf_counter()
        try:
            return pipeline.plain_map(fn, chunks)
        finally:
            spent[0] += time.perf_counter() - t

    # The plain loop has no client-side pacing; lift docmill's (default 4,000 requests/min) to match.
    api = ApiSettings(
        base_url=url, concurrency=concurrency, requests_per_minute=10**9, input_tokens_per_minute=10**12
    )
    settings = Settings(store=str(store), api=api)
    start = time.perf_counter()
    summary = run_extract(str(corpus), "invoices", settings=settings, progress=False, map_chunks=timed)
    total = time.perf_counter() - start
    ok = summary["states"]["succeeded"] + summary["states"]["needs_review"] - summary["from_ledger"]
    return ok / spent[0], ok / total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--latencies", default="0,50,200")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each measurement; medians printed")
    a = ap.parse_args()
    os.environ.pop("ANTHROPIC_API_KEY", None)
    import flows.extract  # noqa: F401  (import Prefect once, outside the timed runs)

    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "examples/make_invoices.py"),
                "--out",
                str(corpus),
                "--count",
                str(a.docs),
                "--seed",
                "1",
                "--truth",
                str(Path(tmp) / "t.jsonl"),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        print(
            f"{'latency':>8} {'plain':>7} {'durable floor':>14} {'ratio':>6} {'docmill per-file':>17} {'ratio':>6} "
            f"{'vs floor':>8} {'whole run':>10} {'ratio':>6}   docs/s, medians of {a.repeat} "
            f"(docs={a.docs}, concurrency={a.concurrency})"
        )
        for i, latency in enumerate(float(x) for x in a.latencies.split(",")):
            proc, url = start_emulator(latency)
            plain, floor, dm, whole = [], [], [], []
            try:
                plain_loop(corpus, url, a.concurrency)  # warm the emulator's model and caches
                for r in range(a.repeat):
                    plain.append(plain_loop(corpus, url, a.concurrency))
                    floor.append(plain_loop(corpus, url, a.concurrency, Path(tmp) / f"floor-{i}-{r}"))
                    per_file, run = docmill_run(corpus, url, a.concurrency, Path(tmp) / f"store-{i}-{r}")
                    dm.append(per_file)
                    whole.append(run)
            finally:
                proc.kill()
                proc.wait()
            p, f, d, w = (statistics.median(x) for x in (plain, floor, dm, whole))
            print(
                f"{latency:>6.0f}ms {p:>7.1f} {f:>14.1f} {f / p:>6.2f} {d:>17.1f} {d / p:>6.2f} "
                f"{d / f:>8.2f} {w:>10.1f} {w / p:>6.2f}"
            )


if __name__ == "__main__":
    main()

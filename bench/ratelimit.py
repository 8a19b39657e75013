"""Running at the rate limit: docmill vs a plain asyncio SDK loop, side by side.

Two scenarios, each against emulators with one limit: requests/min, then input tokens/min (sized so
it binds at about the same request rate). Every answer takes 1-2 s (uniform in 1/16 steps) and 5 %
take 8 s more. In each scenario docmill and the plain loop run at the same time, each against its
own emulator (a separate process, its bucket full at the start), with the same concurrency:

- plain: `AsyncAnthropic(max_retries=...)`, a semaphore of `--concurrency`, the SDK's own retries
  (which honour retry-after) and nothing else.
- docmill: the per-file pass of `run_extract` (pacer, chunks, gate, ledger, outcomes), integration and
  report included (they come after the 90 % mark and are outside the steady part).

Share of the limit = what the emulator billed in the steady part (from `--warmup` seconds after the
first billed request to the 90 % mark of billed requests), per minute, over the limit. 429s = the
emulator's 429 answers over the requests it received.

    .venv/bin/python bench/ratelimit.py [--docs 500] [--rpm 300] [--concurrency 32] [--warmup 30]

`--only window`: no limit at all, only the concurrency: requests/s of docmill (chunks of documents)
against the plain loop (no chunks), i.e. whether a slow document holds capacity idle.

Targets: docmill >= 0.97 of the limit in the steady part, 429s <= 1 % of requests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.realtime import free_port  # noqa: E402

HEAVY_TAIL = [{"kind": "latency", "latency_ms": ms, "probability": 0.5} for ms in (500, 250, 125, 62.5)] + [
    {"kind": "latency", "latency_ms": 8000, "probability": 0.05}
]


def start_emulator(limits: list[str], seed: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "emulator.cli",
        "--port",
        str(port),
        "--latency-ms",
        "1000",
        "--seed",
        str(seed),
    ]
    for rule in HEAVY_TAIL:
        cmd += ["--fault", json.dumps(rule)]
    proc = subprocess.Popen(cmd + limits, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url + "/_emulator/accounting", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("emulator did not start")


def accounting(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/_emulator/accounting", timeout=30) as r:
        data: dict[str, Any] = json.loads(r.read())
        return data


def requests_for(corpus: Path) -> list[dict[str, Any]]:
    from docmill.settings import Settings
    from tasks.recipes import load_recipe
    from tasks.request import file_request
    from tasks.source.inventory import inventory, load_text

    settings = Settings()
    recipe = load_recipe("invoices")
    docs = [d for d in inventory(str(corpus), settings, doc_types=recipe.doc_types) if d.status == "ok"]
    model, max_tokens = settings.api.model, settings.api.max_tokens
    return [file_request(recipe, d, load_text(d), model=model, max_tokens=max_tokens) for d in docs]


def plain_loop(requests: list[dict[str, Any]], url: str, concurrency: int, failures: list[int]) -> None:
    import anthropic

    async def main() -> None:
        client = anthropic.AsyncAnthropic(api_key="bench", base_url=url, max_retries=10)
        sem = asyncio.Semaphore(concurrency)

        async def one(req: dict[str, Any]) -> None:
            async with sem:
                try:
                    await client.messages.create(**req)
                except anthropic.APIError:
                    failures[0] += 1

        await asyncio.gather(*(one(r) for r in requests))
        await client.close()

    asyncio.run(main())


def docmill_run(corpus: Path, url: str, concurrency: int, store: Path) -> dict[str, Any]:
    from docmill.settings import ApiSettings, Settings
    from flows.entry import RunWiring, run_extract
    from flows.run.context import RunParams

    settings = Settings(store=str(store), api=ApiSettings(base_url=url, concurrency=concurrency))
    return run_extract(
        RunParams(str(corpus), "invoices"), settings=settings, wiring=RunWiring(progress=False)
    )


def steady_share(billed: list[dict[str, Any]], kind: str, limit: float, warmup: float) -> tuple[float, float]:
    """(share of `limit` per minute in the steady part, seconds of the steady part); with no limit
    (`limit` 60), requests per second."""
    rows = sorted(billed, key=lambda b: b["at"])
    if len(rows) < 10:
        return 0.0, 0.0
    start = rows[0]["at"] + warmup
    end = rows[int(len(rows) * 0.9)]["at"]
    if end <= start:
        return 0.0, 0.0

    def amount(b: dict[str, Any]) -> float:
        if kind == "requests":
            return 1.0
        u = b["usage"]  # what the emulator's limiter counts: every input token, cache reads included
        return float(
            sum(
                u.get(f) or 0
                for f in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
            )
        )

    used = sum(amount(b) for b in rows if start <= b["at"] < end)
    return used / (end - start) * 60.0 / limit, end - start


def scenario(
    name: str,
    limits: list[str],
    kind: str,
    limit: float,
    corpus: Path,
    reqs: list[dict[str, Any]],
    a: argparse.Namespace,
    tmp: Path,
) -> None:
    plain_proc, plain_url = start_emulator(limits, a.seed)
    dm_proc, dm_url = start_emulator(limits, a.seed)
    failures = [0]
    times: dict[str, float] = {}
    try:

        def run_plain() -> None:
            t = time.perf_counter()
            plain_loop(reqs, plain_url, a.concurrency, failures)
            times["plain"] = time.perf_counter() - t

        thread = threading.Thread(target=run_plain)
        thread.start()
        t = time.perf_counter()
        summary = docmill_run(corpus, dm_url, a.concurrency, tmp / f"store-{name}")
        times["docmill"] = time.perf_counter() - t
        thread.join()
        results = {"plain": accounting(plain_url), "docmill": accounting(dm_url)}
    finally:
        for proc in (plain_proc, dm_proc):
            proc.kill()
            proc.wait()
    for who, acct in results.items():
        share, seconds = steady_share(acct["billed"], kind, limit, a.warmup)
        received = int(acct["received_by_path"].get("/v1/messages", 0))
        n429 = int(acct["errors_by_status"].get("429", 0))
        extra = f"failed {failures[0]}" if who == "plain" else f"states {summary['states']}"
        what = "share" if limits else "req/s"
        print(
            f"{name:<14} {who:<8} {what} {share:5.3f} over {seconds:5.1f} s   429s {n429:4d} of {received:5d} "
            f"requests ({100.0 * n429 / max(received, 1):5.2f} %)   wall {times[who]:6.1f} s   {extra}",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=500)
    ap.add_argument("--rpm", type=int, default=300, help="the request limit (and the token limit's rate)")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--warmup", type=float, default=30.0, help="seconds left out at the start")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", choices=["requests", "tokens", "window"], help="run one scenario")
    a = ap.parse_args()
    os.environ.pop("ANTHROPIC_API_KEY", None)
    os.environ["DOCMILL_API__CONCURRENCY"] = str(a.concurrency)  # chunks in flight are sized at import
    from emulator.tokens import count_tokens

    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        corpus = tmp / "corpus"
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
                str(tmp / "t.jsonl"),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        reqs = requests_for(corpus)
        per_request = sum(count_tokens(r) for r in reqs) / len(reqs)
        itpm = int(per_request * a.rpm)
        print(
            f"{len(reqs)} invoices, concurrency {a.concurrency}, latency 1-2 s (+8 s for 5 %), steady part = "
            f"{a.warmup:.0f} s after the first answer to the 90 % mark; ~{per_request:.0f} input tokens/request",
            flush=True,
        )
        if a.only in (None, "requests"):
            scenario(f"{a.rpm} rpm", ["--rpm", str(a.rpm)], "requests", a.rpm, corpus, reqs, a, tmp)
        if a.only in (None, "tokens"):
            scenario(f"{itpm} itpm", ["--input-tpm", str(itpm)], "tokens", itpm, corpus, reqs, a, tmp)
        if a.only == "window":  # no limit: does a slow document hold capacity idle? (plain has no chunks)
            scenario("no limit", [], "requests", 60.0, corpus, reqs, a, tmp)


if __name__ == "__main__":
    main()

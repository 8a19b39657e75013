#!/usr/bin/env python3
"""What a docmill run costs before it does any work: the CLI over a tiny unchanged source.

    .venv/bin/python bench/startup.py --repeat 6
    .venv/bin/python bench/startup.py --repeat 6 --base /tmp/base   # a checkout of another commit

Three text invoices are answered once (`docmill run --mode realtime --no-prefect`, the built-in
emulator); then `docmill run --mode batch --no-prefect` over the same source and store is timed, in a
fresh interpreter each time, with every answer in the ledger and nothing sent (the base URL points
at a closed port). With --base, that checkout's CLI (this venv, PYTHONPATH of the checkout) runs
beside it in alternating order. Both checkouts' modules are compiled to bytecode first, as `make`
installs them. Printed: the medians of CPU seconds (the run's process) and wall seconds, and which of
the SDK's modules the last run of each imported; the run's own work on three documents is small, so
this is start-up: the interpreter, the imports, settings, the recipe, the store's first reads.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("docmill", "flows", "tasks", "checkpoints", "emulator")
sys.path.insert(0, str(ROOT))

# the CLI as `docmill` runs it, then the SDK modules it imported: the same script the test runs
from tests.flows.test_flows_no_sdk import WATCHED  # noqa: E402


def timed(tree: Path, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", WATCHED, *args],
        env={**env, "PYTHONPATH": str(tree)},
        cwd=tree,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the run failed (rc {done.returncode}):\n{done.stderr[-2000:]}")
    imported = done.stderr.rstrip().splitlines()[-1]
    return {"cpu_s": round(cpu, 3), "wall_s": round(wall, 3), "imported": imported}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--repeat", type=int, default=5, help="timed runs of each checkout")
    p.add_argument("--base", type=Path, help="a checkout of another commit, timed beside this one")
    a = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="docmill-startup-"))
    src, store = work / "src", work / "store"
    src.mkdir()
    for i in range(3):
        (src / f"inv-{i}.txt").write_text(f"Invoice INV-{i}\nVendor: Acme GmbH\nTotal: {i}0.00 EUR\n")
    trees = {"this": ROOT, **({"base": a.base.resolve()} if a.base else {})}
    for tree in trees.values():  # as installed: bytecode compiled
        subprocess.run([sys.executable, "-m", "compileall", "-q", *PACKAGES], cwd=tree, check=True)
    env = {**os.environ, "ANTHROPIC_API_KEY": ""}
    env.pop("DOCMILL_API__BASE_URL", None)
    run = ["run", str(src), "--recipe", "invoices", "--store", str(store), "--no-prefect"]
    first = subprocess.run(
        [sys.executable, "-m", "flows.cli", *run, "--mode", "realtime"],
        env=env,
        cwd=ROOT,
        capture_output=True,
    )
    if first.returncode != 0:
        raise SystemExit(f"the first run failed: {first.stderr.decode()[-2000:]}")
    env["DOCMILL_API__BASE_URL"] = "http://127.0.0.1:9"  # nothing may be sent: a closed port
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in trees}
    order = list(trees)
    for r in range(a.repeat):
        for who in order if r % 2 == 0 else order[::-1]:
            results[who].append(timed(trees[who], [*run, "--mode", "batch"], env))
    report: dict[str, Any] = {
        who: {
            "median_cpu_s": round(statistics.median(x["cpu_s"] for x in got), 3),
            "median_wall_s": round(statistics.median(x["wall_s"] for x in got), 3),
            "cpu_s": [x["cpu_s"] for x in got],
            "sdk": got[-1]["imported"],
        }
        for who, got in results.items()
    }
    if a.base:
        report["cpu this / base"] = round(report["this"]["median_cpu_s"] / report["base"]["median_cpu_s"], 2)
    report["load_average"] = [round(x, 1) for x in os.getloadavg()]
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

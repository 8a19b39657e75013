#!/usr/bin/env python3
"""Batch mode end to end: `docmill run --mode batch` against Bespoke Labs Curator's batch mode.

    .venv/bin/python bench/curator_batch.py --docs 10000 --curator-python /tmp/curator-venv/bin/python

Curator is not a docmill dependency: install it into a venv of its own (`python3 -m venv
/tmp/curator-venv && /tmp/curator-venv/bin/pip install bespokelabs-curator 'instructor==1.14.5'`;
Curator 0.1.31 calls `instructor.handle_response_model`, gone from instructor 1.16) and pass its
python. Without it, this prints one line and exits 0 (the bench is not part of CI).

One emulator for both (its own process, batch_scale.py's settings: a 60x virtual clock, a batch
ends 1 virtual second after it is created), one generated corpus (examples/make_invoices.py, or
`--corpus DIR`, a folder generated before), then
per repeat, in alternating order:
- docmill: the real CLI in a subprocess, `docmill run CORPUS --mode batch --store FRESH`, default
  settings (only DOCMILL_API__BASE_URL and a key given; PREFECT_HOME is this bench's own folder):
  below DOCMILL_PREFECT_MIN_DOCUMENTS (20,000) documents that is without Prefect's temporary server,
  `--docmill-env DOCMILL_PREFECT_MIN_DOCUMENTS=0` measures the run through it;
- curator: a script run by --curator-python that reads the same files (skipping empty, binary and
  byte-identical ones, as docmill's inventory does) and asks, per document, for a JSON answer with
  docmill's own schema, system prompt, instruction, model, max_tokens and effort (`output_config`,
  the emulator's structured-output path), batch=True, everything else on Curator's defaults.
Printed per run: wall time from process start to exit, CPU seconds (the process and the children
it waited for, e.g. Prefect's server), time until its first batch was created (the batch's
created_at on the emulator's virtual clock, mapped back to wall time), documents answered (batch
items that succeeded), polls (GETs of its batches), realtime calls (docmill's integration pass);
then docmill / curator of the median wall and CPU times and of each pair. Both poll every 60 s by default
and both look once right after creating: whether that first look already finds the batch ended
(polls 2-3) or not (docmill then sleeps 60 s) decides much of a small run's wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from batch_scale import start_emulator, stop_emulator  # noqa: E402  (bench/ is this script's folder)

CURATOR_SCRIPT = r"""
import hashlib, json, os, sys
from pathlib import Path
import litellm
from bespokelabs import curator

spec = json.loads(Path(sys.argv[1]).read_text())
corpus, rows, seen = Path(sys.argv[2]), [], set()
for p in sorted(corpus.rglob("*")):
    b = p.read_bytes() if p.is_file() and p.suffix[1:] in {"txt", "md", "html", "json", "csv"} else b""
    if b and b"\0" not in b and hashlib.sha256(b).digest() not in seen:
        seen.add(hashlib.sha256(b).digest())
        rows.append({"id": str(p.relative_to(corpus)), "type": p.suffix[1:], "text": b.decode("utf-8", "replace")})
# the emulator's model id is unknown to litellm, which Curator asks for max_tokens and prices
litellm.register_model({spec["model"]: {"max_tokens": spec["max_tokens"], "max_output_tokens": spec["max_tokens"],
    "input_cost_per_token": 3e-6, "output_cost_per_token": 15e-6, "litellm_provider": "anthropic", "mode": "chat"}})

class Extract(curator.LLM):
    def prompt(self, row):
        doc = f'<document id="{row["id"]}" type="{row["type"]}">\n{row["text"]}\n</document>'
        return [{"role": "user", "content": doc + "\n\n" + spec["instruction"]}]

    def parse(self, row, response):
        return {"id": row["id"], "fields": json.loads(response)}

llm = Extract(model_name=spec["model"], batch=True, backend="anthropic",
              generation_params={"max_tokens": spec["max_tokens"], "system": spec["system"],
                                 "output_config": spec["output_config"]},
              backend_params={"base_url": os.environ["BENCH_BASE_URL"]})
print("curator: answered", len(llm([r for r in rows]).dataset))
"""


def get(url: str) -> Any:
    req = urllib.request.Request(url, headers={"x-api-key": "bench-key", "anthropic-version": "2023-06-01"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def request_spec(corpus: Path) -> dict[str, Any]:
    """What docmill sends for a document, minus the document: the Curator script asks the same."""
    from docmill.settings import Settings
    from tasks.recipes import load_recipe
    from tasks.request import file_request
    from tasks.source.inventory import inventory, load_text

    settings, recipe = Settings(), load_recipe("invoices")
    doc = next(d for d in inventory(str(corpus), settings, doc_types=recipe.doc_types) if d.status == "ok")
    req = file_request(
        recipe, doc, load_text(doc), model=settings.api.model, max_tokens=settings.api.max_tokens
    )
    return {
        "model": req["model"],
        "max_tokens": req["max_tokens"],
        "output_config": req["output_config"],
        "system": req["system"][0]["text"],
        "instruction": req["messages"][0]["content"][-1]["text"],
    }


def batches(url: str) -> dict[str, dict[str, Any]]:
    return {b["id"]: b for b in get(url + "/v1/messages/batches?limit=1000")["data"]}


def epoch(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def measure(
    who: str, cmd: list[str], env: dict[str, str], url: str, speed: float, log: Path
) -> dict[str, Any]:
    before, acct0 = set(batches(url)), get(url + "/_emulator/accounting")["received_by_path"]
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    virtual0, real0 = get(url + "/_emulator/clock")["now"], time.perf_counter()
    with log.open("w") as out:
        rc = subprocess.run(cmd, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - start
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the process and the children it waited for
    mine = {k: b for k, b in batches(url).items() if k not in before}
    acct = get(url + "/_emulator/accounting")["received_by_path"]
    grew = {p: n - acct0.get(p, 0) for p, n in acct.items() if n != acct0.get(p, 0)}
    created = min((epoch(b["created_at"]) for b in mine.values()), default=None)
    return {
        "who": who,
        "rc": rc,
        "wall_s": wall,
        "batches": len(mine),
        "first_batch_s": None if created is None else (created - virtual0) / speed + real0 - start,
        "answered": sum(b["request_counts"]["succeeded"] for b in mine.values()),
        "polls": sum(n for p, n in grew.items() if p.rsplit("/", 1)[-1] in mine),
        "realtime_calls": grew.get("/v1/messages", 0),
        "cpu_s": cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime,
    }


def row(r: dict[str, Any]) -> str:
    first = "-" if r["first_batch_s"] is None else f"{r['first_batch_s']:.1f}"
    return (
        f"{r['who']:<8} {r['wall_s']:>8.1f} {r['cpu_s']:>6.1f} {first:>12} {r['answered']:>9} {r['batches']:>8} {r['polls']:>6} "
        f"{r['realtime_calls']:>9} {r['rc']:>3}"
    )


def command(
    who: str, r: int, a: argparse.Namespace, work: Path, url: str
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of one run (fresh store or cache; the same key for both)."""
    run, corpus = work / f"{who}-{r}", str(a.corpus or work / "corpus")
    run.mkdir(parents=True, exist_ok=True)
    if who == "docmill":
        docmill = str(Path(sys.executable).parent / "docmill")
        cmd = [
            docmill,
            "run",
            corpus,
            "--mode",
            "batch",
            "--store",
            str(run / "store"),
            *shlex.split(a.docmill_args),
        ]
        env = {"DOCMILL_API__BASE_URL": url, "PREFECT_HOME": str(work / "prefect-home")}
        env.update(kv.split("=", 1) for kv in a.docmill_env)
    else:
        cmd = [a.curator_python, str(work / "curator_extract.py"), str(work / "spec.json"), corpus]
        env = {
            "BENCH_BASE_URL": url,
            "CURATOR_CACHE_DIR": str(run / "cache"),
            "HF_DATASETS_CACHE": str(run / "hf"),
            "HF_HUB_OFFLINE": "1",
            "TELEMETRY_ENABLED": "false",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
    return cmd, {**env, "ANTHROPIC_API_KEY": "bench-key"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--docs", type=int, default=2000, help="invoices in the generated corpus")
    p.add_argument("--repeat", type=int, default=2, help="pairs, alternating who goes first")
    p.add_argument("--curator-python", default="/tmp/curator-venv/bin/python", help="a python with Curator")
    p.add_argument("--clock-speed", type=float, default=60.0, help="emulator virtual s per real s")
    p.add_argument("--docmill-args", default="", help="more `docmill run` arguments ('--integration skip')")
    p.add_argument("--docmill-env", action="append", default=[], help="KEY=VALUE for docmill (repeatable)")
    p.add_argument("--workdir", type=Path, help="corpus, stores, logs (default: a temp dir)")
    p.add_argument("--corpus", type=Path, help="an invoice folder to use instead of generating --docs")
    a = p.parse_args(argv)
    probe = [a.curator_python, "-c", "import bespokelabs.curator"]
    if not Path(a.curator_python).exists() or subprocess.run(probe, capture_output=True).returncode != 0:
        print(f"curator is not installed at {a.curator_python}; nothing measured")
        return 0
    work = a.workdir or Path(tempfile.mkdtemp(prefix="docmill-curator-"))
    work.mkdir(parents=True, exist_ok=True)
    corpus = a.corpus or work / "corpus"
    if a.corpus is None:
        make = [sys.executable, str(ROOT / "examples/make_invoices.py"), "--out", str(corpus)]
        subprocess.run([*make, "--count", str(a.docs)], check=True, stdout=subprocess.DEVNULL)
    (work / "spec.json").write_text(json.dumps(request_spec(corpus)))
    (work / "curator_extract.py").write_text(CURATOR_SCRIPT)
    emu, url = start_emulator(a.clock_speed)
    results: list[dict[str, Any]] = []
    print(
        f"{a.corpus or a.docs} invoices, emulator {url} (x{a.clock_speed:g}), work {work}, load {os.getloadavg()[0]:.1f}"
    )
    head = ("wall s", "CPU s", "1st batch s", "answered", "batches", "polls", "realtime", "rc")
    print(f"{'':<8} " + " ".join(f"{h:>{w}}" for h, w in zip(head, (8, 6, 12, 9, 8, 6, 9, 3), strict=True)))
    try:
        for r in range(a.repeat):
            for who in ("docmill", "curator") if r % 2 == 0 else ("curator", "docmill"):
                cmd, env = command(who, r, a, work, url)
                log = work / f"{who}-{r}.log"
                results.append(measure(who, cmd, env, url, a.clock_speed, log))
                print(row(results[-1]), f"  log {log}, load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        stop_emulator(emu)
    for what, verdicts in (("wall_s", ("no slower", "SLOWER")), ("cpu_s", ("no more", "MORE"))):
        got = {w: [r[what] for r in results if r["who"] == w] for w in ("docmill", "curator")}
        ratios = [d / c for d, c in zip(got["docmill"], got["curator"], strict=True)]
        d, c = statistics.median(got["docmill"]), statistics.median(got["curator"])
        print(
            f"median {what.split('_')[0]}: docmill {d:.1f} s, curator {c:.1f} s; docmill/curator {d / c:.2f} "
            f"({verdicts[d > c]}); pairs {' '.join(f'{x:.2f}' for x in ratios)}, "
            f"median of pairs {statistics.median(ratios):.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

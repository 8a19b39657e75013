"""report.html of this checkout against another one (`--base DIR`, e.g. `git archive REV | tar -x -C
DIR`): the same representative reports rendered by both, compared byte for byte (and again with
escaped quotes spelled one way: `&quot;` / `&#34;`, `&#x27;` / `&#39;` are the same text), and the CPU
time of a 10,000-document report without and with "Pages with evidence", each checkout in its own
process, alternating which goes first.

    .venv/bin/python bench/report_render.py --base /tmp/base [--repeat 5]

Cases: hostile text in every section, a stopped run, an integration answer, code-review findings,
10,000 invoices with and without page views. PYTHONHASHSEED is fixed so both render sets the same way.
A checkout that lists fields stated by as many documents in hash order (before they were listed by
name) differs in the rows of "Fields with evidence"; the first difference of a page is shown.
Figures are from a shared, noisy machine: compare the minimums and medians, not absolute times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RENDER = r"""
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tasks.reporting.html import html_report
from tasks.reporting.pages import Mark, PageView
from tests.tasks.reporting.test_report import _invoice

out, timing = Path(sys.argv[2]), sys.argv[3] == "time"
EVIL = '<script>alert(1)</script>"\'&'
integration = {
    "status": "partial", "mode": "incremental", "calls": 2,
    "problems": [{"problem": "invalid_json" + EVIL, "doc_ids": ["a.txt", "b" + EVIL], "errors": ["bad" + EVIL]}],
    "output": {"key_findings": ["currency EUR in 3 documents" + EVIL], "duplicates": [{"why": "same" + EVIL}],
               "findings": [{"title": "t" + EVIL, "files": ["a", "b"]}], "entities": [{"name": EVIL, "meta": {"k": EVIL}}]},
    "checks": {"conflicts": [{"field": "total", "key_field": "invoice_number", "key": "INV-1" + EVIL,
                              "values": [{"doc_id": "a.txt", "value": 10.0}, {"doc_id": "b.txt", "value": EVIL}]}],
               "coverage_gaps": [{"doc_id": "c" + EVIL, "reason": "no total"}, {"field": "tax", "reason": "none"}],
               "flags": [{"problem": "unknown_doc" + EVIL, "doc_id": EVIL, "detail": [1, 2]}, "plain" + EVIL]},
}
costs = {"usd": 1.2345, "entries": 12, "by_pass": {"file": 1.0}, "by_model": {"m": 1.2345},
         "by_doc": {"a.txt": 0.5, "b" + EVIL: 0.7}, "tokens": {"input_tokens": 12345, "cache_read_input_tokens": 10}}
entries = [{"at": 1796167111.0 + i, "sent_at": 1796167110.0 + i, "doc_id": f"d{i}"} for i in range(20)]
review = [{"doc_id": "a.txt", "reason": "conflict", "errors": ["e" + EVIL]}, {"doc_id": EVIL, "reason": "sample"}]
small = [_invoice(i) for i in range(60)]
small[3]["doc_id"] = EVIL
small[4]["output"]["vendor_name"] = {"value": EVIL, "evidence": "Vendor: " + EVIL}
small[5]["review"] = {"action": "correct", "by": "ann" + EVIL, "note": EVIL, "at": "2026-12-01T23:18:31Z"}
small.append({"doc_id": "f" + EVIL, "state": "failed", "failure_type": "api_error:400", "last_error": "<b>x</b>"})
marks = lambda i: [Mark("invoice_number", f"INV-{i:05d}" + EVIL, "verified", [0.1, 0.1, 0.3, 0.12]), Mark("total", EVIL, "cited")]
views = [PageView(str(o["doc_id"]), 1, f"pages/{i:016x}-p1.jpg", 773, 1000, marks(i)) for i, o in enumerate(small[:15])]
views.append(PageView("b.txt", 1, snippets=[(marks(0)[0], "before" + EVIL, "INV", "after")]))
code = [{"doc_id": f"src/m{i}.py", "state": "succeeded", "output": {"findings": [
    {"file": f"src/m{i}.py", "line_start": 3, "line_end": 5, "severity": s, "category": EVIL, "message": EVIL, "quote": "x = <y>"}
    for s in ("high", "low", "odd")]}} for i in range(40)]
stopped = {"run_id": "r", "phase": "stopped", "extra": {"stop": {"kind": "breaker", "error": EVIL, "continue": "docmill resume r"}}}
manifest = {"run_id": "r" + EVIL, "phase": "done", "recipe": "invoices", "mode": "realtime", "source": EVIL, "recipe_version": 3}
big = [_invoice(i) for i in range(10_000)]
big_views = [PageView(str(o["doc_id"]), 1, f"pages/{i:016x}-p1.jpg", 773, 1000, marks(i)[:1]) for i, o in enumerate(big)]
at = {"generated_at": 1796167200.0}
cases = {
    "hostile": (manifest, small, integration, costs, review, entries, {**at, "pages": views, "unlisted": 5, "decided": 2}),
    "stopped": (stopped, [], None, {}, [], [], at),
    "integration": ({"run_id": "r", "phase": "done", "recipe": "invoices", "mode": "batch"}, small[:10], integration, {}, review, [], at),
    "findings": ({"run_id": "r", "phase": "done", "recipe": "code-review"}, code, integration, costs, [], entries, at),
    "10k": ({"run_id": "big", "phase": "done", "recipe": "invoices", "mode": "realtime"}, big, None, {"usd": 1.0}, [], [], at),
    "10k-pages": ({"run_id": "big", "phase": "done", "recipe": "invoices", "mode": "realtime"}, big, None, {"usd": 1.0}, [], [], {**at, "pages": big_views}),
}
html_report(*cases["hostile"][:6], extra=cases["hostile"][6])  # templates compiled, modules warm
for name, (m, o, i, c, r, e, x) in cases.items():
    if timing and not name.startswith("10k"):
        continue
    began = time.process_time()
    page = html_report(m, o, i, c, r, e, extra=x)
    took = time.process_time() - began
    if timing:
        print(name, took)
    else:
        (out / f"{name}.html").write_text(page)
"""


def run(checkout: Path, out: Path, mode: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(
        [sys.executable, "-c", RENDER, str(checkout), str(out), mode], capture_output=True, text=True, env=env
    )
    if done.returncode:
        raise SystemExit(f"{checkout}: {done.stderr[-2000:]}")
    return done.stdout


def same_text(a: str, b: str) -> bool:
    def one_way(s: str) -> str:
        return s.replace("&quot;", "&#34;").replace("&#x27;", "&#39;")

    return one_way(a) == one_way(b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True, help="another checkout of docmill")
    ap.add_argument("--repeat", type=int, default=5, help="timed processes per checkout, alternating")
    args = ap.parse_args()
    checkouts = {"base": args.base.resolve(), "this": ROOT}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in checkouts.items():
            (Path(tmp) / name).mkdir()
            run(path, Path(tmp) / name, "render")
        for page in sorted((Path(tmp) / "base").glob("*.html")):
            a, b = page.read_text(), (Path(tmp) / "this" / page.name).read_text()
            verdict = "identical" if a == b else "same text" if same_text(a, b) else "DIFFERENT"
            print(f"{page.stem}: {verdict} ({len(a):,} / {len(b):,} bytes)")
            if verdict == "DIFFERENT":
                at = next(
                    (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
                )
                print(f"  base: {a[max(0, at - 80) : at + 80]!r}\n  this: {b[max(0, at - 80) : at + 80]!r}")
    took: dict[str, dict[str, list[float]]] = {k: {} for k in checkouts}
    for i in range(args.repeat):
        for name in list(checkouts)[:: 1 if i % 2 == 0 else -1]:
            for line in run(checkouts[name], Path(tempfile.gettempdir()), "time").splitlines():
                case, seconds = line.split()
                took[name].setdefault(case, []).append(float(seconds))
    for case in took["base"]:
        base, this = took["base"][case], took["this"][case]
        print(
            f"{case}: CPU s base min {min(base):.3f} median {statistics.median(base):.3f}, this min "
            f"{min(this):.3f} median {statistics.median(this):.3f}; this/base {min(this) / min(base):.2f} "
            f"(minimums), {statistics.median(this) / statistics.median(base):.2f} (medians)"
        )
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

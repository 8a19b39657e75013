"""report.html with "Pages with evidence" at 10,000 documents: its size and the time headless
Chromium takes to open it and filter to one document, without page views and with them (two boxed
values per document) in two shapes: every row's HTML in the page (the shape before) and rows as data
built in the browser by tasks.reporting.pages.PAGES_JS (now). The images themselves live beside the
report and are not loaded here. Each row with pages says whether the filtered document's row was drawn.

    .venv/bin/python bench/report_pages.py [--docs 10000] [--repeat 3]

Figures are from a shared, noisy 2-core machine: compare the rows, not absolute times.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tasks.reporting import html as report_html
from tasks.reporting.html import html_report
from tasks.reporting.pages import Mark, PageView, pages_rows
from tasks.reporting.results import ReportExtras
from tests.fixtures.chromium import CHROMIUM, render
from tests.tasks.reporting.test_report import _invoice


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=10_000)
    ap.add_argument(
        "--repeat", type=int, default=1, help="Chromium openings per shape, interleaved; the fastest shown"
    )
    args = ap.parse_args()
    outcomes = [_invoice(i) for i in range(args.docs)]
    manifest = {"run_id": "big", "phase": "done", "recipe": "invoices", "mode": "realtime"}
    views = [
        PageView(
            str(o["doc_id"]),
            1,
            f"pages/{i:016x}-p1.jpg",
            773,
            1000,
            [
                Mark("invoice_number", f"INV-{i:05d}", "verified", [0.1, 0.1, 0.3, 0.12]),
                Mark("total", 100.0 + i, "verified", [0.1, 0.3, 0.3, 0.32]),
            ],
        )
        for i, o in enumerate(outcomes)
    ]
    as_data = report_html.pages_data
    shapes = ("without pages", "pages as HTML rows", "pages as data rows")
    with tempfile.TemporaryDirectory() as tmp:
        paths, lines = {}, {}
        for shape in shapes:
            extra: ReportExtras = {"pages": views} if shape != "without pages" else {}
            # the shape before: every row's HTML in the page (the script shows a string row as it is)
            report_html.pages_data = cast(Any, pages_rows if shape == "pages as HTML rows" else as_data)
            began = time.perf_counter()
            page = html_report(
                manifest, outcomes, None, {"usd": 1.0, "entries": args.docs}, [], [], extra=extra
            )
            wrote = time.perf_counter() - began
            paths[shape] = Path(tmp) / f"report-{shapes.index(shape)}.html"
            paths[shape].write_text(page)
            lines[shape] = (
                f"{shape}: {args.docs} documents, html_report {wrote:.1f} s, {len(page) / 1e6:.1f} MB"
            )
        opened: dict[str, list[float]] = {s: [] for s in shapes}
        drawn: dict[str, bool] = {}
        for _ in range(args.repeat):  # interleaved: a change in the machine's load hits every shape
            for shape in shapes:
                began = time.perf_counter()
                dom = render(CHROMIUM, paths[shape], fragment=f"q=inv-{args.docs - 1:05d}")
                opened[shape].append(time.perf_counter() - began)
                drawn[shape] = shape == "without pages" or _drawn(dom, args.docs)
        for shape in shapes:
            times = ", ".join(f"{t:.1f}" for t in opened[shape])
            print(
                f"{lines[shape]}, Chromium open + filter {min(opened[shape]):.1f} s (runs: {times})"
                + (
                    ""
                    if shape == "without pages"
                    else f", the filtered document's page row drawn: {drawn[shape]}"
                )
            )


def _drawn(dom: str, docs: int) -> bool:
    """Whether the script filtered "Pages with evidence" to the last document and built its row."""
    section = dom.split('id="pages"')[1].split("</table>")[0]  # the pager and its table
    last = f"inv-{docs - 1:05d}.txt"
    return (
        f"1 of {docs} · page 1 of 1" in section
        and f"<code>batch-{(docs - 1) // 1000:02d}/{last}</code>" in section
    )


if __name__ == "__main__":
    main()

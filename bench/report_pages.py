"""report.html with "Pages with evidence" at 10,000 documents: its size and the time headless
Chromium takes to open it and filter to one document, without and with page views (two boxed values
per document; the images themselves live beside the report and are not loaded here).

    .venv/bin/python bench/report_pages.py [--docs 10000]

Figures are from a shared, noisy 2-core machine: compare the two rows, not absolute times.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tasks.reporting.html import html_report
from tasks.reporting.pages import Mark, PageView
from tests.fixtures.chromium import CHROMIUM, render
from tests.tasks.reporting.test_report import _invoice


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=10_000)
    args = ap.parse_args()
    outcomes = [_invoice(i) for i in range(args.docs)]
    manifest = {"run_id": "big", "phase": "done", "recipe": "invoices", "mode": "realtime"}
    with tempfile.TemporaryDirectory() as tmp:
        for with_pages in (False, True):
            extra: dict[str, object] = {}
            if with_pages:
                extra["pages"] = [
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
            began = time.perf_counter()
            page = html_report(
                manifest, outcomes, None, {"usd": 1.0, "entries": args.docs}, [], [], extra=extra
            )  # type: ignore[arg-type]
            wrote = time.perf_counter() - began
            path = Path(tmp) / f"report{int(with_pages)}.html"
            path.write_text(page)
            began = time.perf_counter()
            dom = render(CHROMIUM, path, fragment=f"q=inv-{args.docs - 1:05d}")
            opened = time.perf_counter() - began
            print(
                f"{'with' if with_pages else 'without'} pages: {args.docs} documents, html_report {wrote:.1f} s, "
                f"{len(page) / 1e6:.1f} MB, Chromium open + filter {opened:.1f} s"
                + (f", page rows found: {'pages-docs' in dom}" if with_pages else "")
            )


if __name__ == "__main__":
    main()

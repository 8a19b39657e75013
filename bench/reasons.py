#!/usr/bin/env python3
"""Every file of a folder as the inventory sees it: one line per document (an e-mail's attachments
too) with its status and reason, then the counts by reason. Reads only; sends nothing.

    .venv/bin/python bench/reasons.py /path/to/corpus [more folders...]

Meant for public corpora fetched by hand (mail libraries' fixtures, Office libraries' test files):
it prints the folder it read, so a figure quoted from it names its corpus. A `<0x...>` address or
a Python exception name in a reason is a bug (reasons are shown to users and compared run to run).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from docmill.settings import get_settings  # noqa: E402
from tasks.source.inventory import inventory  # noqa: E402


def main(folders: list[str]) -> int:
    settings = get_settings()
    counts: Counter[str] = Counter()
    for folder in folders:
        print(f"# corpus: {Path(folder).resolve()}")
        for doc in inventory(folder, settings):
            reason = doc.skip_reason.value if doc.skip_reason else "ok"
            counts[reason] += 1
            what = doc.skip_detail or (f"{doc.text_chars} chars" if doc.text_chars is not None else "")
            print(f"{doc.doc_id}\t{reason}\t{what}")
    print("# by reason: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))

"""docmill over a folder of public documents nobody here wrote: every file's outcome or reason, and the
estimate against the bill, per component.

    .venv/bin/python bench/public_corpus.py FOLDER [FOLDER...] [--recipe invoices] [--limit N] [--keep DIR]

FOLDER (or env DOCMILL_PUBLIC_CORPUS) holds the files, flat or in folders: e.g. PDFs, images, Office
files and e-mails taken from the test suites of public projects (the folder's SOURCES.md, or its
parent's, says where they came from; this bench prints it). The bench runs the `docmill` command line
offline against its built-in emulator (ANTHROPIC_API_KEY is removed from the environment). Each folder
is split in two halves (files alternately, by name), each half run into its own store; then each half
is estimated with an empty store (the prior) and with the other half's store (the answer sizes learned
from it): held out both ways. `--keep DIR` keeps the halves and stores; a later call with the same DIR
re-estimates against the kept runs without running again (to compare estimate code on one bill).

It prints per file the outcome or the reason (a table, and a count by reason), flags the reasons a user
could not act on (a memory address, a Python exception's repr, "empty" for a file that has content, a
file with no outcome at all, a "success" with every field null), and the estimate against the bill
(docmill's cost ledger, which records the emulator's usage) for input, answer text, thinking and USD,
per-file pass and with the integration pass. Figures depend on the emulator's answers: they are a
stand-in for the real API's, not a measurement of it (see the README's section on the estimate).
Default: every file; 153 + 232 files took ~15 minutes on a shared, loaded 2-core machine (four runs
of 40-220 s, eight estimates; with --keep's runs, the estimates alone ~3-5 minutes); --limit N for less. A file whose reason says "empty" is flagged when it
has more than 2 KB: a blank slide deck is then a false alarm, a deck of charts is not.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkpoints.costs import CostLedger
from checkpoints.manifest import ManifestStore
from checkpoints.outcomes import OutcomeLog
from checkpoints.store import open_store

DOCMILL = str(Path(sys.executable).parent / "docmill")
ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
REPR = re.compile(r"Traceback|<[\w.]+ object|\b[A-Z]\w*(Error|Exception)\(|<class '")


@dataclass
class Estimated:
    """What `docmill estimate` printed."""

    input_tokens: int = 0
    output_tokens: int = 0
    text_tokens: int = 0
    thinking_tokens: int = 0
    usd: float = 0.0
    integration_usd: float = 0.0
    source: str = ""
    documents: int = 0


@dataclass
class Billed:
    """What a run's cost ledger holds."""

    input_tokens: int = 0
    output_tokens: int = 0
    thinking_tokens: int = 0
    usd: float = 0.0
    integration_usd: float = 0.0
    documents: int = 0
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0


def _num(pattern: str, text: str, cast: Any = int) -> Any:
    m = re.search(pattern, text)
    return cast(m.group(1).replace(",", "")) if m else cast(0)


def _source(out: str) -> str:
    """Where the estimate's output figure came from, as it says: the prior, or learned from N documents."""
    m = re.search(r"; (prior|learned from [^(]*)", out)
    return m.group(1).strip() if m else "source not stated"


def estimate(folder: Path, recipe: str, store: Path) -> Estimated:
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    out = subprocess.run(
        [DOCMILL, "estimate", str(folder), "--recipe", recipe, "--store", str(store)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    return Estimated(
        input_tokens=_num(r"input tokens ~([\d,]+)", out),
        output_tokens=_num(r"output tokens ~([\d,]+)", out),
        text_tokens=_num(r"output: answers ~([\d,]+)", out),
        thinking_tokens=_num(r"\+ thinking ~([\d,]+)", out),
        usd=_num(r"realtime: ~\$([\d.]+)", out, float),
        integration_usd=_num(r"integration, full:.*?~\$([\d.]+)", out, float),
        source=_source(out),
        documents=_num(r"documents to send: (\d+)", out),
    )


def run(folder: Path, recipe: str, store: Path) -> Billed:
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    start = time.monotonic()
    subprocess.run(
        [DOCMILL, "run", str(folder), "--recipe", recipe, "--store", str(store)],
        capture_output=True,
        text=True,
        env=env,
        check=False,  # exit 6 (integration partial) or 3 still leaves a ledger to read
    )
    billed = read_bill(store)
    billed.wall_s = time.monotonic() - start
    return billed


def _all_null(output: Any) -> bool:
    """Every top-level field null (a value-and-evidence pair counts by its value), no list items."""
    if not isinstance(output, dict) or not output:
        return False
    for v in output.values():
        v = v.get("value") if isinstance(v, dict) and "value" in v else v
        if v not in (None, [], "", {}):
            return False
    return True


def _top_level_string_fields(output: Any) -> bool:
    return isinstance(output, dict) and any(isinstance(v, dict) and "value" in v for v in output.values())


def file_rows(folder: Path, outcomes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per document (attachments under their file), and one per file that has no document."""
    rows = []
    covered: set[str] = set()
    for o in sorted(outcomes, key=lambda o: o["doc_id"]):
        doc_id = o["doc_id"]
        top = doc_id.split(".eml/", 1)[0] + ".eml" if ".eml/" in doc_id else doc_id
        covered.add(top)
        reason = o.get("reason") or ""
        detail = o.get("last_error") or ""
        state = o.get("state") or "?"
        if state == "failed" and not reason:
            reason = o.get("failure_type") or "failed"
        flags = []
        text = f"{reason} {detail}"
        if ADDRESS.search(text):
            flags.append("memory address in the reason")
        if REPR.search(text):
            flags.append("a Python exception's repr in the reason")
        path = folder / top
        size = path.stat().st_size if path.exists() else 0
        # an e-mail's attachment: the size on disk is the whole message's, which says nothing of it
        if "empty" in text.lower() and doc_id == top and size > 2048:
            flags.append(f"'empty' for a file of {size:,} bytes: check what it holds")
        output = o.get("output")
        if state in ("succeeded", "needs_review") and _top_level_string_fields(output) and _all_null(output):
            flags.append("succeeded with every field null")
        rows.append({"doc": doc_id, "state": state, "reason": reason, "detail": detail, "flags": flags})
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = str(path.relative_to(folder))
        if rel not in covered:
            rows.append(
                {
                    "doc": rel,
                    "state": "none",
                    "reason": "",
                    "detail": "",
                    "flags": ["no outcome and no reason"],
                }
            )
    return rows


def pct(est: float, bill: float) -> str:
    return f"{(est / bill - 1):+.1%}" if bill else "-"


def compare(label: str, est: Estimated, bill: Billed) -> list[str]:
    est_text = est.text_tokens or max(0, est.output_tokens - est.thinking_tokens)
    bill_text = bill.output_tokens - bill.thinking_tokens
    return [
        f"{label}: estimate ({est.source}) vs bill, per-file pass, {est.documents} documents estimated, "
        f"{bill.documents} billed",
        f"  {'input tokens':<22} {est.input_tokens:>10,} {bill.input_tokens:>10,}  {pct(est.input_tokens, bill.input_tokens)}",
        f"  {'answer text tokens':<22} {est_text:>10,} {bill_text:>10,}  {pct(est_text, bill_text)}",
        f"  {'thinking tokens':<22} {est.thinking_tokens:>10,} {bill.thinking_tokens:>10,}  "
        f"{pct(est.thinking_tokens, bill.thinking_tokens)}",
        f"  {'USD per-file pass':<22} {est.usd:>10.4f} {bill.usd:>10.4f}  {pct(est.usd, bill.usd)}",
        f"  {'USD with integration':<22} {est.usd + est.integration_usd:>10.4f} "
        f"{bill.usd + bill.integration_usd:>10.4f}  {pct(est.usd + est.integration_usd, bill.usd + bill.integration_usd)}",
    ]


@dataclass
class FolderResult:
    """One folder's estimates and bills: the prior of each half (empty store), the learned estimate of
    each half from the other half's run, and each half's bill."""

    name: str
    prior: list[Estimated]
    learned: list[Estimated]
    bills: list[Billed]


def _sum_est(parts: list[Estimated], source: str) -> Estimated:
    return Estimated(
        input_tokens=sum(e.input_tokens for e in parts),
        output_tokens=sum(e.output_tokens for e in parts),
        text_tokens=sum(e.text_tokens for e in parts),
        thinking_tokens=sum(e.thinking_tokens for e in parts),
        usd=sum(e.usd for e in parts),
        integration_usd=sum(e.integration_usd for e in parts),
        source=source,
        documents=sum(e.documents for e in parts),
    )


def _sum_bill(parts: list[Billed]) -> Billed:
    return Billed(
        input_tokens=sum(b.input_tokens for b in parts),
        output_tokens=sum(b.output_tokens for b in parts),
        thinking_tokens=sum(b.thinking_tokens for b in parts),
        usd=sum(b.usd for b in parts),
        integration_usd=sum(b.integration_usd for b in parts),
        documents=sum(b.documents for b in parts),
    )


def read_bill(store: Path) -> Billed:
    """The bill of the one run in `store` (its cost ledger)."""
    st = open_store(str(store))
    run_id = sorted(ManifestStore(st).list_runs())[-1]
    ledger = CostLedger(st, run_id)
    billed = Billed(outcomes=list(OutcomeLog(st, run_id).all()))
    for e in ledger.entries():
        if e.pass_name == "file":
            billed.input_tokens += e.input_tokens + e.cache_creation_input_tokens + e.cache_read_input_tokens
            billed.output_tokens += e.output_tokens
            billed.thinking_tokens += e.thinking_tokens
            billed.usd += e.usd
        elif e.pass_name == "integration":
            billed.integration_usd += e.usd
    billed.documents = len({e.doc_id for e in ledger.entries() if e.pass_name == "file"})
    return billed


def split(folder: Path, files: list[Path], work: Path) -> list[Path]:
    """The folder's files in two halves (alternately, by name), copied under `work` (kept when there)."""
    halves = [work / "A", work / "B"]
    if all(h.is_dir() for h in halves):
        return halves
    for i, path in enumerate(files):
        dest = halves[i % 2] / path.relative_to(folder)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
    return halves


def bench_folder(folder: Path, files: list[Path], recipe: str, work: Path) -> FolderResult:
    """Each half run into its own store (once: a kept store's run is reused), then estimated with an
    empty store (the prior) and with the other half's store (learned): held-out both ways."""
    halves = split(folder, files, work)
    stores = [work / "store-A", work / "store-B"]
    bills = []
    for half, store in zip(halves, stores, strict=True):
        if not (store / "runs").is_dir():
            b = run(half, recipe, store)
            print(
                f"  ran {folder.name} half {half.name}: {b.documents} documents billed, {b.wall_s:.0f} s wall"
            )
        bills.append(read_bill(store))
    empty = work / "empty-store"
    prior = [estimate(h, recipe, empty) for h in halves]
    learned = [estimate(halves[0], recipe, stores[1]), estimate(halves[1], recipe, stores[0])]
    return FolderResult(folder.name, prior, learned, bills)


def figures(label: str, est: Estimated, bill: Billed) -> str:
    """One row of the side-by-side table: the estimate against the bill, per component."""
    est_text = est.text_tokens or max(0, est.output_tokens - est.thinking_tokens)
    bill_text = bill.output_tokens - bill.thinking_tokens
    return (
        f"  {label:<34} {est.documents:>4}/{bill.documents:<4} "
        f"{pct(est.input_tokens, bill.input_tokens):>7} {pct(est_text, bill_text):>7} "
        f"{pct(est.thinking_tokens, bill.thinking_tokens):>7} {pct(est.usd, bill.usd):>7} "
        f"{pct(est.usd + est.integration_usd, bill.usd + bill.integration_usd):>7} "
        f"{pct(est.integration_usd, bill.integration_usd):>7}   "
        f"${est.usd + est.integration_usd:.4f} / ${bill.usd + bill.integration_usd:.4f}"
    )


def table(results: list[FolderResult]) -> list[str]:
    rows = [
        "estimate vs bill (realtime; + = the estimate is high): documents estimated/billed, input tokens, "
        "answer text tokens, thinking tokens, USD per-file pass, USD with integration, USD of the integration pass",
        f"  {'folder, half, source':<34} {'docs':>9} {'input':>7} {'text':>7} {'think':>7} {'file':>7} "
        f"{'+integ':>7} {'integ':>7}   USD estimate / bill",
    ]
    for r in results:
        rows += [
            figures(f"{r.name} A prior", r.prior[0], r.bills[0]),
            figures(f"{r.name} B prior", r.prior[1], r.bills[1]),
            figures(f"{r.name} whole prior", _sum_est(r.prior, "prior"), _sum_bill(r.bills)),
            figures(f"{r.name} A learned from B", r.learned[0], r.bills[0]),
            figures(f"{r.name} B learned from A", r.learned[1], r.bills[1]),
            figures(f"{r.name} both learned", _sum_est(r.learned, "learned"), _sum_bill(r.bills)),
        ]
    return rows


def describe(folder: Path, files: list[Path]) -> None:
    for sources in (folder / "SOURCES.md", folder.parent / "SOURCES.md"):
        if sources.exists():
            print(f"corpus {folder}: {len(files)} files; sources in {sources}:")
            block = [
                ln for ln in sources.read_text().splitlines() if folder.name in ln or ln.startswith("- ")
            ]
            print("\n".join(f"  {ln}" for ln in block if folder.name in ln or "_*" in ln))
            break
    else:
        print(f"corpus {folder}: {len(files)} files (no SOURCES.md beside it: say where they came from)")
    print(f"types: {dict(Counter(p.suffix.lower() or '-' for p in files).most_common())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", default=[os.environ.get("DOCMILL_PUBLIC_CORPUS")])
    parser.add_argument("--recipe", default="invoices")
    parser.add_argument("--limit", type=int, default=0, help="take the first N files by name (0: all)")
    parser.add_argument("--show", type=int, default=1000, help="table rows shown at most")
    parser.add_argument(
        "--keep",
        default="",
        help="keep the halves and the runs' stores under this folder; a later call with the same "
        "folder re-estimates against the kept runs without running again",
    )
    args = parser.parse_args()
    folders = [Path(f) for f in args.folders if f]
    if not folders:
        parser.error("give a folder of public documents (or set DOCMILL_PUBLIC_CORPUS)")
    results = []
    with tempfile.TemporaryDirectory(prefix="docmill-public-") as tmp:
        for folder in folders:
            files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "SOURCES.md")
            files = files[: args.limit] if args.limit else files
            describe(folder, files)
            work = Path(args.keep or tmp) / f"{folder.name}-{len(files)}"
            result = bench_folder(folder, files, args.recipe, work)
            results.append(result)
            rows = file_rows(work / "A", result.bills[0].outcomes) + file_rows(
                work / "B", result.bills[1].outcomes
            )
            print(f"\nper file ({len(rows)} rows: documents, attachments under their message):")
            print(f"  {'document':<58} {'outcome':<12} reason")
            for r in rows[: args.show]:
                why = r["reason"] + (f": {r['detail']}" if r["detail"] and r["detail"] != r["reason"] else "")
                flag = f"  <-- {'; '.join(r['flags'])}" if r["flags"] else ""
                print(f"  {r['doc'][:58]:<58} {r['state']:<12} {why[:110]}{flag}")
            print("\nby outcome and reason:")
            for (state, reason), n in Counter((r["state"], r["reason"] or "-") for r in rows).most_common():
                print(f"  {n:4}  {state:<12} {reason}")
            flagged = [r for r in rows if r["flags"]]
            print(f"\nreasons a user could not act on: {len(flagged)}")
            for flag, n in Counter(f for r in flagged for f in r["flags"]).most_common():
                print(f"  {n:4}  {flag}")
            print()
            for i, half in enumerate("AB"):
                print(
                    "\n".join(
                        compare(f"{folder.name} half {half}, empty store", result.prior[i], result.bills[i])
                        + compare(
                            f"{folder.name} half {half}, learned from the other half's run",
                            result.learned[i],
                            result.bills[i],
                        )
                    )
                )
            print()
    print("\n".join(table(results)))


if __name__ == "__main__":
    main()

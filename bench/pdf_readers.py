"""Which library reads a PDF's text layer best: pypdf, pypdfium2 and pdfminer.six side by side in
one run, on public PDFs (and PyMuPDF as a yardstick only when it can be imported: it is AGPL and never
in docmill's lock; install it in a scratch venv outside the repository and add its site-packages to
PYTHONPATH).

Measured per reader, on every PDF under the corpus folder (`--corpus`, or DOCMILL_PDF_CORPUS;
default /work/corpora), each file read in full, text page by page:

  whole     labelled values kept as whole tokens: expected values in `<name>.json` beside
            `<name>.pdf` (the invoice2data test suite's, parsee-datasets' invoices: ids, amounts, VAT /
            IBAN numbers ...; dates and free
            text left out, they are stated in other words) that any reader's text contains
            (spacing and case aside) and that this reader's text holds with no letter or digit glued
            on either side
  glued     tokens gluing digits and a word of 4+ letters (`993548900Factuurnummer:`): a count
  order     reading order agreement: the share of a reader's word pairs (two consecutive words)
            that the other readers also produce; a reader that scrambles lines scores low (a proxy:
            no reference transcript exists for these files)
  poor      pages whose text layer is mostly unmapped glyphs or control characters (docmill's
            reader: `tasks.source.readers.pdf.poor_text`)
  pages/s   pages read per CPU second of this process (the machine is shared and noisy: CPU time
            is steadier than wall time; every reader runs in-process, single-threaded; compare the
            ratios, not the absolute figures)
  errors    files a reader raised on
  boxes     (docmill) labelled values whose evidence boxes (tasks.source.readers.pdf_text.span_boxes) hold
            exactly the value's text when pdfium reads the page back under them

The last reader, `docmill`, is tasks.source.readers.pdf.read_pdf itself (what the inventory runs).

    .venv/bin/python bench/pdf_readers.py [--corpus /work/corpora] [--repeat 1]

Target (issue 31): every labelled value a whole token on the invoice corpus; >= 10x pypdf's pages/s.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import logging
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tasks.source.readers.content import Unreadable
from tasks.source.readers.pdf import read_pdf
from tasks.source.readers.pdf_text import poor_text, span_boxes

Reader = Callable[[bytes], list[str]]
SKIP_FIELDS = {"desc", "issuer", "currency", "currency_symbol", "country_code", "state_code", "narration"}
SKIP_FIELDS |= {"note", "hotel_details", "partner_name"}  # free text: stated in other words or lines


def read_pypdf(data: bytes) -> list[str]:
    from pypdf import PdfReader

    return [p.extract_text() or "" for p in PdfReader(io.BytesIO(data)).pages]


def read_pdfium(data: bytes) -> list[str]:
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(data)
    try:
        out = []
        for page in doc:
            tp = page.get_textpage()
            out.append(tp.get_text_range())
            tp.close()
            page.close()
        return out
    finally:
        doc.close()


def read_pdfminer(data: bytes) -> list[str]:
    from pdfminer.high_level import extract_text

    return extract_text(io.BytesIO(data)).split("\f")


def read_fitz(data: bytes) -> list[str]:
    import fitz  # type: ignore[import-not-found]  # PyMuPDF, AGPL: a yardstick from a scratch venv

    with fitz.open(stream=data, filetype="pdf") as doc:
        return [page.get_text() for page in doc]


def read_docmill(data: bytes) -> list[str]:
    content = read_pdf(data)
    return [content.text[p.start : p.end] for p in content.pages]


def readers() -> dict[str, Reader]:
    out: dict[str, Reader] = {"pypdf": read_pypdf, "pypdfium2": read_pdfium, "pdfminer.six": read_pdfminer}
    try:
        import fitz  # noqa: F401

        out["pymupdf (yardstick)"] = read_fitz
    except ImportError:
        pass
    out["docmill"] = read_docmill
    return out


def labelled(json_path: Path) -> dict[str, object]:
    data = json.loads(json_path.read_text())
    record = data[0] if isinstance(data, list) else data  # invoice2data: a list; parsee-datasets: one record
    return {
        k: v
        for k, v in record.items()
        if k not in SKIP_FIELDS and not k.startswith("date") and isinstance(v, (str, int, float))
    }


def forms(value: object) -> list[str]:
    """How a labelled value may be written: an amount with either decimal mark and grouping."""
    if isinstance(value, float):
        out = {f"{value:.2f}", f"{value:.2f}".replace(".", ","), f"{value:,.2f}"}
        out.add(f"{value:,.2f}".replace(",", " ").replace(".", ","))
        out.add(f"{value:,.2f}".replace(",", "_").replace(".", ",").replace("_", "."))
        return sorted(out)
    return [str(value)]


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text).lower()


def token_span(text: str, value: object) -> tuple[int, int] | None:
    """Where `value` stands as a whole token in `text` (spacing inside it aside), or None."""
    for form in forms(value):
        pattern = r"\s*".join(re.escape(ch) for ch in re.sub(r"\s+", "", form))  # "FR 604 219 388 61"
        m = re.search(r"(?<![\w])" + pattern + r"(?![\w]|[.,]\d)", text, re.IGNORECASE)
        if m:
            return m.start(), m.end()
    return None


def whole_token(text: str, value: object) -> bool:
    return token_span(text, value) is not None


def boxed(data: bytes, value: object) -> bool:
    """Whether the boxes docmill gives a labelled value's span hold exactly that text on the page
    (pdfium reads the text under each box back)."""
    import pypdfium2 as pdfium

    content = read_pdf(data)
    span = token_span(content.text, value)
    if span is None:
        return False
    boxes = span_boxes(data, content.text, content.pages, [span])[0]
    doc = pdfium.PdfDocument(data)
    under = []
    for page_no, left, top, right, bottom in boxes:
        page = doc[page_no - 1]
        w, h = page.get_size()
        under.append(
            page.get_textpage().get_text_bounded(left * w, (1 - bottom) * h, right * w, (1 - top) * h)
        )
    return " ".join(" ".join(under).split()) == " ".join(content.text[span[0] : span[1]].split())


def present(text: str, value: object) -> bool:
    squashed = _squash(text)
    return any(_squash(form) in squashed for form in forms(value))


GLUED = re.compile(r"\d{3,}[^\W\d_]{4,}|[^\W\d_]{4,}\d{3,}")
WORD = re.compile(r"\w+")


def pairs(text: str) -> set[tuple[str, str]]:
    words = [w.lower() for w in WORD.findall(text)]
    return set(itertools.pairwise(words))


def main() -> None:
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    logging.getLogger("pdfminer").setLevel(logging.ERROR)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=os.environ.get("DOCMILL_PDF_CORPUS", "/work/corpora"))
    ap.add_argument("--repeat", type=int, default=1, help="read each file this many times for pages/s")
    args = ap.parse_args()
    root = Path(args.corpus)
    files = sorted(root.rglob("*.pdf"))
    sources = root / "SOURCES.md"
    print(f"corpus: {root} ({len(files)} PDFs; where they came from: {sources if sources.exists() else '?'})")
    rs = readers()
    texts: dict[str, dict[Path, list[str]]] = {name: {} for name in rs}
    seconds: dict[str, float] = {}
    spent: dict[str, dict[Path, float]] = {name: {} for name in rs}
    pages: Counter[str] = Counter()
    errors: dict[str, list[str]] = {name: [] for name in rs}
    for read in rs.values():  # imports and first-use set-up are not a reader's pages/s
        for path in files[:3]:
            try:
                read(path.read_bytes())
            except Exception:  # a warm-up only
                continue
    for path in files:
        data = path.read_bytes()
        for name, read in rs.items():  # interleaved file by file: machine noise hits every reader alike
            try:
                t0 = time.process_time()
                for _ in range(args.repeat):
                    got = read(data)
                spent[name][path] = time.process_time() - t0
                texts[name][path] = got
            except Unreadable as e:
                errors[name].append(f"{path.name}: {e.reason}")
            except Exception as e:  # a reader failing on a file is a measured outcome
                errors[name].append(f"{path.name}: {type(e).__name__}")
    invoices = [p for p in files if p.with_suffix(".json").exists()]
    values = {p: labelled(p.with_suffix(".json")) for p in invoices}
    stated = {
        (p, k)
        for p in invoices
        for k, v in values[p].items()
        if any(whole_token("\n".join(texts[n].get(p, [])), v) for n in rs)
    }
    absent = [
        f"{p.stem}.{k}"
        for p in invoices
        for k in values[p]
        if (p, k) not in stated and any(present("\n".join(texts[n].get(p, [])), values[p][k]) for n in rs)
    ]
    print(
        f"invoices: {len(invoices)} with expected values; labelled values a whole token in some reader's"
        f" text: {len(stated)}; in none (stated otherwise, or only inside other text): {', '.join(absent)}"
    )
    common = [p for p in files if all(p in texts[n] for n in rs)]
    for name in rs:  # pages per second over the files every reader read
        seconds[name] = sum(spent[name][p] for p in common)
        pages[name] = sum(len(texts[name][p]) for p in common) * args.repeat
    print(
        f"pages/s over the {len(common)} files every reader read ({sum(len(texts['pypdf'][p]) for p in common)} pages)"
    )
    groups = sorted({p.parent.name for p in common})
    print(
        "pages/s by source: "
        + "; ".join(
            f"{g}: "
            + ", ".join(
                f"{n} {sum(len(texts[n][p]) for p in common if p.parent.name == g) / max(1e-9, sum(spent[n][p] for p in common if p.parent.name == g)) * args.repeat:.0f}"
                for n in rs
            )
            for g in groups
        )
    )
    base = pages["pypdf"] / seconds["pypdf"] if seconds["pypdf"] else 0.0
    head = f"{'reader':22} {'whole':>9} {'glued':>6} {'order':>6} {'poor':>5} {'pages/s':>8} {'x pypdf':>8} {'errors':>6}"
    print(head)
    missed: dict[str, list[str]] = {}
    for name in rs:
        whole = sum(1 for p, k in stated if whole_token("\n".join(texts[name].get(p, [])), values[p][k]))
        missed[name] = [
            f"{p.stem}.{k}={values[p][k]!r}"
            for p, k in sorted(stated)
            if not whole_token("\n".join(texts[name].get(p, [])), values[p][k])
        ]
        glued = sum(len(GLUED.findall(t)) for doc in texts[name].values() for t in doc)
        agree = total = 0
        for path, doc in texts[name].items():
            mine = pairs("\n".join(doc))
            others: set[tuple[str, str]] = set()
            for other in rs:
                if other not in {name, "docmill"} | ({"pypdfium2"} if name == "docmill" else set()):
                    others |= pairs("\n".join(texts[other].get(path, [])))
            agree += len(mine & others)
            total += len(mine)
        poor = sum(1 for doc in texts[name].values() for t in doc if poor_text(t))
        rate = pages[name] / seconds[name] if seconds[name] else 0.0
        print(
            f"{name:22} {whole:>4}/{len(stated):<4} {glued:>6} {agree / max(1, total):>6.3f} {poor:>5}"
            f" {rate:>8.1f} {rate / base if base else 0:>7.1f}x {len(errors[name]):>6}"
        )
    boxes_ok = [f"{p.stem}.{k}" for p, k in sorted(stated) if boxed(p.read_bytes(), values[p][k])]
    print(
        f"docmill boxes: {len(boxes_ok)}/{len(stated)} labelled values have boxes whose text (read back"
        " from the page) is the value's text"
    )
    for name in rs:
        if missed[name]:
            print(f"{name}: not a whole token: {', '.join(missed[name])}")
        if errors[name]:
            print(f"{name}: errors: {'; '.join(errors[name])}")


if __name__ == "__main__":
    main()

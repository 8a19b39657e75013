#!/usr/bin/env python3
"""The evidence gate on public labelled documents: are correct values accepted, wrong ones refused?

    .venv/bin/python bench/gate.py [CORPORA] [--split dev|held-out|all] [--show 5]

CORPORA (or the env var GATE_CORPORA) is a folder holding any of these public corpora, each read as
its project publishes it (bench/gate.py never ships a document):

- `invoice2data/`: `*.pdf` (or `*.txt`) with the expected `*.json` of the invoice2data project's tests
  (github invoice-x/invoice2data, tests/compare): invoices in English, German, French, Dutch, Polish;
  the PDF text is read with pypdfium2 here, independent of docmill's reader;
- `sroie/`: `NNN.txt` (the OCR lines of ICDAR 2019 SROIE's box files, one box a line) with `NNN.json`
  (its key labels: company, date, address, total), Malaysian receipts in English and Malay;
- `parsee-invoices/`: `*.pdf` with `*.json` (total, issuer, date: the human-checked answers of
  github parsee-ai/parsee-datasets, datasets/invoices), invoices in German and English;
- `kleister-nda/{dev-0,train}/`: `in.tsv` (the decompressed in.tsv.xz) and `expected.tsv` of Kleister
  NDA (github applicaai/kleister-nda): effective date, jurisdiction and parties of US contracts.
`SOURCES.md` in the folder says where each came from; the bench prints it.

For every labelled value it finds the line (or, for a value that spans lines, the fewest consecutive
lines) of the document text that states it, with a locator that shares no code with the gate (digits
of an amount, the day, month and year numbers of a date, the words of a text). Then it asks the real
gate (`tasks.per_file.gate.check`, a one-field recipe per kind) to accept (value, that line). Values
no line states are label problems: counted and shown, never scored. Negative controls built from the
same documents must be refused: a value of the same field from another document (skipped when that
line states it too), a digit changed, a date's day given as an amount, a part of an identifier or of a
grouped number, the decimal point lost (x100), a date field holding a non-ISO string, and docmill's
own wrapper: the document id with no evidence, and the `<document id=..>` tag quoted as evidence.

`--split dev` is what the rules were developed on (invoice2data, SROIE's first half, Kleister NDA
dev-0); `held-out` is what they were not (parsee's invoices, SROIE's second half, Kleister NDA train).
Targets: >= 98% of correct values accepted, >= 99% of wrong values refused.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pydantic import BaseModel, ConfigDict, Field  # noqa: E402

from tasks.per_file.gate import check  # noqa: E402
from tasks.recipes import Recipe  # noqa: E402

# ---- the gate, asked as a run asks it -----------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextPair(_Strict):
    value: str | None = Field(description="The value as written; null when absent.")
    evidence: str | None = Field(description="The line that states it, verbatim.")


class DatePair(_Strict):
    value: str | None = Field(description="The date as YYYY-MM-DD; null when absent.")
    evidence: str | None = Field(description="The line that states it, verbatim.")


class AmountPair(_Strict):
    value: float | None = Field(description="A plain number; null when absent.")
    evidence: str | None = Field(description="The line that states it, verbatim.")


class Pairs(_Strict):
    """Every value the bench asks about one document, by kind: one gate call per document."""

    texts: list[TextPair]
    dates: list[DatePair]
    amounts: list[AmountPair]


class Nothing(_Strict):
    note: str


RECIPE = Recipe(
    name="gate-bench",
    version="1",
    file_schema=Pairs,
    file_prompt="Extract the values.",
    integration_schema=Nothing,
    integration_prompt="Nothing.",
    doc_types=frozenset({"txt", "pdf"}),
    evidence_fields=("evidence",),
)
_LISTS = {"text": "texts", "date": "dates", "amount": "amounts"}


def gate_verdicts(asks: list[tuple[str, Any, str | None]], text: str) -> list[bool]:
    """Whether the gate (`check`, as a run calls it) accepts each (kind, value, evidence) for the
    document `text`: one answer holding them all, each judged by the flags on its own path."""
    lists: dict[str, list[dict[str, Any]]] = {name: [] for name in _LISTS.values()}
    where = []
    for kind, value, evidence in asks:
        items = lists[_LISTS[kind]]
        where.append(f"$.{_LISTS[kind]}[{len(items)}].evidence")
        items.append({"value": value, "evidence": evidence})
    message = {"content": [{"type": "text", "text": json.dumps(lists)}], "stop_reason": "end_turn"}
    verdict = check(RECIPE, text, message)
    if verdict.ok:
        return [True] * len(asks)
    if not verdict.flags:  # not a flag per pair: the answer itself failed
        raise SystemExit(f"gate: {verdict.problem}: {verdict.errors[:2]}")
    flagged = {f["path"] for f in verdict.flags}
    return [path not in flagged for path in where]


# ---- corpora ------------------------------------------------------------------------------------


@dataclass
class Label:
    field: str
    kind: str  # text | date | amount
    value: Any


@dataclass
class Doc:
    source: str
    doc_id: str
    split: str
    text: str
    labels: list[Label]
    lang: str = ""


_LANG_WORDS = {
    "de": "rechnung datum betrag summe gesamt mwst und der die das für nicht ust steuer",
    "fr": "facture montant tva numéro commande règlement échéance société ttc",
    "nl": "factuur datum bedrag totaal btw het een van voor en bestelling klant",
    "pl": "faktura data kwota razem netto brutto vat sprzedawca nabywca płatności",
    "ms": "terima kasih tunai jumlah bayaran harga barang",
    "en": "invoice date amount total tax the and of to for agreement",
}


def fold(text: str) -> str:
    plain = unicodedata.normalize("NFKD", text.casefold())
    return "".join(c for c in plain if not unicodedata.combining(c))


def language(text: str) -> str:
    tokens = Counter(re.findall(r"[^\W\d_]+", text.casefold()))
    score = {lang: sum(tokens[w] for w in ws.split()) for lang, ws in _LANG_WORDS.items()}
    return max(score, key=lambda k: score[k]) if any(score.values()) else "?"


def pdf_text(path: Path) -> str:
    import pypdfium2 as pdfium  # only the invoice2data corpus has PDFs

    pdf = pdfium.PdfDocument(path.read_bytes())
    try:
        pages = [pdf[i].get_textpage().get_text_range() for i in range(len(pdf))]
    finally:
        pdf.close()
    return "\n".join(p.replace("\r\n", "\n").replace("\r", "\n") for p in pages)


# Not values a document states: invoice2data's template name (`issuer`), descriptions, derived fields
_SKIP = {"desc", "currency", "currency_symbol", "lines", "line_items", "sums", "note"}


def load_invoice2data(folder: Path) -> list[Doc]:
    return load_pdf_json(folder, "invoice2data", "dev", skip=_SKIP | {"issuer"})


def load_parsee(folder: Path) -> list[Doc]:
    return load_pdf_json(folder, "parsee-invoices", "held-out", skip=_SKIP)


def load_pdf_json(folder: Path, source: str, split: str, skip: set[str]) -> list[Doc]:
    """`<name>.pdf` (or `.txt`) with its expected values in `<name>.json` (an object, or a list of
    one): `date*` fields are dates, numbers named `amount*` or `total` amounts, the rest text."""
    docs = []
    for meta in sorted(folder.glob("*.json")):
        pdf, txt = meta.with_suffix(".pdf"), meta.with_suffix(".txt")
        if pdf.exists():
            text = pdf_text(pdf)
        elif txt.exists():
            text = txt.read_text(encoding="utf-8", errors="replace")
        else:
            continue
        record = json.loads(meta.read_text(encoding="utf-8"))
        record = record[0] if isinstance(record, list) else record
        labels = []
        for name, value in record.items():
            if name in skip or value in (None, "") or isinstance(value, list | dict | bool):
                continue
            if name.startswith("date"):
                labels.append(Label(name, "date", str(value)))
            elif (name.startswith("amount") or name == "total") and isinstance(value, int | float):
                labels.append(Label(name, "amount", float(value)))
            else:
                labels.append(Label(name, "text", str(value)))
        docs.append(Doc(source, f"{source}/{meta.stem}", split, text, labels))
    return docs


def _dmy(text: str) -> str | None:
    """A SROIE date label (written as the receipt writes it, Malaysian day-first) as ISO."""
    m = re.fullmatch(r"\s*(\d{1,2})\s*[./-]\s*(\d{1,2})\s*[./-]\s*(\d{2}|\d{4})\s*", text)
    if m:
        d, mo, y = map(int, m.groups())
        y += 2000 if y < 100 else 0
        try:
            return date(y, mo, d).isoformat()
        except ValueError:
            return None
    import dateparser  # labels only (a few), never the gate

    parsed = dateparser.parse(text, settings={"DATE_ORDER": "DMY"}, languages=["en"])
    return parsed.date().isoformat() if parsed else None


def load_sroie(folder: Path) -> list[Doc]:
    docs = []
    keys = sorted(folder.glob("*.json"))
    for i, meta in enumerate(keys):
        txt = meta.with_suffix(".txt")
        if not txt.exists():
            continue
        record = json.loads(meta.read_text(encoding="utf-8", errors="replace"))
        labels = []
        for name in ("company", "address"):
            if record.get(name):
                labels.append(Label(name, "text", record[name]))
        if record.get("date"):
            iso = _dmy(record["date"])
            labels.append(Label("date", "date", iso if iso else "?" + record["date"]))
        if record.get("total"):
            try:
                labels.append(Label("total", "amount", float(record["total"].replace(",", ""))))
            except ValueError:
                labels.append(Label("total", "amount", None))
        split = "dev" if i < len(keys) // 2 else "held-out"
        text = txt.read_text(encoding="utf-8", errors="replace")
        docs.append(Doc("sroie", f"sroie/{meta.stem}", split, text, labels))
    return docs


def load_kleister(folder: Path) -> list[Doc]:
    docs = []
    for part, split in (("dev-0", "dev"), ("train", "held-out")):
        src, exp = folder / part / "in.tsv", folder / part / "expected.tsv"
        if not src.exists() or not exp.exists():
            continue
        rows = src.read_text(encoding="utf-8").splitlines()
        wants = exp.read_text(encoding="utf-8").splitlines()
        for row, want in zip(rows, wants, strict=False):
            cols = row.split("\t")
            text = cols[-1].replace("\\n", "\n").replace("\\t", "\t")
            labels = []
            for pair in want.split():
                name, _, value = pair.partition("=")
                if name == "term":  # normalised (`3_years` for `three (3) years`): not a written value
                    continue
                kind = "date" if name == "effective_date" else "text"
                labels.append(Label(name, kind, value.replace("_", " ")))
            docs.append(Doc("kleister-nda", f"kleister-nda/{part}/{cols[0]}", split, text, labels))
    return docs


LOADERS = {
    "invoice2data": load_invoice2data,
    "parsee-invoices": load_parsee,
    "sroie": load_sroie,
    "kleister-nda": load_kleister,
}

# ---- the locator: which line states a value (no gate code) --------------------------------------

_DATE_WORDS = ("date", "datum", "dated", "effective", "as of", "fecha", "data", "le ", "du ", "day of")
_ORDINALS = {"st", "nd", "rd", "th", "er", "e", "day", "of", "de", "del", "di"}
_AMOUNT_WORDS = ("total", "amount", "betrag", "summe", "montant", "totaal", "razem", "net", "tax", "ttc")


def _number_keys(line: str) -> list[str]:
    keys = []
    for m in re.finditer(r"\d[\d.,' \u00a0\u202f]*\d|\d", line):
        raw = m.group()
        keys.append(re.sub(r"\D", "", raw))
        keys += [re.sub(r"\D", "", p) for p in raw.split()]
    return [k.lstrip("0") or "0" for k in keys]


def _amount_keys(value: float) -> set[str]:
    keys = {f"{value:.2f}".replace(".", "").replace("-", "").lstrip("0") or "0"}
    if value == int(value):
        keys.add(str(abs(int(value))))
    return keys


def _word_tokens(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", fold(text))


def _windows(lines: list[str], max_lines: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(len(lines)) for j in range(i, min(len(lines), i + max_lines))]


_TOKENS: dict[int, list[Counter[str]]] = {}


def _line_tokens(text: str, lines: list[str]) -> list[Counter[str]]:
    """The words of each line, read once per document."""
    key = hash(text)
    if key not in _TOKENS:
        _TOKENS.clear()
        _TOKENS[key] = [Counter(_word_tokens(ln)) for ln in lines]
    return _TOKENS[key]


def _word_beside(parts: list[str], k: int) -> bool:
    """A word right before the day (`May 20`) or after it (`20 May`, `20th day of May`)."""
    if k and parts[k - 1].isalpha():
        return True
    j = k + 1
    while j < len(parts) and parts[j].casefold() in _ORDINALS:
        j += 1
    return j < len(parts) and parts[j].isalpha()


def locate(kind: str, value: Any, text: str) -> str | None:
    """The line (or fewest consecutive lines) of `text` that states `value`, or None."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if kind == "amount":
        keys = _amount_keys(value)
        hits = [ln for ln in lines if keys & set(_number_keys(ln))]
        hits.sort(key=lambda ln: (not any(w in ln.casefold() for w in _AMOUNT_WORDS), len(ln)))
        return hits[0] if hits else None
    if kind == "date":
        day = date.fromisoformat(value)
        years = {str(day.year), f"{day.year % 100:02d}"}
        days = {str(day.day), f"{day.day:02d}"}
        months = {str(day.month), f"{day.month:02d}"}
        for span in (1, 2):  # a date broken over two lines (`January` / `22, 2013`)
            hits = []
            for i in range(len(lines) - span + 1):
                ln = "\n".join(lines[i : i + span])
                parts = re.findall(r"\d+|[^\W\d_]+", ln)
                for k, p in enumerate(parts):  # the day, with a year and a month close by
                    near = parts[max(0, k - 5) : k] + parts[k + 1 : k + 6]
                    if p in days and years & set(near) and (months & set(near) or _word_beside(parts, k)):
                        hits.append(ln)
                        break
            hits.sort(key=lambda ln: (not any(w in ln.casefold() for w in _DATE_WORDS), len(ln)))
            if hits:
                return hits[0]
        return None
    want = Counter(_word_tokens(str(value)))  # each word as often as the value has it
    if not want:
        return None
    tokens = _line_tokens(text, lines)
    for span in range(1, 9):  # the fewest lines first
        for i in range(len(lines) - span + 1):
            have = sum(tokens[i : i + span], Counter())
            if not want - have:
                return "\n".join(lines[i : i + span])
    compact = "".join(_word_tokens(str(value)))  # an identifier spaced another way: `FR 604 219 388 61`
    if len(compact) >= 6:
        spaced = re.compile(r"\b" + r"\W*".join(map(re.escape, compact)) + r"\b")
        for ln in lines:
            if spaced.search(fold(ln)):
                return ln
    return None


# ---- negative controls ----------------------------------------------------------------------------


def _changed_digit(text: str) -> str | None:
    digits = [i for i, c in enumerate(text) if c.isdigit()]
    if not digits:
        return None
    i = digits[-1]
    return text[:i] + str((int(text[i]) + 1) % 10) + text[i + 1 :]


def controls(doc: Doc, label: Label, line: str, others: list[Any]) -> list[tuple[str, str, Any, str | None]]:
    """(name, kind, wrong value, evidence) for one correctly located value."""
    out: list[tuple[str, str, Any, str | None]] = []
    kind, value = label.kind, label.value
    other = next((o for o in others if _norm(kind, o) != _norm(kind, value)), None)
    if other is not None and locate(kind, other, line) is None:
        out.append(("other_document", kind, other, line))
    if kind == "amount":
        changed = _changed_digit(f"{value:.2f}")
        if changed is not None:
            out.append(("digit_changed", kind, float(changed), line))
        if value:
            out.append(("decimal_lost_x100", kind, round(value * 100, 2), line))
        if abs(value) >= 1000:
            out.append(("part_of_number", kind, float(int(abs(value)) // 1000), line))
    elif kind == "date":
        day = date.fromisoformat(value)
        out.append(("digit_changed", kind, (day + timedelta(days=1)).isoformat(), line))
        numbers = Counter(re.findall(r"\d+", line))
        for name, part in (("day_as_amount", day.day), ("month_as_amount", day.month)):
            if sum(n for k, n in numbers.items() if int(k) == part) == 1:  # only in the date
                out.append((name, "amount", float(part), line))
        out.append(("date_not_iso", kind, day.strftime("%d.%m.%Y"), line))
    else:
        changed = _changed_digit(str(value))
        if changed is not None:
            out.append(("digit_changed", kind, changed, line))
        runs = re.findall(r"\d{4,}", str(value))
        if runs:
            longest = max(runs, key=len)
            part = longest[: len(longest) // 2]
            if part not in _word_tokens(line):  # else the line states it on its own
                out.append(("part_of_id", kind, part, line))
    wrapper = f'<document id="{doc.doc_id}" type="txt">'
    out.append(("wrapper_id_no_evidence", "text", doc.doc_id, None))
    out.append(("wrapper_tag_as_evidence", "text", doc.doc_id, wrapper + "\n" + line.splitlines()[0]))
    return out


def _norm(kind: str, value: Any) -> Any:
    if kind == "amount":
        return round(float(value), 2)
    return " ".join(_word_tokens(str(value)))


# ---- run and report -------------------------------------------------------------------------------


@dataclass
class Tally:
    right: int = 0
    right_ok: int = 0
    wrong: int = 0
    wrong_refused: int = 0
    label_problems: int = 0
    by_control: Counter[str] = field(default_factory=Counter)
    control_passed: Counter[str] = field(default_factory=Counter)


def run(docs: list[Doc], show: int) -> dict[tuple[str, str], Tally]:
    tallies: dict[tuple[str, str], Tally] = defaultdict(Tally)
    by_field: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for doc in docs:
        for lab in doc.labels:
            if lab.value is not None and not str(lab.value).startswith("?"):
                by_field[(doc.source, lab.field)].append(lab.value)
    rng = random.Random(31)
    misses: list[str] = []
    leaks: list[str] = []
    problems: list[str] = []
    for doc in docs:
        doc.lang = language(doc.text)
        keys = ((doc.source, doc.lang), (doc.source, "*"))
        asks: list[tuple[str, Any, str | None]] = []
        rows: list[tuple[Label, str, list[tuple[str, str, Any, str | None]]]] = []
        for lab in doc.labels:
            line = None
            if lab.value is not None and not str(lab.value).startswith("?"):
                line = locate(lab.kind, lab.value, doc.text)
            if line is None:
                for key in keys:
                    tallies[key].label_problems += 1
                problems.append(f"{doc.doc_id} {lab.field}={lab.value!r}")
                continue
            others = by_field[(doc.source, lab.field)][:]
            rng.shuffle(others)
            checks = controls(doc, lab, line, others)
            rows.append((lab, line, checks))
            asks.append((lab.kind, lab.value, line))
            asks += [(k, v, ev) for _, k, v, ev in checks]
        verdicts = iter(gate_verdicts(asks, doc.text)) if asks else iter(())
        for lab, line, checks in rows:
            ok = next(verdicts)
            if not ok:
                misses.append(f"{doc.doc_id} {lab.field}={lab.value!r} <- {line!r}")
            results = [(name, v, not next(verdicts)) for name, _, v, _ in checks]
            leaks += [f"{doc.doc_id} {lab.field} {n}: {v!r} <- {line!r}" for n, v, r in results if not r]
            for key in keys:
                t = tallies[key]
                t.right += 1
                t.right_ok += ok
                for name, _, refused in results:
                    t.wrong += 1
                    t.wrong_refused += refused
                    t.by_control[name] += 1
                    t.control_passed[name] += not refused
    sections: list[tuple[str, list[Any]]] = [
        ("correct values refused", misses),
        ("wrong values accepted", leaks),
        ("label problems (no line states the label)", problems),
    ]
    for title, rows in sections:
        print(f"\n{title}: {len(rows)}" + ("" if not rows else f" (first {min(show, len(rows))})"))
        for row in rows[:show]:
            print(f"  {row[:220]}")
    return tallies


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpora", nargs="?", default=os.environ.get("GATE_CORPORA", ""))
    ap.add_argument("--split", choices=("dev", "held-out", "all"), default="all")
    ap.add_argument("--show", type=int, default=8, help="examples of each failure kind to print")
    args = ap.parse_args(argv)
    if not args.corpora:
        ap.error("give the corpora folder (or set GATE_CORPORA)")
    root = Path(args.corpora)
    sources = root / "SOURCES.md"
    print(f"corpora: {root.resolve()}")
    if sources.exists():  # the sections of SOURCES.md about the corpora read here
        keep = False
        for line in sources.read_text(encoding="utf-8").splitlines():
            if line.startswith("## "):
                keep = any(line[3:].startswith(f"{name}/") for name in LOADERS)
            if keep:
                print(f"  {line.strip()[:240]}")
    start = time.perf_counter()
    docs: list[Doc] = []
    for name, loader in LOADERS.items():
        if (root / name).is_dir():
            docs += [d for d in loader(root / name) if args.split in ("all", d.split)]
    if not docs:
        print("no corpus found (invoice2data/, sroie/, kleister-nda/)")
        return 1
    loaded = time.perf_counter() - start
    tallies = run(docs, args.show)
    print(
        f"\nsplit {args.split}: {len(docs)} documents, "
        f"{sum(len(d.labels) for d in docs)} labelled values; read in {loaded:.1f} s, "
        f"total {time.perf_counter() - start:.1f} s"
    )
    print(
        f"\n{'source':16} {'lang':4} {'docs?':>5} {'correct':>8} {'accepted':>9} {'wrong':>6} "
        f"{'refused':>8} {'label problems':>15}"
    )
    for (source, lang), t in sorted(tallies.items(), key=lambda kv: (kv[0][0], kv[0][1] != "*", kv[0][1])):
        if not t.right and not t.label_problems:
            continue
        acc = 100 * t.right_ok / t.right if t.right else float("nan")
        ref = 100 * t.wrong_refused / t.wrong if t.wrong else float("nan")
        ndocs = sum(1 for d in docs if d.source == source and (lang == "*" or d.lang == lang))
        print(
            f"{source:16} {lang:4} {ndocs:5} {t.right:8} {acc:8.1f}% {t.wrong:6} {ref:7.1f}% "
            f"{t.label_problems:15}"
        )
    print("\nwrong values accepted, by control (all sources):")
    total: Counter[str] = Counter()
    passed: Counter[str] = Counter()
    for (_, lang), t in tallies.items():
        if lang == "*":
            total += t.by_control
            passed += t.control_passed
    for name in sorted(total):
        print(f"  {name:26} {passed[name]:4} of {total[name]:5}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

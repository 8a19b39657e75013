"""`docmill eval`: per-field coverage and accuracy against labels, overall and per document group,
the mismatches document by document, and a stratified random sample of succeeded documents for
the review queue.

Labels file (JSONL), the format of `examples/make_invoices.py --truth FILE`; other records are ignored:

    {"record": "document", "doc_id": "2026-04/inv-001001.txt", "fields": {"total": 980.96, ...}}

Review decisions are a second label source (`tasks.review.labels_from_decisions`; the file wins for
a document in both). A labelled field is *covered* when its document produced an output with a
non-null value for it (a field labelled null is covered by a null answer), so a run that "succeeds"
with every field empty reads 0 % coverage; it is *correct* when the value equals the label (numbers
within 0.005, strings trimmed). Coverage = covered / labelled, accuracy = correct / covered. Every
labelled field not correct is a mismatch: `wrong` (another value), `null` (an output, the field
null) or `missing` (no output). Groups, so a good overall number cannot hide a bad segment: `format`
(the document type, else the extension), `folder`, and each value's support class (tasks.provenance).
"""

from __future__ import annotations

import csv
import io
import json
import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from checkpoints.review_queue import ReviewQueue
from docmill.errors import InputError
from tasks.provenance import NO_EVIDENCE, SUPPORT_ORDER, field_value, support_of, where_of
from tasks.reporting.csv_safe import safe_cell

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore

GROUPS = ("format", "folder")
MISMATCH_COLUMNS = ("doc_id", "field", "kind", "expected", "got", "state", "page", "format", "folder")
SAMPLE_REASON = "sample"


def load_labels(path: str) -> dict[str, dict[str, Any]]:
    """doc_id -> labelled fields, from a JSONL labels file."""
    labels: dict[str, dict[str, Any]] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot read labels file {path!r}: {e}", hint="give a JSONL file") from e
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise InputError(f"{path}:{n} is not JSON", hint="one JSON object per line") from e
        is_document = rec.get("record", "document") == "document" and isinstance(rec.get("fields"), dict)
        if is_document and rec.get("doc_id"):
            labels[str(rec["doc_id"])] = rec["fields"]
    if not labels:
        raise InputError(
            f"no labelled documents in {path}",
            hint='each line needs {"record": "document", "doc_id": ..., "fields": {...}}',
        )
    return labels


def matches(got: Any, expected: Any) -> bool:
    got = field_value(got)
    if isinstance(expected, bool) or isinstance(got, bool):
        return got == expected
    if isinstance(expected, int | float) and expected is not None:
        try:
            return abs(float(got) - float(expected)) <= 0.005
        except (TypeError, ValueError):
            return False
    if isinstance(expected, str) and isinstance(got, str):
        return got.strip() == expected.strip()
    return bool(got == expected)


def groups_of(doc_id: str, doc_type: str | None) -> dict[str, str]:
    folder = doc_id.rsplit("/", 1)[0] if "/" in doc_id else "."
    name = doc_id.rsplit("/", 1)[-1]
    ext = name.rsplit(".", 1)[-1].lower() if "." in name else "-"
    return {"format": doc_type or ext, "folder": folder}


@dataclass
class Tally:
    correct: int = 0
    covered: int = 0
    total: int = 0
    docs: set[str] = field(default_factory=set)

    def add(self, doc_id: str, ok: bool, covered: bool) -> None:
        self.total += 1
        self.covered += covered
        self.correct += ok
        self.docs.add(doc_id)

    @property
    def accuracy(self) -> float:
        """Correct among the fields the run produced an output for."""
        return self.correct / self.covered if self.covered else 0.0

    @property
    def coverage(self) -> float:
        return self.covered / self.total if self.total else 0.0


def doc_types(store: ObjectStore, run_id: str) -> dict[str, str]:
    """doc_id -> doc type, from the run's inventory chunks."""
    out: dict[str, str] = {}
    for key in store.list(f"runs/{run_id}/inventory/"):
        for d in store.get_json_or_none(key) or []:
            out[d["doc_id"]] = d.get("doc_type")
    return out


def evaluate(
    outcomes: list[dict[str, Any]], labels: dict[str, dict[str, Any]], types: dict[str, str]
) -> dict[str, Any]:
    """{"overall": {field: Tally}, "by_group": {group: {value: {field: Tally}}}, "missing": [...],
    "mismatches": [{doc_id, field, kind, expected, got, state, format, folder}]}"""
    by_doc = {o["doc_id"]: o for o in outcomes}
    overall: dict[str, Tally] = defaultdict(Tally)
    by_group: dict[str, dict[str, dict[str, Tally]]] = {
        g: defaultdict(lambda: defaultdict(Tally)) for g in GROUPS
    }
    by_support: dict[str, Tally] = defaultdict(Tally)  # accuracy per support class (tasks.provenance)
    mismatches: list[dict[str, Any]] = []
    missing = sorted(d for d in labels if d not in by_doc)
    for doc_id, fields in sorted(labels.items()):
        o = by_doc.get(doc_id)
        if o is None:
            continue
        answered = o.get("state") != "failed" and bool(o.get("output"))
        output = (o.get("output") or {}) if answered else {}
        g = groups_of(doc_id, types.get(doc_id))
        for name, expected in fields.items():
            covered = answered and (field_value(output.get(name)) is not None or expected is None)
            ok = covered and matches(output.get(name), expected)
            for tally in (overall[name], overall["*all fields*"]):
                tally.add(doc_id, ok, covered)
            by_support[support_of(o, name)].add(doc_id, ok, covered)
            for group in GROUPS:
                by_group[group][g[group]][name].add(doc_id, ok, covered)
                by_group[group][g[group]]["*all fields*"].add(doc_id, ok, covered)
            if not ok:
                mismatches.append(
                    {
                        "doc_id": doc_id,
                        "field": name,
                        "kind": "wrong" if covered else "null" if answered else "missing",
                        "expected": expected,
                        "got": field_value(output.get(name)),
                        "state": o.get("state"),
                        "page": where_of(o, name).get("page"),  # so a mismatch can be looked up
                        **g,
                    }
                )
    return {
        "overall": dict(overall),
        "by_group": by_group,
        "by_support": dict(by_support),
        "missing": missing,
        "mismatches": mismatches,
    }


def _line(name: str, t: Tally, docs: bool = False) -> str:
    extra = f", {len(t.docs)} docs" if docs else ""
    return (
        f"  {name:<22} accuracy {t.accuracy:7.1%} ({t.correct}/{t.covered})  "
        f"coverage {t.coverage:7.1%} ({t.covered}/{t.total}{extra})"
    )


def eval_lines(result: dict[str, Any], *, show_mismatches: int = 20) -> list[str]:
    overall: dict[str, Tally] = result["overall"]
    lines = ["per-field accuracy (correct / covered) and coverage (covered / labelled), overall:"]
    for name, t in sorted(overall.items()):
        lines.append(_line(name, t))
    for group in GROUPS:
        segments = result["by_group"][group]
        lines.append(f"by {group}:")
        for seg, fields in sorted(segments.items()):
            scored = sorted((t.accuracy, n) for n, t in fields.items() if n != "*all fields*" and t.covered)
            low = ", ".join(f"{n} {a:.0%}" for a, n in scored[:2] if a < 1.0)
            lines.append(_line(seg, fields["*all fields*"], docs=True) + (f"  lowest: {low}" if low else ""))
    lines.append("by support (how each value's evidence was checked; tasks.provenance):")
    for cls in (*SUPPORT_ORDER, NO_EVIDENCE):
        if cls in result.get("by_support", {}):
            lines.append(_line(cls, result["by_support"][cls], docs=True))
    mm = result["mismatches"]
    lines.append(
        f"mismatches: {len(mm)}" + (f" (first {show_mismatches})" if len(mm) > show_mismatches else "")
    )
    for m in mm[:show_mismatches]:
        lines.append(
            f"  {m['doc_id']}  {m['field']}: {m['kind']}, expected {m['expected']!r}, got {m['got']!r}"
            + (f" (p. {m['page']})" if m.get("page") is not None else "")
        )
    if result["missing"]:
        lines.append(
            f"labelled documents not in this run: {len(result['missing'])} (e.g. {result['missing'][0]})"
        )
    return lines


def mismatches_csv(result: dict[str, Any]) -> bytes:
    """The mismatches as CSV (one row per document and field; formula-like cells escaped)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(MISMATCH_COLUMNS))
    writer.writeheader()
    for m in result["mismatches"]:
        writer.writerow(
            {k: safe_cell(json.dumps(v) if isinstance(v, dict | list) else v) for k, v in m.items()}
        )
    return buf.getvalue().encode()


def stratified_sample(
    outcomes: list[dict[str, Any]],
    types: dict[str, str],
    n: int,
    *,
    seed: int = 0,
    exclude: set[str] | frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """`n` succeeded documents drawn at random, spread over (format, folder) strata in proportion to
    their size, every stratum getting at least one while `n` allows. Documents in `exclude`
    (already in the review queue) are not drawn."""
    strata: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for o in sorted(outcomes, key=lambda o: o["doc_id"]):
        if o.get("state") == "succeeded" and o["doc_id"] not in exclude:
            g = groups_of(o["doc_id"], types.get(o["doc_id"]))
            strata[(g["format"], g["folder"])].append(o)
    rng = random.Random(seed)
    total = sum(len(v) for v in strata.values())
    n = min(n, total)
    if n <= 0:
        return []
    keys = sorted(strata, key=lambda k: -len(strata[k]))
    quota = {k: int(i < n) for i, k in enumerate(keys)}  # one each while n allows
    left = n - sum(quota.values())
    while left > 0:  # largest remaining share first
        k = max(keys, key=lambda k: (len(strata[k]) / total * n - quota[k], len(strata[k]) - quota[k]))
        if quota[k] >= len(strata[k]):
            break
        quota[k] += 1
        left -= 1
    picked: list[dict[str, Any]] = []
    for k in keys:
        picked += rng.sample(strata[k], quota[k])
    return picked


def queue_sample(store: ObjectStore, run_id: str, picked: list[dict[str, Any]], types: dict[str, str]) -> int:
    """Add sampled documents to the review queue (reason "sample"); an existing item is kept."""
    queue = ReviewQueue(store, run_id)
    added = 0
    for o in picked:
        if queue.get(o["doc_id"]) is not None:
            continue
        g = groups_of(o["doc_id"], types.get(o["doc_id"]))
        queue.add(
            {
                "doc_id": o["doc_id"],
                "run_id": run_id,
                "pass_name": o.get("pass_name", "file"),
                "reason": SAMPLE_REASON,
                "errors": [
                    f"random spot check of a succeeded document (stratum format={g['format']}, folder={g['folder']})"
                ],
                "raw_output": o.get("raw_output"),
                "output": o.get("output"),
                "model": o.get("model"),
                "attempts": o.get("attempts", 0),
                "tried": [],
            }
        )
        added += 1
    return added

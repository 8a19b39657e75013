"""The example inputs: the invoice generator (determinism, ground truth) and the code base."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from docmill.settings import Settings
from tasks.recipes import load_recipe
from tasks.source.inventory import inventory, load_text
from tasks.source.readers import extract_text

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_invoices", ROOT / "examples/make_invoices.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_invoices"] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def run(gen: ModuleType, out: Path, *args: str) -> list[dict[str, Any]]:
    assert gen.main(["--out", str(out), *args]) == 0
    truth = out.parent / (out.name + ".truth.jsonl")
    return [json.loads(line) for line in truth.read_text().splitlines()]


def files_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_deterministic_per_seed(gen: ModuleType, tmp_path: Path) -> None:
    a = run(gen, tmp_path / "a", "--count", "60", "--seed", "3")
    b = run(gen, tmp_path / "b", "--count", "60", "--seed", "3")
    run(gen, tmp_path / "c", "--count", "60", "--seed", "4")
    assert files_of(tmp_path / "a") == files_of(tmp_path / "b")
    assert a == b
    assert files_of(tmp_path / "a") != files_of(tmp_path / "c")
    assert len(files_of(tmp_path / "a")) == 60


def money(x: float) -> str:
    cents = round(x * 100)
    return f"{cents // 100:,}.{cents % 100:02d}"


def test_ground_truth_matches_the_files(gen: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "inv"
    truth = run(gen, out, "--count", "40", "--seed", "7")
    header = truth[0]
    assert header["record"] == "corpus" and header["count"] == 40 and header["broken"] == 4
    docs = {r["doc_id"]: r for r in truth if r["record"] == "document"}
    assert set(docs) == set(files_of(out))
    for doc_id, rec in docs.items():
        data = (out / doc_id).read_bytes()
        assert hashlib.sha256(data).hexdigest() == rec["sha256"] and len(data) == rec["size"]
        if rec["fields"] is None:
            continue
        f = rec["fields"]
        text = extract_text(rec["format"], data)
        if rec["format"] == "json":
            obj = json.loads(data)
            assert (obj["invoice_number"], obj["vendor"], obj["total"]) == (
                f["invoice_number"],
                f["vendor_name"],
                f["total"],
            )
        else:
            for needle in (
                f["invoice_number"],
                f["vendor_name"],
                f["invoice_date"],
                f["due_date"],
                money(f["total"]),
            ):
                assert needle in text, (doc_id, needle)
            for item in rec["line_items"]:
                assert f"{item['description']} | {item['quantity']} x {money(item['unit_price'])}" in text
        if "conflict_with" not in rec:
            subtotal = sum(i["amount"] for i in rec["line_items"])
            assert round(subtotal, 2) == f["subtotal"] and round(f["subtotal"] + f["tax"], 2) == f["total"]
    assert sum(1 for r in docs.values() if r.get("injection")) == 1


def test_planted_duplicates_and_conflicts(gen: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "inv"
    truth = run(gen, out, "--count", "40", "--seed", "7")
    docs = {r["doc_id"]: r for r in truth if r["record"] == "document"}
    dups = [r for r in truth if r["record"] == "duplicate"]
    conflicts = [r for r in truth if r["record"] == "conflict"]
    assert len(dups) == 2 and len(conflicts) == 2
    for d in dups:
        assert (out / d["doc_id"]).read_bytes() == (out / d["duplicate_of"]).read_bytes()
        assert docs[d["doc_id"]]["expected_skip_reason"] == "duplicate"
    for c in conflicts:
        first, second = c["values"]
        assert first["value"] != second["value"]
        for v in c["values"]:
            rec = docs[v["doc_id"]]
            assert rec["expected_status"] == "ok"
            assert rec["fields"]["invoice_number"] == c["invoice_number"]
            assert rec["fields"]["vendor_name"] == c["vendor_name"]
            assert rec["fields"]["total"] == v["value"]
    reasons = sorted(r["expected_skip_reason"] for r in docs.values() if r["expected_skip_reason"])
    assert reasons == ["binary", "duplicate", "duplicate", "empty", "unsupported_type"]
    assert docs["misc/legacy-latin1.txt"]["expected_encoding"] == "cp1252"  # read, marked as guessed


def test_counts_formats_and_reruns(gen: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "inv"
    truth = run(gen, out, "--count", "7", "--seed", "1", "--formats", "json")
    assert len(files_of(out)) == 7 and all(r["format"] == "json" for r in truth[1:])
    assert all(r["expected_status"] == "ok" for r in truth[1:])
    truth = run(gen, out, "--count", "1003", "--seed", "1", "--formats", "txt,csv")  # replaces its own corpus
    assert len(files_of(out)) == 1003
    assert truth[0]["duplicates"] == 3 and truth[0]["conflicts"] == 3


def test_refuses_foreign_folders_and_truth_inside(gen: ModuleType, tmp_path: Path) -> None:
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("precious")
    with pytest.raises(SystemExit):
        gen.main(["--out", str(foreign), "--count", "12"])
    assert (foreign / "keep.txt").read_text() == "precious"
    with pytest.raises(SystemExit):
        gen.main(["--out", str(tmp_path / "x"), "--truth", str(tmp_path / "x" / "t.jsonl")])
    with pytest.raises(SystemExit):
        gen.main(["--out", str(tmp_path / "y"), "--formats", "pdf"])


CODEBASE = ROOT / "examples/codebase"
PLANTED = [  # (file, line, text on that line), as listed in examples/README.md
    ("web.py", 14, 'customer_id = params.get("customer", [""])[0]'),
    ("web.py", 15, "page = int("),
    ("db.py", 14, "conn = connect()"),
    ("db.py", 17, "f\"WHERE customer_id = '{customer_id}' \""),
    ("reports.py", 15, "# TODO"),
    ("reports.py", 16, "customer[1]"),
    ("notify.py", 21, "except:"),
    ("config.py", 8, 'SMTP_PASSWORD = "hunter2-prod"'),
]


def test_codebase_has_its_planted_issues_where_the_readme_says() -> None:
    readme = (ROOT / "examples/README.md").read_text()
    for file, line, text in PLANTED:
        assert text in (CODEBASE / file).read_text().splitlines()[line - 1], (file, line)
        assert f"{file}:{line}" in readme or file in readme
    for path in CODEBASE.glob("*.py"):
        compile(path.read_text(), str(path), "exec")
    # the flow crosses files: web -> reports -> db
    assert "from reports import customer_report" in (CODEBASE / "web.py").read_text()
    assert "from db import fetch_customer, fetch_orders" in (CODEBASE / "reports.py").read_text()


def test_codebase_inventory_for_code_review() -> None:
    recipe = load_recipe("code-review")
    docs = list(inventory(str(CODEBASE), Settings(), doc_types=recipe.doc_types))
    ok = [d for d in docs if d.status == "ok"]
    assert [d.doc_id for d in ok] == ["config.py", "db.py", "notify.py", "reports.py", "web.py"]
    assert "except:" in load_text(next(d for d in ok if d.doc_id == "notify.py"))

"""Exports carry a long document's chunk and offset provenance (JSONL, CSV, Parquet)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pyarrow.parquet as pq
import pytest

from tasks.evaluate import MISMATCH_COLUMNS, mismatches_csv
from tasks.reporting.exports import export_rows, to_csv, to_jsonl, to_parquet

PROVENANCE = {
    "chunks": [{"index": 0, "start": 0, "end": 900}, {"index": 1, "start": 900, "end": 1500}],
    "fields": {"total": {"chunk": 1, "start": 1210, "end": 1228}},
}


def outcomes() -> list[dict[str, Any]]:
    total = {"value": 12.5, "evidence": "Total: 12.50 EUR"}
    return [
        {"doc_id": "long.txt", "state": "succeeded", "output": {"total": total}, "provenance": PROVENANCE},
        {"doc_id": "short.txt", "state": "succeeded", "output": {"total": total}},
    ]


def test_jsonl_csv_and_parquet_carry_chunk_offsets() -> None:
    lines = [json.loads(x) for x in to_jsonl(outcomes()).decode().splitlines()]
    assert lines[0]["provenance"] == PROVENANCE and "provenance" not in lines[1]
    rows = export_rows(outcomes())
    table = list(csv.DictReader(io.StringIO(to_csv(rows).decode())))
    assert json.loads(table[0]["provenance"])["fields"]["total"] == {"chunk": 1, "start": 1210, "end": 1228}
    assert table[1]["provenance"] == ""
    parquet = to_parquet(rows)
    if parquet is None:
        pytest.fail("pyarrow is a dev dependency: Parquet must be written")
    col = pq.read_table(io.BytesIO(parquet)).column("provenance").to_pylist()
    assert json.loads(col[0]) == PROVENANCE and col[1] is None


HOSTILE = ['=HYPERLINK("http://x","y")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\tx", "\rx"]


def test_csv_cells_never_run_as_formulas_and_jsonl_parquet_keep_values() -> None:
    outs = [
        {"doc_id": "=evil.txt", "state": "succeeded", "output": {"vendor": {"value": v, "evidence": v}}}
        for v in HOSTILE
    ] + [{"doc_id": "n.txt", "state": "succeeded", "output": {"total": -12.5, "ref": "-7", "neg": "-1e-05"}}]
    rows = export_rows(outs)
    table = list(csv.reader(io.StringIO(to_csv(rows).decode(), newline="")))
    header, body = table[0], table[1:]
    col = {c: i for i, c in enumerate(header)}
    for row, v in zip(body, HOSTILE, strict=False):
        assert row[col["doc_id"]] == "'=evil.txt"
        assert row[col["value.vendor"]] == "'" + v and row[col["value.vendor.evidence"]] == "'" + v
    last = body[-1]
    assert (last[col["value.total"]], last[col["value.ref"]], last[col["value.neg"]]) == (
        "-12.5",
        "-7",
        "-1e-05",
    )
    jsonl = [json.loads(x) for x in to_jsonl(outs).decode().splitlines()]
    assert [j["values"]["vendor"] for j in jsonl[:-1]] == HOSTILE and jsonl[0]["doc_id"] == "=evil.txt"
    parquet = to_parquet(rows)
    assert parquet is not None
    assert pq.read_table(io.BytesIO(parquet)).column("value.vendor").to_pylist()[: len(HOSTILE)] == HOSTILE


def test_attachments_name_their_message_in_every_export() -> None:
    outs = [
        {"doc_id": "in/m.eml", "state": "succeeded", "output": {}},
        {"doc_id": "in/m.eml/1-invoice.pdf", "state": "succeeded", "output": {}},
        {"doc_id": "in/m.eml/2-fwd.eml/1-x.pdf", "state": "skipped", "reason": "corrupt"},
        {"doc_id": "in/1-a.pdf", "state": "succeeded", "output": {}},
    ]
    want = [None, "in/m.eml", "in/m.eml/2-fwd.eml", None]
    assert [j["parent"] for j in map(json.loads, to_jsonl(outs).decode().splitlines())] == want
    table = list(csv.DictReader(io.StringIO(to_csv(export_rows(outs)).decode())))
    assert [r["parent"] or None for r in table] == want
    parquet = to_parquet(export_rows(outs))
    assert parquet is not None
    assert pq.read_table(io.BytesIO(parquet)).column("parent").to_pylist() == want


def test_eval_mismatches_csv_escapes_formulas_too() -> None:
    m = dict.fromkeys(MISMATCH_COLUMNS, None) | {"doc_id": "@x.pdf", "expected": "=1+1", "got": -3.5}
    row = next(csv.DictReader(io.StringIO(mismatches_csv({"mismatches": [m]}).decode())))
    assert (row["doc_id"], row["expected"], row["got"], row["page"]) == ("'@x.pdf", "'=1+1", "-3.5", "")

"""Exports carry a long document's chunk and offset provenance (JSONL, CSV, Parquet)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pyarrow.parquet as pq
import pytest

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

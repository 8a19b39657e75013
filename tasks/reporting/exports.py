"""Per-document exports: flattened rows, JSONL, CSV and (with pyarrow) Parquet.

An e-mail attachment's row names its message (`parent`, the message's doc id; empty for a file),
read from the attachment's id (tasks.source.doc_names.parent_of). CSV cells a spreadsheet would run as a
formula get a `'` in front (tasks.reporting.csv_safe); JSONL and Parquet keep every value as it is.

A document with a review decision in force (tasks.review.apply_decisions) exports the corrected
values as its values, the model's values of corrected fields beside them (`original.<field>` in
CSV/Parquet, `original_output` in JSONL) and the decision (`review.*` columns, `review` in JSONL).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from typing import Any

from tasks.integration.records import compact_value
from tasks.provenance import supports
from tasks.reporting.csv_safe import safe_cell
from tasks.reporting.results import evidence_places
from tasks.source.doc_names import parent_of


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested output -> flat columns (`total`, `line_items.0.amount`); `{value, evidence}` splits in two."""
    flat: dict[str, Any] = {}
    if isinstance(value, dict):
        if "value" in value and set(value) <= {"value", "evidence", "confidence", "quote"}:
            flat[prefix] = value.get("value")
            if value.get("evidence") is not None:
                flat[f"{prefix}.evidence"] = value["evidence"]
            return flat
        for k, v in value.items():
            flat.update(flatten(v, f"{prefix}.{k}" if prefix else k))
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        flat[prefix] = json.dumps(value, ensure_ascii=False)
    elif isinstance(value, list):
        flat[prefix] = "; ".join(map(str, value))
    else:
        flat[prefix] = value
    return flat


def page_columns(o: dict[str, Any]) -> dict[str, Any]:
    """`value.<field>.page` (and `.verified` false for evidence no code could check: a scanned page;
    `.bbox`, the evidence's box on a PDF page with a text layer) for every top-level field whose
    evidence names a page."""
    cols: dict[str, Any] = {}
    for name, where in evidence_places(o):
        if where.get("page") is None or "[" in name or "." in name:
            continue  # list items: in the provenance column
        cols[f"value.{name}.page"] = where["page"]
        if where.get("bbox"):  # its evidence's box on that page (left, top, right, bottom; shares)
            cols[f"value.{name}.bbox"] = json.dumps(where["bbox"])
        if where.get("verified") is False:
            cols[f"value.{name}.verified"] = False
    return cols


def export_rows(outcomes: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for o in outcomes:
        row = {
            "doc_id": o["doc_id"],
            "parent": parent_of(o["doc_id"]),
            "state": o["state"],
            "reason": o.get("reason") or o.get("failure_type"),
            "model": o.get("model"),
            "attempts": o.get("attempts", 0),
            "cost_usd": round(float(o.get("cost_usd") or 0.0), 6),
        }
        row.update({f"value.{k}": v for k, v in flatten(o.get("output") or {}).items()})
        row.update(page_columns(o))
        row.update({f"value.{k}.support": c for k, c in supports(o).items()})
        if mark := o.get("review"):  # the decision, and the model's value of each corrected field
            row.update({f"review.{k}": mark.get(k) for k in ("action", "by", "at", "note")})
            row.update({f"original.{k}": c.get("from") for k, c in (mark.get("corrections") or {}).items()})
        if o.get("provenance"):  # each value's offsets and page; long documents: their chunks
            row["provenance"] = json.dumps(o["provenance"], ensure_ascii=False, sort_keys=True)
        rows.append(row)
    return rows


def to_jsonl(outcomes: Iterable[dict[str, Any]]) -> bytes:
    lines = [
        json.dumps(
            {
                "doc_id": o["doc_id"],
                "parent": parent_of(o["doc_id"]),
                "state": o["state"],
                "reason": o.get("reason"),
                "failure_type": o.get("failure_type"),
                "model": o.get("model"),
                "values": compact_value(o.get("output")),
                "output": o.get("output"),
                "flags": o.get("flags") or [],
                "support": supports(o),
                "cost_usd": o.get("cost_usd") or 0.0,
                "review": o.get("review"),
                "original_output": o.get("original_output"),
                **({"provenance": o["provenance"]} if o.get("provenance") else {}),
            },
            ensure_ascii=False,
            sort_keys=True,
        )
        for o in outcomes
    ]
    return ("\n".join(lines) + ("\n" if lines else "")).encode()


def columns_of(rows: list[dict[str, Any]]) -> list[str]:
    """Every column of `rows`, in first-seen order (one pass: a dict keeps the order)."""
    return list(dict.fromkeys(c for r in rows for c in r))


def to_csv(rows: list[dict[str, Any]]) -> bytes:
    columns = columns_of(rows)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow([safe_cell(c) for c in columns])
    for r in rows:
        writer.writerow([safe_cell(r.get(c)) for c in columns])
    return buf.getvalue().encode()


def to_parquet(rows: list[dict[str, Any]]) -> bytes | None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return None
    columns = columns_of(rows)
    table = pa.table({c: [None if (v := r.get(c)) is None else str(v) for r in rows] for c in columns})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()

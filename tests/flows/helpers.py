"""Helpers for end-to-end tests: an example corpus with ground truth, and settings that point
docmill at the test emulator and a given store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from docmill.settings import ApiSettings, Settings

ROOT = Path(__file__).resolve().parents[2]


def make_corpus(tmp: Path, count: int = 30, seed: int = 3) -> tuple[Path, list[dict[str, Any]]]:
    out = tmp / "corpus"
    truth = tmp / "truth.jsonl"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples/make_invoices.py"),
            "--out",
            str(out),
            "--count",
            str(count),
            "--seed",
            str(seed),
            "--truth",
            str(truth),
        ],
        check=True,
        capture_output=True,
    )
    return out, [json.loads(line) for line in truth.read_text().splitlines() if line.strip()]


def settings_for(emulator: Any, store: str, **api: Any) -> Settings:
    return Settings(store=store, api=ApiSettings(base_url=emulator.base_url, **api))


def outcomes_of(store: Any, run_id: str) -> dict[str, dict[str, Any]]:
    from checkpoints.outcomes import OutcomeLog

    return {o["doc_id"]: o for o in OutcomeLog(store, run_id).all()}


def value(field: Any) -> Any:
    return field.get("value") if isinstance(field, dict) else field


def plant(
    corpus: Path, truth: list[dict[str, Any]], marker: str, skip: frozenset[str] | set[str] = frozenset()
) -> str:
    """Append a marker line to one plain-text invoice that is neither a duplicate nor part of a planted
    conflict (so faults aimed at the marker touch exactly one document); return its doc id."""
    busy = {t.get("duplicate_of") for t in truth} | {
        v["doc_id"] for t in truth if t["record"] == "conflict" for v in t["values"]
    }
    for t in truth:
        if (
            t["record"] == "document"
            and t["expected_status"] == "ok"
            and t["doc_id"].endswith((".txt", ".md"))
            and not t.get("duplicate_of")
            and t["doc_id"] not in busy | set(skip)
        ):
            path = corpus / t["doc_id"]
            path.write_text(path.read_text() + f"\nNote: {marker}\n")
            return str(t["doc_id"])
    raise AssertionError("no plain-text invoice to plant a marker in")

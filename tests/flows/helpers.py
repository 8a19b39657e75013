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

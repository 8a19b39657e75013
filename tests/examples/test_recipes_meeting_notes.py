"""The worked example of docs/recipes.md: the command in the guide, run offline against the emulator,
gives every document non-empty lists whose declared evidence occurs verbatim in the document."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from docmill.settings import get_settings
from tasks.per_file.gate import normalize_ws

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "recipes.md"
NOTES = ROOT / "examples" / "recipes" / "meeting_notes"


def guide_command() -> list[str]:
    """The one `docmill run` line of the guide, as argv (without the program name)."""
    (line,) = [x for x in re.findall(r"^docmill run .*$", GUIDE.read_text(), re.M)]
    return shlex.split(line)[1:]


def test_the_guide_is_linked_from_the_readme() -> None:
    assert "docs/recipes.md" in (ROOT / "README.md").read_text()


def test_worked_example_runs_offline_with_non_empty_evidence_checked_lists(
    emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from flows.cli.main import main

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("DOCMILL_API__BASE_URL", emulator.base_url)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    get_settings.cache_clear()
    argv = guide_command()
    store = tmp_path / "store"
    argv[argv.index("--store") + 1] = str(store)  # the guide's ./docmill-store, moved to a temp dir
    try:
        assert main([*argv, "--no-prefect"]) == 0, capsys.readouterr().err
    finally:
        get_settings.cache_clear()
    (results,) = store.glob("runs/*/exports/results.jsonl")
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert sorted(r["doc_id"] for r in rows) == sorted(p.name for p in NOTES.iterdir())
    for row in rows:
        assert row["state"] == "succeeded", row
        out = row["output"]
        assert out["action_items"] and out["recommendations"], row
        text = normalize_ws((NOTES / row["doc_id"]).read_text())
        for item in out["action_items"] + out["recommendations"]:
            assert item["source_text"] and normalize_ws(item["source_text"]) in text, item

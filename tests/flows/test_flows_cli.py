"""The command line: exit codes, one-line errors, the summary paragraph, status and review."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from docmill.settings import get_settings
from flows.cli import main
from tests.flows.helpers import make_corpus


@pytest.fixture
def offline_env(monkeypatch: pytest.MonkeyPatch, emulator: Any, tmp_path: Path) -> str:
    store = str(tmp_path / "store")
    monkeypatch.setenv("DOCMILL_API__BASE_URL", emulator.base_url)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("DOCMILL_RAISE_ERRORS", raising=False)
    get_settings.cache_clear()
    yield store
    get_settings.cache_clear()


def test_run_prints_summary_and_status_reads_it(
    offline_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, truth = make_corpus(tmp_path, count=12, seed=9)
    assert main(["--store", offline_env, "run", str(corpus), "--no-prefect"]) == 0
    out = capsys.readouterr().out
    n = len([t for t in truth if t["record"] == "document"])
    assert f"of {n} documents" in out and "report:" in out
    assert main(["--store", offline_env, "status"]) == 0
    assert "done" in capsys.readouterr().out
    assert main(["--store", offline_env, "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["phase"] == "done" and status["counts"]["documents"] == n
    assert main(["--store", offline_env, "runs"]) == 0
    assert status["run_id"] in capsys.readouterr().out


def test_bad_source_is_one_line_exit_2(offline_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--store", offline_env, "run", "/no/such/folder", "--no-prefect"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not exist" in err[0] and "Traceback" not in err[0]


def test_unknown_recipe_is_one_line_exit_2(
    offline_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "d").mkdir()
    assert main(["--store", offline_env, "run", str(tmp_path / "d"), "--recipe", "nope", "--no-prefect"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope" in err[0]


def test_api_key_never_printed(
    offline_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "sk-ant-api03-THIS-IS-A-SECRET-KEY-1234567890"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    get_settings.cache_clear()
    corpus, _ = make_corpus(tmp_path, count=6, seed=1)
    # The key sends docmill to DOCMILL_API__BASE_URL (the emulator) with a key it accepts.
    assert main(["--store", offline_env, "run", str(corpus), "--no-prefect"]) == 0
    captured = capsys.readouterr()
    assert secret not in captured.out + captured.err
    for path in Path(offline_env).rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_emulator_subcommand_takes_its_own_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["emulator", "--port", "0", "--help"])
    assert e.value.code == 0
    assert "--latency-ms" in capsys.readouterr().out


def test_invalid_setting_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCMILL_API__CONCURRENCY", "lots")
    get_settings.cache_clear()
    try:
        assert main(["runs"]) == 2
    finally:
        get_settings.cache_clear()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "DOCMILL_API__CONCURRENCY" in err[0]

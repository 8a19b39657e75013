"""Structured logs: one JSON line per API call with the run's context, and never an API key,
even when the API's errors echo request data back (injected 400 and 401)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from docmill.settings import get_settings
from flows.cli.main import main
from tests.flows.helpers import make_corpus, plant

SECRET = "sk-ant-api03-RECOGNISABLE-FAKE-KEY-0123456789abcdef"


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_logs_carry_call_context_and_no_api_key(
    fmt: str,
    tmp_path: Path,
    emulator: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setenv("DOCMILL_API__BASE_URL", emulator.base_url)
    monkeypatch.setenv("DOCMILL_LOG_FORMAT", fmt)
    monkeypatch.setenv("DOCMILL_LOG_LEVEL", "INFO")
    monkeypatch.delenv("DOCMILL_RAISE_ERRORS", raising=False)
    get_settings.cache_clear()
    corpus, truth = make_corpus(tmp_path, count=20, seed=9)
    bad = plant(corpus, truth, "PLANTED-400", set())
    denied = plant(corpus, truth, "PLANTED-401", {bad})
    echo = f"request had x-api-key: {SECRET} and Authorization: Bearer {SECRET}; key={SECRET}"
    emulator.state.faults.add(kind="invalid_request", marker="PLANTED-400", message=f"bad request ({echo})")
    emulator.state.faults.add(
        kind="invalid_request", marker="PLANTED-401", status=401, message=f"denied ({echo})"
    )
    store = str(tmp_path / "store")

    # 3: the 401 document is left failed-retryable (not ledger-final; a resume after the fix sends it)
    assert main(["--store", store, "run", str(corpus), "--no-prefect", "--run-id", "logged"]) == 3
    captured = capsys.readouterr()
    get_settings.cache_clear()
    assert emulator.state.accounting.errors_by_status[400] == 1
    assert emulator.state.accounting.errors_by_status[401] == 1
    assert SECRET not in captured.out + captured.err
    assert SECRET[10:40] not in captured.out + captured.err  # not even a fragment
    for path in Path(store).rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path

    if fmt == "text":
        assert "file call answered" in captured.err and "[logged]" in captured.err
        return
    lines = [json.loads(line) for line in captured.err.splitlines() if line.startswith("{")]
    answered = [r for r in lines if r["msg"].startswith("file call answered")]
    billed = [b for b in emulator.state.accounting.billed if b.path == "/v1/messages"]
    assert len(answered) == len([b for b in billed if b.usage.get("output_tokens")]) - 1  # - integration
    integration = [r for r in lines if r["msg"].startswith("integration call answered")]
    assert len(integration) == 1 and integration[0]["request_id"].startswith("req_")
    for r in answered:
        assert r["run_id"] == "logged" and r["doc_id"] and r["request_id"].startswith("req_")
        assert r["model"] and r["prompt_version"].startswith("1/") and r["stop_reason"] == "end_turn"
        assert r["usage"]["output_tokens"] > 0 and r["latency_ms"] >= 0 and r["cost_usd"] > 0
    failed = {r["doc_id"]: r for r in lines if r["msg"].startswith("file call failed")}
    assert failed[bad]["status"] == 400 and failed[denied]["status"] == 401
    assert failed[bad]["request_id"] and failed[bad]["run_id"] == "logged"
    assert "***" in failed[bad]["msg"]  # the echoed key was masked, not dropped silently

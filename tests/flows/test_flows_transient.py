"""Invariant 12 through the command line: transient failures stay retryable, a run left with them
does not exit 0, and `resume` after the outage leaves none (real SDK -> real emulator, real store)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checkpoints.outcomes import OutcomeLog
from checkpoints.store import open_store
from docmill.settings import get_settings
from flows.cli.main import main
from tests.flows.helpers import make_corpus


@pytest.fixture
def offline_env(monkeypatch: pytest.MonkeyPatch, emulator: Any, tmp_path: Path) -> str:
    store = str(tmp_path / "store")
    monkeypatch.setenv("DOCMILL_API__BASE_URL", emulator.base_url)
    monkeypatch.setenv("DOCMILL_API__BACKOFF_MAX_SECONDS", "0")
    monkeypatch.setenv("DOCMILL_API__MAX_ATTEMPTS", "2")
    monkeypatch.setenv("DOCMILL_CHUNK_SIZE", "4")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("DOCMILL_RAISE_ERRORS", raising=False)
    get_settings.cache_clear()
    yield store
    get_settings.cache_clear()


def _outcomes(store: str, run_id: str) -> dict[str, dict[str, Any]]:
    return {o["doc_id"]: o for o in OutcomeLog(open_store(store), run_id).all()}


def test_outage_then_resume_leaves_no_retryable_failures(
    offline_env: str, emulator: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, _ = make_corpus(tmp_path, count=12, seed=9)
    emulator.state.faults.add(kind="server_error", path="/v1/messages")  # a total outage
    code = main(["--store", offline_env, "run", str(corpus), "--no-prefect", "--run-id", "outage-1"])
    err = capsys.readouterr().err
    assert code == 3, err  # not a finished run
    assert "docmill resume outage-1" in err and "transient" in err
    first = _outcomes(offline_env, "outage-1")
    failed = [
        o for o in first.values() if o["state"] == "failed" and o["failure_type"] == "transport_exhausted"
    ]
    assert failed and all(o["retryable"] for o in failed)
    assert "(retryable)" in (Path(offline_env) / "runs/outage-1/report.md").read_text()
    assert emulator.state.accounting.billed == []

    emulator.state.faults.clear()  # the outage ends
    assert main(["--store", offline_env, "resume", "outage-1", "--no-prefect"]) == 0
    after = _outcomes(offline_env, "outage-1")
    assert not [o for o in after.values() if o.get("retryable")]
    assert all(after[d]["state"] != "failed" for d in (o["doc_id"] for o in failed))
    billed = [r.custom_id or r.request_id for r in emulator.state.accounting.billed]
    assert len(billed) >= len(failed)


def test_a_final_failure_is_not_retried(offline_env: str, emulator: Any, tmp_path: Path) -> None:
    corpus, _ = make_corpus(tmp_path, count=6, seed=1)
    emulator.state.faults.add(kind="invalid_request", path="/v1/messages")  # 400: the request itself
    assert main(["--store", offline_env, "run", str(corpus), "--no-prefect", "--run-id", "bad-1"]) == 0
    outs = _outcomes(offline_env, "bad-1")
    assert all(not o.get("retryable") for o in outs.values())
    received = emulator.state.accounting.received_by_path["/v1/messages"]
    emulator.state.faults.clear()
    assert main(["--store", offline_env, "resume", "bad-1", "--no-prefect"]) == 0
    assert emulator.state.accounting.received_by_path["/v1/messages"] == received  # ledger-final

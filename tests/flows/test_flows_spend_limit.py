"""A spend-limit 429 stops the run with one clear line and exit 3; nothing becomes `failed`, and a
resume after the limit is raised finishes the run (real SDK against the emulator)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checkpoints.manifest import ManifestStore, Phase
from checkpoints.store import open_store
from tests.fixtures.emulator import fast_batches
from tests.flows.helpers import make_corpus, outcomes_of


@pytest.mark.parametrize("mode", ["realtime", "batch"])
def test_spend_limit_stops_with_exit_3_and_resume_finishes(
    tmp_path: Path,
    emulator: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    mode: str,
) -> None:
    from docmill.settings import get_settings
    from flows.cli.main import main

    monkeypatch.setenv("DOCMILL_API__BASE_URL", emulator.base_url)
    monkeypatch.setenv("DOCMILL_BATCH__POLL_SECONDS", "0.02")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("DOCMILL_RAISE_ERRORS", raising=False)
    get_settings.cache_clear()
    store = str(tmp_path / "store")
    corpus, _ = make_corpus(tmp_path, count=6, seed=4)
    path = "/v1/messages/batches" if mode == "batch" else "/v1/messages"
    if mode == "batch":
        fast_batches(emulator)
    emulator.state.faults.add(kind="spend_limit", path=path)  # every request, until lifted
    try:
        args = ["--store", store, "run", str(corpus), "--no-prefect", "--run-id", "s1", "--mode", mode]
        assert main(args) == 3
        err = [
            ln for ln in capsys.readouterr().err.strip().splitlines() if not ln.startswith("per-file pass [")
        ]
        assert len(err) == 1 and "enforced_spend_limit_reached" in err[0] and "docmill resume s1" in err[0]
        # stopped as a tripped breaker is: phase, why, and the report of what is done so far
        manifest = ManifestStore(open_store(store)).load("s1")
        assert manifest.phase is Phase.STOPPED and "spend limit" in manifest.extra["stop"]["error"]
        report = open_store(store).get("runs/s1/report.md").decode()
        assert "The run stopped before it was done." in report and "docmill resume s1" in report
        refused = emulator.state.accounting.errors_by_status[429]
        assert 1 <= refused <= 6 and emulator.state.accounting.received == refused  # none retried
        outcomes = outcomes_of(open_store(store), "s1")
        assert all(o["state"] != "failed" for o in outcomes.values())
        emulator.state.faults.clear()
        assert main(["--store", store, "resume", "s1", "--no-prefect"]) == 0
    finally:
        get_settings.cache_clear()
    assert all(o["state"] != "failed" for o in outcomes_of(open_store(store), "s1").values())

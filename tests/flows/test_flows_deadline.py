"""`docmill run --finish-by TIME` from the command line: the deadline reaches the pass, the report
and `status` say what went batch and what realtime, a bad time is one line (exit 2). The policy
itself (switch, cancel, wait, realtime) is tested with virtual time in tests/tasks/deadline/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checkpoints.store import open_store
from docmill.settings import get_settings
from flows.cli.main import main
from tests.fixtures.emulator import fast_batches, sdk_client
from tests.flows.helpers import make_corpus


@pytest.fixture
def offline_env(monkeypatch: pytest.MonkeyPatch, emulator: Any, tmp_path: Path) -> str:
    monkeypatch.setenv("DOCMILL_API__BASE_URL", emulator.base_url)
    monkeypatch.setenv("DOCMILL_DEADLINE__POLL_SECONDS", "0.2")
    monkeypatch.setenv("DOCMILL_DEADLINE__LATENCY_SECONDS", "1")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("DOCMILL_RAISE_ERRORS", raising=False)
    get_settings.cache_clear()
    yield str(tmp_path / "store")
    get_settings.cache_clear()


def _status(store: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["--store", store, "status", "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out)["status"])


def test_finish_by_too_close_for_a_batch_goes_realtime_at_once(
    offline_env: str,
    tmp_path: Path,
    emulator: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCMILL_DEADLINE__MARGIN_SECONDS", "60")  # more than the 30 s given
    corpus, _ = make_corpus(tmp_path, count=12, seed=9)
    assert main(["--store", offline_env, "run", str(corpus), "--no-prefect", "--finish-by", "+30s"]) == 0
    billed = emulator.state.accounting.billed
    assert billed and not any(b.batch for b in billed) and not emulator.state.batches.batches
    status = _status(offline_env, capsys)
    deadline = status["deadline"]
    assert deadline["realtime_docs"] > 0 and deadline["batch_docs"] == 0 and deadline["met"] is True
    why = str(deadline["switch_why"])  # and why, with the figures the plan used and where they came from
    assert "no time for a batch" in why and "requests/min (configured, no answer seen yet)" in why
    assert "s to cancel and 6" in why and "s of margin before" in why  # 60 s, plus a share of the time given
    store = open_store(offline_env)
    (run_id,) = [k.split("/")[1] for k in store.list("runs/") if k.endswith("/manifest.json")]
    report = store.get(f"runs/{run_id}/report.md").decode()
    assert "## Deadline: batch and realtime" in report and f"{deadline['realtime_docs']} realtime" in report


def test_finish_by_that_batches_can_meet_costs_batch_only(
    offline_env: str, tmp_path: Path, emulator: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fast_batches(emulator)  # a batch takes a minute of the emulator's time: a second of ours
    corpus, _ = make_corpus(tmp_path, count=12, seed=9)
    assert main(["--store", offline_env, "run", str(corpus), "--no-prefect", "--finish-by", "+2h"]) == 0
    deadline = _status(offline_env, capsys)["deadline"]
    per_file = [b for b in emulator.state.accounting.billed if b.batch]  # realtime: the integration pass
    assert len(per_file) == deadline["batch_docs"]
    assert deadline["realtime_docs"] == 0 and deadline["batch_docs"] > 0 and deadline["switched_at"] is None
    assert main(["--store", offline_env, "status"]) == 0
    assert "deadline   finish by" in capsys.readouterr().out
    assert "AFTER" not in _status(offline_env, capsys)["deadline"] and deadline["met"] is True


def test_finish_by_that_is_not_a_time_is_one_line_exit_2(
    offline_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, _ = make_corpus(tmp_path, count=12, seed=9)
    assert main(["--store", offline_env, "run", str(corpus), "--no-prefect", "--finish-by", "soon"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--finish-by" in err[0]


def test_the_deadline_plans_from_the_pace_measured_as_soon_as_there_is_one(
    emulator: Any, tmp_path: Path
) -> None:
    """Before any answer the plan can only assume the configured limit; after one it uses the limit
    the API's headers stated and the answer time seen (the engine asks again at every poll)."""
    from flows.run.context import Endpoint, RunContext
    from flows.run.deadline import measured_pace
    from tasks.api.client import ModelClient
    from tasks.per_file.realtime import extract_chunk
    from tasks.recipes import load_recipe
    from tasks.source.inventory import inventory

    recipe = load_recipe("invoices")
    emulator.state.configure({"requests_per_minute": 120})
    settings = get_settings().model_copy(deep=True)
    settings.api.base_url, settings.store = emulator.base_url, str(tmp_path / "store")
    settings.api.requests_per_minute = 4000
    client = ModelClient(settings, base_url=emulator.base_url, api_key="test-key")
    store = open_store(settings.store)
    endpoint = Endpoint(emulator.base_url, "test-key", True)
    sdk = sdk_client(emulator)
    ctx = RunContext(recipe, "run-1", store, client, settings, endpoint=endpoint, batch_sdk=lambda: sdk)
    before = measured_pace(ctx)
    assert before.requests_per_minute == 4000 and before.limit_source.startswith("configured")
    corpus, _ = make_corpus(tmp_path, count=1, seed=2)
    docs = [d for d in inventory(str(corpus), settings, doc_types=recipe.doc_types) if d.status == "ok"]
    extract_chunk(docs[:1], ctx)
    after = measured_pace(ctx)
    assert after.requests_per_minute == 120 and after.limit_source == "stated by the API's headers"
    assert after.latency_source == "measured" and after.latency_seconds != before.latency_seconds

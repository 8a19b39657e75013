"""A run that stops reads as what happened, in the Prefect UI, the CLI and the report: a signal or the
cost cap ends its chunk task runs and its flow run Cancelled ("Interrupted", "Budget spent") with the
line that says how to continue, never Failed, and Prefect logs no ERROR for them; a breaker stop leaves
a report.md that names the error and the continue command; after a budget stop the progress bar and
`docmill status` count the same documents."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from checkpoints.manifest import ManifestStore
from checkpoints.store import open_store
from docmill.errors import BudgetExhausted, SystemicFailure
from docmill.settings import ApiSettings, CostSettings, Settings, get_settings
from docmill.shutdown import SHUTDOWN
from tests.flows.helpers import make_corpus
from tests.flows.test_flows_prefect import _settled_task_runs


@pytest.fixture
def env_for(monkeypatch: pytest.MonkeyPatch, emulator: Any, tmp_path: Path) -> Iterator[str]:
    store = str(tmp_path / "store")
    monkeypatch.setenv("DOCMILL_API__BASE_URL", emulator.base_url)
    monkeypatch.setenv("DOCMILL_STORE", store)
    monkeypatch.setenv("DOCMILL_API__CONCURRENCY", "2")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    get_settings.cache_clear()
    yield store
    get_settings.cache_clear()
    SHUTDOWN.reset()


class Records(logging.Handler):
    """What Prefect's run loggers emit (after their filters), to assert on levels."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def prefect_lines() -> Iterator[list[logging.LogRecord]]:
    handler = Records()
    loggers = [logging.getLogger(n) for n in ("prefect.task_runs", "prefect.flow_runs")]
    for lg in loggers:
        lg.addHandler(handler)
    yield handler.records
    for lg in loggers:
        lg.removeHandler(handler)


def _stop_after(emulator: Any, requests: int) -> threading.Event:
    """Request a stop (what docmill's SIGINT handler does) once `requests` calls reached the API."""
    done = threading.Event()

    def fire() -> None:
        while emulator.state.accounting.received_by_path.get("/v1/messages", 0) < requests:
            if done.wait(0.01):
                return
        SHUTDOWN.request("SIGINT")

    threading.Thread(target=fire, daemon=True).start()
    return done


def test_an_interrupted_flow_run_and_its_chunks_end_cancelled_not_failed(
    prefect_engine: None, env_for: str, tmp_path: Path, emulator: Any, prefect_lines: list[logging.LogRecord]
) -> None:
    from flows.orchestration.prefect_flows import extract

    corpus, _ = make_corpus(tmp_path, count=24, seed=2)
    emulator.state.config.latency_ms = 100.0
    done = _stop_after(emulator, 3)
    try:
        state = extract(str(corpus), "invoices", chunk_size=4, run_id="int-1", return_state=True)
    finally:
        done.set()
    assert state.is_cancelled() and state.name == "Interrupted", state
    assert "`docmill resume int-1` continues it" in (state.message or "")
    runs = _settled_task_runs(state.state_details.flow_run_id, "per-file")
    kinds = {(r.state.type.value, r.state.name) for r in runs if r.state is not None}
    assert ("CANCELLED", "Interrupted") in kinds and not any(t == "FAILED" for t, _ in kinds), kinds
    stopped = [r for r in runs if r.state is not None and r.state.name == "Interrupted"]
    assert all("docmill resume int-1" in (r.state.message or "") for r in stopped)  # type: ignore[union-attr]
    assert [r.getMessage()[:80] for r in prefect_lines if r.levelno >= logging.ERROR] == []
    m = ManifestStore(open_store(env_for)).load("int-1")
    assert m.phase == "stopped" and m.extra["stop"]["kind"] == "signal"


def test_a_budget_stop_ends_the_flow_run_budget_spent_with_the_resume_line(
    prefect_engine: None, env_for: str, tmp_path: Path, emulator: Any, prefect_lines: list[logging.LogRecord]
) -> None:
    from flows.orchestration.prefect_flows import extract

    corpus, _ = make_corpus(tmp_path, count=24, seed=2)
    state = extract(
        str(corpus), "invoices", chunk_size=4, run_id="cap-1", max_cost_usd=0.06, return_state=True
    )
    assert state.is_cancelled() and state.name == "Budget spent", state
    assert "docmill resume cap-1 --max-cost-usd" in (state.message or "")
    with pytest.raises(BudgetExhausted):  # what a caller of the flow (the CLI: exit 4) gets
        state.result()
    runs = _settled_task_runs(state.state_details.flow_run_id, "per-file")
    assert not any(r.state is not None and r.state.is_failed() for r in runs)
    assert [r.getMessage()[:80] for r in prefect_lines if r.levelno >= logging.ERROR] == []
    budget_lines = [r for r in prefect_lines if "BudgetExhausted" in r.getMessage()]
    assert len(budget_lines) <= 1  # the flow run's end, not repeated as a warning besides it


def test_a_breaker_stop_leaves_a_report_naming_the_error_and_the_continue_command(
    tmp_path: Path, emulator: Any
) -> None:
    from flows.entry import RunWiring, run_extract
    from flows.run.context import RunParams

    corpus, _ = make_corpus(tmp_path, count=12, seed=9)
    store_dir = str(tmp_path / "store")
    emulator.state.faults.add(kind="schema_invalid")  # every answer invalid alike
    api = ApiSettings(
        base_url=emulator.base_url, circuit_breaker_calls=3, concurrency=2, backoff_max_seconds=0
    )
    with pytest.raises(SystemicFailure):
        run_extract(
            RunParams(str(corpus), "invoices", run_id="brk-1"),
            settings=Settings(store=store_dir, api=api),
            wiring=RunWiring(progress=False),
        )
    store = open_store(store_dir)
    md = store.get("runs/brk-1/report.md").decode()
    assert re.search(r"SystemicFailure: run brk-1 stopped: .*invalid", md), md[:800]
    assert "`docmill resume brk-1` continues the run once the cause is fixed" in md
    assert "phase **stopped**" in md


def test_after_a_budget_stop_the_progress_bar_and_status_count_the_same(
    tmp_path: Path, emulator: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from flows.entry import RunWiring, run_extract
    from flows.run.context import RunParams
    from tasks.reporting.status import run_status

    corpus, _ = make_corpus(tmp_path, count=30, seed=3)
    store_dir = str(tmp_path / "store")
    api = ApiSettings(base_url=emulator.base_url, max_tokens=1024, concurrency=4, backoff_max_seconds=0.02)
    settings = Settings(store=store_dir, api=api, cost=CostSettings(max_cost_usd=0.08), chunk_size=5)
    with pytest.raises(BudgetExhausted):
        run_extract(
            RunParams(str(corpus), "invoices", run_id="bar-1"),
            settings=settings,
            wiring=RunWiring(progress=True),
        )
    bars = re.findall(r"per-file pass \[[#.]+\] (\d+)/(\d+) docs", capsys.readouterr().err)
    assert bars, "no progress line"
    shown, total = map(int, bars[-1])
    st = run_status(open_store(store_dir), "bar-1")
    assert (shown, total) == (st["progress"], st["documents"]) and shown < total


def test_the_nightly_flow_takes_recipe_model_and_budget(
    prefect_engine: None, env_for: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deploy/prefect.yaml's nightly deployment passes recipe (null: DOCMILL_RECIPE), model and
    max_cost_usd; the cap stops it as it stops `docmill run`."""
    from flows.orchestration.prefect_flows import nightly

    corpus, _ = make_corpus(tmp_path, count=12, seed=9)
    monkeypatch.setenv("DOCMILL_RECIPE", "invoices")
    get_settings.cache_clear()
    state = nightly(str(corpus), None, model="claude-haiku-4-5", max_cost_usd=0.0001, return_state=True)
    assert state.is_cancelled() and state.name == "Budget spent", state
    (run_id,) = ManifestStore(open_store(env_for)).list_runs()
    m = ManifestStore(open_store(env_for)).load(run_id)
    assert (m.recipe, m.config["api"]["model"], m.budget_usd) == ("invoices", "claude-haiku-4-5", 0.0001)

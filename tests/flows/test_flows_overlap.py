"""Two live runs over the same documents: the second is refused before it pays for anything."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from checkpoints.active import ActiveRuns, sources_overlap
from checkpoints.lease import Lease
from checkpoints.manifest import ManifestStore
from checkpoints.store import open_store
from docmill.errors import NotFound, RunOverlap
from docmill.settings import Settings
from flows.entry import RunWiring, run_extract
from flows.run.context import RunParams
from tests.flows.helpers import make_corpus, settings_for

ELSEWHERE = "another-host:4242:abc123"  # a driver on another machine: alive while its lease is


def _live_run(store: Any, run_id: str, settings: Settings, source: Path, *, clock: Any = time.time) -> None:
    """What a run driven by another process leaves in the store: its lease and its marker."""
    Lease(store, run_id, ELSEWHERE, ttl_seconds=600, clock=clock).acquire()
    info = {"recipe": "invoices", "model": settings.api.model, "source": str(source), "started_at": clock()}
    ActiveRuns(store).mark(run_id, info)


def _billed(emulator: Any) -> int:
    return len(emulator.state.accounting.billed)


@pytest.fixture
def rig(tmp_path: Path, emulator: Any) -> tuple[Path, Settings, Any]:
    corpus, _ = make_corpus(tmp_path, count=8, seed=6)
    settings = settings_for(emulator, str(tmp_path / "store"))
    return corpus, settings, open_store(settings.store)


@pytest.mark.parametrize("live_source", ["same", "parent"])
def test_a_run_over_documents_a_live_run_covers_is_refused(
    rig: tuple[Path, Settings, Any], emulator: Any, live_source: str
) -> None:
    corpus, settings, store = rig
    _live_run(store, "nightly-a", settings, corpus if live_source == "same" else corpus.parent)
    billed = _billed(emulator)
    with pytest.raises(RunOverlap) as e:
        run_extract(
            RunParams(str(corpus), "invoices", run_id="nightly-b"),
            settings=settings,
            wiring=RunWiring(progress=False),
        )
    assert "nightly-a" in e.value.one_line() and "twice" in e.value.one_line()
    assert _billed(emulator) == billed  # refused before anything was sent
    with pytest.raises(NotFound):
        ManifestStore(store).load("nightly-b")  # no half-started run left behind
    assert [run_id for run_id, _ in ActiveRuns(store).items()] == ["nightly-a"]


def test_runs_that_cannot_share_documents_go_ahead(rig: tuple[Path, Settings, Any], tmp_path: Path) -> None:
    corpus, settings, store = rig
    _live_run(store, "other-folder", settings, tmp_path / "elsewhere")
    other_model = settings.model_copy(
        update={"api": settings.api.model_copy(update={"model": "claude-haiku-4-5"})}
    )
    _live_run(store, "other-model", other_model, corpus)
    summary = run_extract(
        RunParams(str(corpus), "invoices", run_id="mine"), settings=settings, wiring=RunWiring(progress=False)
    )
    assert summary["phase"] == "done"
    # finished: its marker is gone, the others' stay
    assert sorted(run_id for run_id, _ in ActiveRuns(store).items()) == ["other-folder", "other-model"]


def test_a_crashed_run_does_not_block_and_keeps_its_marker(rig: tuple[Path, Settings, Any]) -> None:
    corpus, settings, store = rig
    _live_run(store, "crashed", settings, corpus, clock=lambda: time.time() - 3600)  # lease expired
    summary = run_extract(
        RunParams(str(corpus), "invoices", run_id="next"), settings=settings, wiring=RunWiring(progress=False)
    )
    assert summary["phase"] == "done"
    # the stopped run stays known (the same `docmill run` continues it); the finished one is gone
    assert [run_id for run_id, _ in ActiveRuns(store).items()] == ["crashed"]


def test_overlap_can_be_allowed(rig: tuple[Path, Settings, Any]) -> None:
    corpus, settings, store = rig
    _live_run(store, "live", settings, corpus)
    allowed = settings.model_copy(update={"allow_overlapping_runs": True})
    assert (
        run_extract(RunParams(str(corpus), "invoices"), settings=allowed, wiring=RunWiring(progress=False))[
            "phase"
        ]
        == "done"
    )


def test_two_runs_that_marked_themselves_at_once_the_later_stops(rig: tuple[Path, Settings, Any]) -> None:
    from flows.run.context import Endpoint, RunContext
    from flows.run.guard import _refuse_overlap

    corpus, settings, store = rig
    runs = ActiveRuns(store)
    now = time.time()
    _live_run(store, "a", settings, corpus, clock=lambda: now)
    ctx = RunContext(
        None, "b", store, None, settings, endpoint=Endpoint(None, "", True), batch_sdk=lambda: None
    )  # the guard only
    mine = {"recipe": "invoices", "model": settings.api.model, "source": str(corpus)}
    _refuse_overlap(ctx, runs, {**mine, "started_at": now - 1}, marked=True)  # b was first: goes on
    with pytest.raises(RunOverlap):
        _refuse_overlap(ctx, runs, {**mine, "started_at": now + 1}, marked=True)  # b was later: stops


def test_sources_overlap_by_containment_only() -> None:
    assert sources_overlap("/data/invoices", "/data/invoices/")
    assert sources_overlap("/data", "/data/invoices/2026")
    assert sources_overlap("s3://b/in/", "s3://b/in/part-1")
    assert not sources_overlap("/data/invoices", "/data/invoices-2")
    assert not sources_overlap("s3://b/in/part-0", "s3://b/in/part-1")


def test_cli_exit_5_and_one_line(
    rig: tuple[Path, Settings, Any],
    monkeypatch: pytest.MonkeyPatch,
    emulator: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from docmill.settings import get_settings
    from flows.cli.main import main

    corpus, settings, store = rig
    _live_run(store, "live", settings, corpus)
    monkeypatch.setenv("DOCMILL_API__BASE_URL", emulator.base_url)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("DOCMILL_RAISE_ERRORS", raising=False)
    get_settings.cache_clear()
    try:
        assert main(["--store", settings.store, "run", str(corpus), "--no-prefect"]) == 5
    finally:
        get_settings.cache_clear()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run live" in err[0] and "DOCMILL_ALLOW_OVERLAPPING_RUNS" in err[0]


def test_a_relative_source_is_compared_as_the_folder_it_names(
    rig: tuple[Path, Settings, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus, settings, store = rig
    _live_run(store, "absolute", settings, corpus)
    monkeypatch.chdir(corpus.parent)
    with pytest.raises(RunOverlap):
        run_extract(
            RunParams(f"./{corpus.name}/", "invoices", run_id="relative"),
            settings=settings,
            wiring=RunWiring(progress=False),
        )


def test_status_and_runs_tell_a_stopped_run_from_a_running_one(rig: tuple[Path, Settings, Any]) -> None:
    """A run whose process died keeps its unfinished phase; status and runs say nobody drives it
    (and how to continue) instead of showing an ETA forever."""
    from flows.entry import RunWiring, resume_run
    from flows.run.context import RunParams
    from tasks.reporting.status import run_status, runs_table, status_text

    corpus, settings, store = rig
    settings = settings.model_copy(update={"chunk_size": 3})

    def crash_after_one(fn: Any, chunks: Any) -> list[Any]:  # chunks: as handed out
        fn(*next(iter(chunks)))
        raise KeyboardInterrupt  # the process goes away mid-pass

    with pytest.raises(KeyboardInterrupt):
        run_extract(
            RunParams(str(corpus), "invoices", run_id="r1"),
            settings=settings,
            wiring=RunWiring(progress=False, map_chunks=crash_after_one),
        )
    st = run_status(store, "r1")
    assert (st["phase"], st["driver"], st["eta_seconds"]) == ("per_file", "stopped", None)
    assert "docmill resume r1" in status_text(st) and "RUN_ID" not in status_text(st)
    row = next(line for line in runs_table(store) if line.startswith("r1 "))
    assert row.split()[1:3] == ["per_file", "stopped"]
    # `runs` reads what `status` reads: the interrupted run's documents so far and its real cost.
    assert st["progress"] > 0 and st["cost_usd"] > 0
    assert f"{st['progress']}/{st['documents']}" in row.split() and f"${st['cost_usd']:.4f}" in row

    Lease(store, "r1", ELSEWHERE, ttl_seconds=600).acquire()  # a process on another machine took it
    assert run_status(store, "r1")["driver"] == "running"
    assert "docmill resume" not in status_text(run_status(store, "r1"))
    store.delete("runs/r1/lease.json")

    assert resume_run("r1", settings=settings, wiring=RunWiring(progress=False))["phase"] == "done"
    assert run_status(store, "r1")["driver"] == "finished"
    assert next(line for line in runs_table(store) if line.startswith("r1 ")).split()[1:3] == [
        "done",
        "finished",
    ]


def test_cli_through_prefect_says_it_in_one_line_too(
    prefect_engine: None, rig: tuple[Path, Settings, Any], emulator: Any
) -> None:
    """The flow run fails with the docmill error; Prefect's console traceback of it is dropped
    (the CLI in its own process, with its real stderr, on the test session's Prefect server)."""
    import os
    import subprocess
    import sys

    corpus, settings, store = rig
    _live_run(store, "live", settings, corpus)
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "DOCMILL_RAISE_ERRORS")}
    env["DOCMILL_API__BASE_URL"] = emulator.base_url
    from prefect.settings import PREFECT_API_URL

    # The session's server: without it the CLI starts its own ephemeral one, which a loaded machine
    # does not always bring up in time.
    env["PREFECT_API_URL"] = str(PREFECT_API_URL.value())
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-m", "flows.cli", "--store", str(settings.store), "run", str(corpus)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 5, out.stderr
    assert "skipped" not in out.stdout
    assert "Traceback" not in out.stderr and "Encountered exception" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert [line for line in lines if "RunOverlap" in line] == [lines[-1]]


def test_an_overlap_skip_ends_the_flow_run_cancelled_with_its_reason(
    prefect_engine: None, rig: tuple[Path, Settings, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deliberate skip is not a failure: the flow run ends Cancelled (no failure alert at 2 a.m.),
    its message says why, and nothing was sent."""
    from docmill.settings import get_settings
    from flows.orchestration.prefect_flows import nightly

    corpus, settings, store = rig
    monkeypatch.setenv("DOCMILL_API__BASE_URL", settings.api.base_url or "")
    get_settings.cache_clear()
    _live_run(store, "backfill-1", settings, corpus.parent)
    try:
        state = nightly(str(corpus), "invoices", store=str(settings.store), return_state=True)
    finally:
        get_settings.cache_clear()
    assert state.is_cancelled(), state
    assert "backfill-1" in (state.message or "") and "skipped" in (state.message or "")

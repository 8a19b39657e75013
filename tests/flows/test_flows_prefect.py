"""The flows on a real Prefect engine (a temporary server per test session)."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from docmill.settings import get_settings
from tests.fixtures.emulator import fast_batches
from tests.flows.helpers import make_corpus


@pytest.fixture
def env_for(monkeypatch: pytest.MonkeyPatch, emulator: Any, tmp_path: Path) -> str:
    store = str(tmp_path / "store")
    monkeypatch.setenv("DOCMILL_API__BASE_URL", emulator.base_url)
    monkeypatch.setenv("DOCMILL_STORE", store)
    monkeypatch.setenv("DOCMILL_BATCH__POLL_SECONDS", "0.05")  # a batch is in_progress when created
    monkeypatch.setenv("DOCMILL_BATCH__POLL_MAX_SECONDS", "0.2")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    get_settings.cache_clear()
    yield store
    get_settings.cache_clear()


def _of_flow_run(what: str, flow_run_id: Any) -> list[Any]:
    """The task runs or artifacts of one flow run, read from the Prefect API."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas import filters

    async def read() -> list[Any]:
        async with get_client() as client:
            if what == "task_runs":
                ids = filters.FlowRunFilterId(any_=[flow_run_id])
                return await client.read_task_runs(flow_run_filter=filters.FlowRunFilter(id=ids))
            run = filters.ArtifactFilterFlowRunId(any_=[flow_run_id])
            return await client.read_artifacts(artifact_filter=filters.ArtifactFilter(flow_run_id=run))

    return asyncio.run(read())


def _settled_task_runs(flow_run_id: Any, prefix: str, timeout: float = 30.0) -> list[Any]:
    """The task runs of a flow run whose names start with `prefix`, once none is Pending or Running.

    The server records task-run states from events, after the flow call has returned: on a loaded
    machine a read right after the flow still saw its chunks Pending and Running."""
    deadline = time.monotonic() + timeout
    while True:
        runs = [r for r in _of_flow_run("task_runs", flow_run_id) if r.name.startswith(prefix)]
        settled = runs and all(r.state is not None and r.state.is_final() for r in runs)
        if settled or time.monotonic() > deadline:
            return runs
        time.sleep(0.2)


def test_extract_flow_runs_chunks_not_documents(
    prefect_engine: None, env_for: str, tmp_path: Path, emulator: Any
) -> None:
    from flows.orchestration.prefect_flows import extract

    corpus, truth = make_corpus(tmp_path, count=24, seed=2)
    state = extract(str(corpus), "invoices", chunk_size=10, return_state=True)
    summary = state.result()
    assert summary["phase"] == "done"
    docs = [t for t in truth if t["record"] == "document"]
    assert summary["documents"] == len(docs)
    chunk_runs = _settled_task_runs(state.state_details.flow_run_id, "per-file-chunk")
    from checkpoints.store import open_store

    chunks = open_store(env_for).get_json(f"runs/{summary['run_id']}/inventory-done.json")["chunks"]
    assert len(chunks) <= len(docs) // 5
    assert len(chunk_runs) == len(chunks)  # one Prefect task per chunk, never per document
    assert all(r.state.is_completed() for r in chunk_runs)


def test_nightly_second_run_sends_only_new_and_changed(
    prefect_engine: None, env_for: str, tmp_path: Path, emulator: Any
) -> None:
    from flows.orchestration.prefect_flows import nightly

    corpus, truth = make_corpus(tmp_path, count=12, seed=4)
    first = nightly(str(corpus), "invoices")
    billed_first = {r.body_sha256 for r in emulator.state.accounting.billed}
    ok_docs = [t for t in truth if t["record"] == "document" and t["expected_status"] == "ok"]
    changed = corpus / ok_docs[0]["doc_id"]
    changed.write_text(changed.read_text().replace("Bill to", "Billed to"))
    shutil.copy(corpus / ok_docs[1]["doc_id"], corpus / "inbox-new.txt")
    (corpus / "brand-new.txt").write_text(
        "Invoice number: INV-9999\nVendor: Fresh Co\nInvoice date: 2026-11-01\nCurrency: EUR\nTotal: 10.00\n"
    )
    emulator.state.accounting.reset()
    second = nightly(str(corpus), "invoices")
    assert second["run_id"] != first["run_id"]
    file_calls = [r for r in emulator.state.accounting.billed if r.body_sha256 not in billed_first]
    # changed doc + brand-new doc (the copy has known content) + one integration call over the new set
    assert len(file_calls) == 3, [r.body_sha256[:8] for r in file_calls]
    assert second["from_ledger"] >= first["states"]["succeeded"] - 1


def test_flow_logs_reach_prefect_with_the_docmill_run_id(
    prefect_engine: None, env_for: str, tmp_path: Path, emulator: Any
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    from flows.orchestration.prefect_flows import extract

    corpus, _ = make_corpus(tmp_path, count=6, seed=6)
    # A 400 for one document makes a WARNING line (the test session runs Prefect at WARNING).
    (corpus / "rejected.txt").write_text("Invoice number: INV-4000\nVendor: REJECT-ME Ltd\nTotal: 1.00\n")
    emulator.state.faults.add(kind="invalid_request", marker="REJECT-ME")
    state = extract(str(corpus), "invoices", return_state=True)
    run_id = state.result()["run_id"]

    async def read() -> list[Any]:
        async with get_client() as client:
            flt = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[state.state_details.flow_run_id]))
            return await client.read_logs(log_filter=flt)

    for _ in range(40):  # logs are shipped to the API in batches
        messages = [log.message for log in asyncio.run(read())]
        if any(f"[docmill run {run_id}]" in m for m in messages):
            break
        import time

        time.sleep(0.25)
    docmill_lines = [m for m in messages if m.startswith("[docmill run ")]
    assert docmill_lines, messages
    assert all(f"[docmill run {run_id}]" in m for m in docmill_lines)
    assert any("rejected.txt" in m or "400" in m for m in docmill_lines), docmill_lines


def _stopped_after_one_chunk(corpus: Path, run_id: str, *, chunk_size: int) -> None:
    """Run `run_id` over `corpus` without Prefect until its first chunk is done, then lose the worker."""
    from flows.entry import RunWiring, run_extract
    from flows.run.context import RunParams

    def die_after_one_chunk(fn: Any, chunks: Any) -> list[dict[str, int]]:  # chunks: as handed out
        fn(*next(iter(chunks)))
        raise RuntimeError("worker lost")

    settings = get_settings().model_copy(update={"chunk_size": chunk_size})
    with pytest.raises(RuntimeError):
        run_extract(
            RunParams(str(corpus), "invoices", run_id=run_id),
            settings=settings,
            wiring=RunWiring(progress=False, map_chunks=die_after_one_chunk),
        )


def test_resume_flow_sends_nothing_already_in_the_ledger(
    prefect_engine: None, env_for: str, tmp_path: Path, emulator: Any
) -> None:
    from flows.orchestration.prefect_flows import resume

    corpus, truth = make_corpus(tmp_path, count=20, seed=14)
    _stopped_after_one_chunk(corpus, "prefect-resume", chunk_size=6)
    paid_before = {r.body_sha256 for r in emulator.state.accounting.billed}
    assert paid_before
    summary = resume("prefect-resume")
    hashes = [r.body_sha256 for r in emulator.state.accounting.billed]
    assert len(hashes) == len(set(hashes))  # nothing sent twice
    assert summary["phase"] == "done"
    assert summary["documents"] == len([t for t in truth if t["record"] == "document"])


def test_resume_through_prefect_shows_progress_as_run_does(
    prefect_engine: None, env_for: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from flows.cli.main import main

    corpus, _ = make_corpus(tmp_path, count=12, seed=15)
    _stopped_after_one_chunk(corpus, "shown-resume", chunk_size=4)
    capsys.readouterr()
    assert main(["resume", "shown-resume"]) == 0
    err = capsys.readouterr().err
    assert "per-file pass [" in err and "docs" in err, err


@pytest.mark.parametrize("mode", ["realtime", "batch"])
def test_flow_run_shows_per_file_progress_in_documents(
    prefect_engine: None, env_for: str, tmp_path: Path, emulator: Any, mode: str
) -> None:
    """Realtime and batch runs alike leave one progress artifact on their flow run, counting
    documents (not chunks), at 100% when the per-file pass is done."""
    from flows.orchestration.prefect_flows import extract

    corpus, _ = make_corpus(tmp_path, count=12, seed=4)
    if mode == "batch":
        fast_batches(emulator)
    state = extract(str(corpus), "invoices", mode=mode, chunk_size=5, return_state=True)
    summary = state.result()
    assert summary["phase"] == "done"
    progress = [a for a in _of_flow_run("artifacts", state.state_details.flow_run_id) if a.type == "progress"]
    assert len(progress) == 1, progress
    assert progress[0].data == pytest.approx(100.0)
    assert progress[0].key == "docmill-progress"
    assert f"{summary['documents']} of {summary['documents']} documents" in (progress[0].description or "")


def test_partial_integration_shows_in_the_summary_artifact(
    prefect_engine: None, env_for: str, tmp_path: Path, emulator: Any
) -> None:
    """An integration answer cut at max_tokens for one document: the flow's summary says
    `integration: partial`, and so does its `docmill-run-summary` artifact."""
    from flows.orchestration.prefect_flows import extract

    corpus, truth = make_corpus(tmp_path, count=8, seed=4)
    doc = next(t["doc_id"] for t in truth if t["record"] == "document" and t["expected_status"] == "ok")
    emulator.state.faults.add(kind="truncate", marker=f'\\"doc_id\\": \\"{doc}\\"')
    state = extract(str(corpus), "invoices", return_state=True)
    assert state.result()["integration"] == "partial"
    summary = [
        a
        for a in _of_flow_run("artifacts", state.state_details.flow_run_id)
        if a.key == "docmill-run-summary"
    ]
    assert len(summary) == 1 and "**Integration: PARTIAL** (1 problem(s)" in str(summary[0].data)


def test_progress_artifact_is_throttled_and_never_breaks_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import flows.orchestration.chunk_tasks as fx
    from tests.fixtures.clock import FakeTime

    calls: list[tuple[str, Any]] = []
    monkeypatch.setattr(fx, "create_progress_artifact", lambda **kw: calls.append(("create", kw)) or "a1")
    monkeypatch.setattr(fx, "update_progress_artifact", lambda **kw: calls.append(("update", kw["progress"])))
    fake = FakeTime()
    art = fx.ProgressArtifact(every=5.0, clock=fake.clock)
    for done in range(0, 10):
        art(done, 10)
        fake.sleep(1.0)
    art(10, 10)
    updates = [p for kind, p in calls if kind == "update"]
    assert [kind for kind, _ in calls].count("create") == 1
    assert updates == [0.0, 50.0, 100.0]  # at the start, every 5 s, and at the end

    def broken(**kw: Any) -> None:
        raise RuntimeError("Prefect API down")

    monkeypatch.setattr(fx, "update_progress_artifact", broken)
    fx.ProgressArtifact()(10, 10)  # logged, not raised


def test_info_lines_reach_the_logs_tab_whatever_prefects_own_level(
    prefect_engine: None, env_for: str, tmp_path: Path, emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers run flow runs at PREFECT_LOGGING_LEVEL=WARNING (so does this session): docmill's INFO
    lines (one per API call) still reach the flow run's Logs tab, from the chunk threads too."""
    import logging

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    from flows.orchestration.prefect_flows import extract

    assert logging.getLogger("prefect").getEffectiveLevel() >= logging.WARNING
    monkeypatch.setenv("DOCMILL_LOG_LEVEL", "INFO")
    get_settings.cache_clear()
    corpus, _ = make_corpus(tmp_path, count=6, seed=6)
    state = extract(str(corpus), "invoices", chunk_size=3, return_state=True)
    run_id = state.result()["run_id"]

    async def read() -> list[Any]:
        async with get_client() as client:
            flt = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[state.state_details.flow_run_id]))
            return await client.read_logs(log_filter=flt)

    import time

    for _ in range(40):  # logs are shipped to the API in batches
        logs = asyncio.run(read())
        if sum(1 for x in logs if x.level == logging.INFO and x.message.startswith("[docmill run ")) >= 3:
            break
        time.sleep(0.25)
    info = [
        x.message for x in logs if x.level == logging.INFO and x.message.startswith(f"[docmill run {run_id}]")
    ]
    assert len(info) >= 3, [x.message for x in logs]


def test_finished_run_links_its_html_report_and_tables_failures_by_reason(
    prefect_engine: None, env_for: str, tmp_path: Path, emulator: Any
) -> None:
    from flows.orchestration.prefect_flows import extract

    corpus, truth = make_corpus(tmp_path, count=14, seed=5)
    state = extract(str(corpus), "invoices", chunk_size=4, return_state=True)
    summary = state.result()
    flow_run_id = state.state_details.flow_run_id
    artifacts = {a.key: a for a in _of_flow_run("artifacts", flow_run_id)}
    link = artifacts["docmill-report"]  # Prefect stores a link artifact as markdown `[text](url)`
    import re

    (url,) = re.findall(r"\]\(([^)]+)\)", str(link.data))
    assert url.startswith("file://") and url.endswith(f"runs/{summary['run_id']}/report.html"), url
    assert Path(url.removeprefix("file://")).is_file()
    table = artifacts["docmill-failures"]
    assert table.type == "table"
    rows = json.loads(str(table.data))
    broken = [t for t in truth if t["record"] == "document" and t["expected_status"] != "ok"]
    broken = [t for t in broken if t["expected_skip_reason"] != "duplicate"]  # these take their original's
    assert sum(int(r["documents"]) for r in rows) == len(broken) > 0, rows
    assert {(r["state"], r["reason"]) for r in rows} >= {("failed", "input:binary"), ("skipped", "empty")}
    assert "report.html" in str(artifacts["docmill-run-summary"].data)

    # Chunk task runs are named after the documents they hold; the task name stays per-file-chunk.
    runs = [r for r in _of_flow_run("task_runs", flow_run_id) if r.name.startswith("per-file-chunk")]
    assert runs and all(re.match(r"per-file-chunk (dup-)?\d{6}: ", r.name) for r in runs), [
        r.name for r in runs
    ]
    from checkpoints.store import open_store

    store = open_store(env_for)
    chunks = store.get_json(f"runs/{summary['run_id']}/inventory-done.json")["chunks"]
    first = store.get_json(f"runs/{summary['run_id']}/inventory/{chunks[0]}.json")
    name = next(r.name for r in runs if f" {chunks[0]}: " in r.name)
    assert first[0]["doc_id"] in name and first[-1]["doc_id"] in name and f"({len(first)} docs)" in name


def test_a_retried_flow_run_continues_its_docmill_run(
    prefect_engine: None, env_for: str, emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flow run fails mid-batch (after create, while polling); Prefect retries it (real engine,
    flow-level retries): the retry drives the same docmill run id, bound to the flow run, and
    re-attaches the batches instead of sending their custom_ids again. `new_run=True` shows the
    binding alone does it (no stopped-run lookup)."""
    from collections import Counter

    from prefect.runtime import flow_run

    from checkpoints.manifest import ManifestStore
    from checkpoints.store import open_store
    from docmill import crash_points
    from flows.orchestration.prefect_flows import extract

    corpus, _ = make_corpus(tmp_path, count=6, seed=2)
    monkeypatch.setenv("DOCMILL_BATCH__POLL_SECONDS", "0.05")
    emulator.state.configure({"batch_base_seconds": 0.5})
    failures: list[str] = []

    def fail_once(point: str) -> None:
        if point == "polling" and not failures:
            failures.append(str(flow_run.id))
            raise RuntimeError("worker lost mid-batch")

    monkeypatch.setattr(crash_points, "HOOK", fail_once)
    summary = extract.with_options(retries=1, retry_delay_seconds=0)(
        str(corpus), mode="batch", store=env_for, new_run=True
    )
    assert failures, "the first attempt never reached polling"
    store = open_store(env_for)
    assert list(ManifestStore(store).list_runs()) == [summary["run_id"]]
    assert store.get_json(f"bindings/prefect/{failures[0]}.json") == {"run_id": summary["run_id"]}
    creates = Counter(cid for b in emulator.state.batches.batches.values() for cid, _ in b.requests)
    assert creates and max(creates.values()) == 1, "a custom_id was sent in two batch creates"
    assert summary["phase"] == "done"

"""Every request docmill sends — realtime per-file (streamed and not, repairs, the fallback), batch
create, the integration pass, a long task with compaction and its client-side fallback, doctor — is
valid against the SDK's own request TypedDicts (tests/fixtures/wire_shape.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic

from checkpoints.store import open_store
from docmill.settings import ApiSettings, BatchSettings, Settings
from flows.entry import RunWiring, run_extract
from flows.run.context import RunParams
from tasks.api.client import ModelClient
from tasks.conversation.pinned import PinnedFacts
from tasks.conversation.task import ConversationTask
from tasks.doctor import run_doctor
from tasks.recipes import load_recipe
from tests.fixtures.emulator import fast_batches
from tests.fixtures.wire_shape import request_errors
from tests.flows.helpers import make_corpus, plant

GOOD = {"model": "claude-sonnet-4-6", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


def test_the_shape_check_can_fail() -> None:
    assert request_errors("POST", "/v1/messages", (), GOOD) == []
    bad = {**GOOD, "temperature": 0, "max_tokens": "10", "messages": [{"role": "robot", "content": "x"}]}
    errors = request_errors("POST", "/v1/messages", ("no-such-beta-2020-01-01",), bad)
    assert any("temperature: unknown key" in e for e in errors)
    assert any("max_tokens: expected int" in e for e in errors)
    assert any("role: 'robot' is not one of" in e for e in errors)
    assert any("no-such-beta" in e for e in errors)
    assert any("model: required key missing" in e for e in request_errors("POST", "/v1/messages", (), {}))


def _long_task(emulator: Any, store: Any, run_id: str) -> None:
    client = ModelClient(Settings(), base_url=emulator.base_url, api_key="k", sleep=lambda _s: None)
    pinned = PinnedFacts()
    pinned.set("docs", "DOCUMENTS SEEN (2): doc-7, doc-70")
    task = ConversationTask(
        "t1",
        run_id,
        store,
        client,
        model="claude-sonnet-4-6",
        system="You integrate invoice results.",
        budget_tokens=3000,
        pinned=pinned,
        max_tokens=200,
    )
    for i in range(12):
        task.send(f"slice {i}\n" + "\n".join(f"row {i}-{j} INV-{j} total {j}.00" for j in range(30)))
    assert task.compactions


def test_every_request_docmill_sends_matches_the_sdk_types(tmp_path: Path, emulator: Any) -> None:
    emulator.state.configure({"record_requests": True})
    corpus, truth = make_corpus(tmp_path, count=5, seed=5)
    repaired = plant(corpus, truth, "PLANTED-SCHEMA")
    overloaded = plant(corpus, truth, "PLANTED-OVERLOAD", {repaired})
    plant(corpus, truth, "PLANTED-TRUNC", {repaired, overloaded})
    faults = emulator.state.faults
    faults.add(kind="schema_invalid", marker="PLANTED-SCHEMA", count=1)
    faults.add(kind="overloaded", marker="PLANTED-OVERLOAD", count=3)
    faults.add(kind="truncate", marker="PLANTED-TRUNC", count=1)  # one retry with max_tokens 8,192: streamed
    api = ApiSettings(base_url=emulator.base_url, backoff_max_seconds=0.0, max_tokens=1024)
    fast = BatchSettings(poll_seconds=0.02, poll_max_seconds=0.05)
    for mode in ("realtime", "batch"):
        if mode == "batch":
            fast_batches(emulator)
        settings = Settings(store=str(tmp_path / mode), api=api, batch=fast)
        run_extract(
            RunParams(str(corpus), "invoices", mode=mode), settings=settings, wiring=RunWiring(progress=False)
        )
    _long_task(emulator, open_store(str(tmp_path / "long")), "long")
    faults.add(kind="compaction_unavailable")  # the client-side summary path
    _long_task(emulator, open_store(str(tmp_path / "long2")), "long2")
    sdk = anthropic.Anthropic(api_key="k", base_url=emulator.base_url, max_retries=0)
    run_doctor(Settings(api=api), sdk, [load_recipe("invoices"), load_recipe("code-review")])

    sent = emulator.state.accounting.requests
    problems = [e for r in sent for e in request_errors(r.method, r.path, r.betas, r.body)]
    assert problems == []
    kinds = {(r.path, bool(r.betas), bool(isinstance(r.body, dict) and r.body.get("stream"))) for r in sent}
    assert ("/v1/messages", False, True) in kinds  # streamed (the 8,192-token retry after truncation)
    assert ("/v1/messages", False, False) in kinds
    assert ("/v1/messages", True, True) in kinds  # beta: compaction, streamed like every long-task call
    assert ("/v1/messages/count_tokens", False, False) in kinds
    assert ("/v1/messages/batches", False, False) in kinds

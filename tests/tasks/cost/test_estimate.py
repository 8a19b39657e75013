"""`docmill estimate` (tasks/cost/estimate.py) against what the emulator bills: below the model's minimum
cacheable length the per-file prefix is never cached, and the estimate assumes no cache reads; the
integration pass is priced too (full and incremental), close to what a run then costs."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from checkpoints.costs import CostLedger
from checkpoints.store import open_store
from docmill.models import THINKING_TOKENS_BY_EFFORT, min_cacheable_tokens
from docmill.settings import ApiSettings, Settings
from flows.entry import RunWiring, run_extract
from flows.run.context import RunParams
from tasks.cost.estimate import estimate_source
from tests.flows.helpers import make_corpus, settings_for


def test_prefix_below_the_cache_minimum_gets_no_reads_and_the_estimate_agrees(
    tmp_path: Path, emulator: Any
) -> None:
    corpus, _ = make_corpus(tmp_path, count=6, seed=4)
    settings = Settings(store=str(tmp_path / "store"), api=ApiSettings(base_url=emulator.base_url))
    est = estimate_source(str(corpus), "invoices", settings)
    model = settings.api.model
    assert 0 < est.prefix_tokens < est.cache_min_tokens == min_cacheable_tokens(model)
    assert est.cached_tokens == 0
    assert any(f"below {model}'s minimum cacheable length" in line for line in est.lines())

    summary = run_extract(
        RunParams(str(corpus), "invoices"), settings=settings, wiring=RunWiring(progress=False)
    )
    tokens = CostLedger(open_store(settings.store), summary["run_id"]).totals()["tokens"]
    assert tokens["cache_read_input_tokens"] == 0 and tokens["cache_creation_input_tokens"] == 0

    lower = {**settings.api.cache_min_tokens, model: 100}
    cached = estimate_source(
        str(corpus), "invoices", Settings(api=ApiSettings(base_url=emulator.base_url, cache_min_tokens=lower))
    )
    assert cached.cached_tokens > 0 and cached.usd(batch=False) < est.usd(batch=False)


def test_estimate_includes_integration_full_and_incremental(tmp_path: Path, emulator: Any) -> None:
    corpus, truth = make_corpus(tmp_path, count=80, seed=21)
    settings = settings_for(emulator, str(tmp_path / "store"), concurrency=16)
    est = estimate_source(str(corpus), "invoices", settings)
    assert est.integration is not None
    text = "\n".join(est.lines())
    assert "integration, full:" in text and "integration, incremental: unchanged source $0" in text

    assert f"thinking: {settings.api.model} thinks adaptively (effort low)" in text  # its cost is shown
    assert est.thinking_tokens == est.documents * THINKING_TOKENS_BY_EFFORT["low"]

    first = run_extract(
        RunParams(str(corpus), "invoices"), settings=settings, wiring=RunWiring(progress=False)
    )
    store = open_store(settings.store)
    totals = CostLedger(store, first["run_id"]).totals()
    spent = totals["by_pass"]
    assert 0.5 < est.integration.usd(est.documents) / spent["integration"] < 2
    assert totals["tokens"]["thinking_tokens"] >= est.thinking_tokens  # the bill has the thinking too
    # with earlier answers in the store the output is measured, not guessed: within 5 % of the bill
    again = estimate_source(str(corpus), "invoices", settings)
    assert again.measured_answers >= 20
    predicted = again.usd(batch=False) + again.integration.usd(again.documents)  # type: ignore[union-attr]
    assert predicted == pytest.approx(totals["usd"], rel=0.05)

    ok = next(t["doc_id"] for t in truth if t["record"] == "document" and t["doc_id"].endswith(".txt"))
    shutil.copy(corpus / ok, corpus / "new-one.txt")
    second = run_extract(
        RunParams(str(corpus), "invoices"), settings=settings, wiring=RunWiring(progress=False)
    )
    spent = CostLedger(store, second["run_id"]).totals()["by_pass"]
    assert 0.3 < est.integration.usd(1, incremental=True) / spent["integration"] < 3

"""`docmill estimate` (tasks/estimate.py) against what the emulator bills: below the model's minimum
cacheable length the per-file prefix is never cached, and the estimate assumes no cache reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints.costs import CostLedger
from checkpoints.store import open_store
from docmill.settings import ApiSettings, Settings
from flows.extract import run_extract
from tasks.estimate import estimate_source
from tests.flows.helpers import make_corpus


def test_prefix_below_the_cache_minimum_gets_no_reads_and_the_estimate_agrees(
    tmp_path: Path, emulator: Any
) -> None:
    corpus, _ = make_corpus(tmp_path, count=6, seed=4)
    settings = Settings(store=str(tmp_path / "store"), api=ApiSettings(base_url=emulator.base_url))
    est = estimate_source(str(corpus), "invoices", settings)
    assert 0 < est.prefix_tokens < est.cache_min_tokens == 2048  # Sonnet 4.6: the harsher 2,048
    assert est.cached_tokens == 0
    assert any("below claude-sonnet-4-6's minimum cacheable length" in line for line in est.lines())

    summary = run_extract(str(corpus), "invoices", settings=settings, progress=False)
    tokens = CostLedger(open_store(settings.store), summary["run_id"]).totals()["tokens"]
    assert tokens["cache_read_input_tokens"] == 0 and tokens["cache_creation_input_tokens"] == 0

    lower = {**settings.api.cache_min_tokens, "claude-sonnet-4-6": 100}
    cached = estimate_source(
        str(corpus), "invoices", Settings(api=ApiSettings(base_url=emulator.base_url, cache_min_tokens=lower))
    )
    assert cached.cached_tokens > 0 and cached.usd(batch=False) < est.usd(batch=False)

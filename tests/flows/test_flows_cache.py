"""Caching that pays (issue 22): a recipe whose stable per-file prefix (rules, instructions, worked
examples) passes the model's minimum is read from the cache after the first request; the bill shows
the cache reads, the ledger equals it, and the report says what the cache saved."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints.costs import CostLedger
from checkpoints.store import open_store
from docmill.settings import ApiSettings, BatchSettings, Settings
from flows.entry import RunWiring, run_extract
from flows.run.context import RunParams
from tests.fixtures.emulator import fast_batches
from tests.flows.helpers import make_corpus

RECIPE = f"{Path(__file__).parents[1] / 'fixtures' / 'recipes.py'}:cacheable_recipe"


def test_a_cacheable_recipe_reads_its_prefix_from_the_cache_and_the_report_says_what_it_saved(
    tmp_path: Path, emulator: Any
) -> None:
    corpus, _ = make_corpus(tmp_path, count=40, seed=7)
    settings = Settings(store=str(tmp_path / "store"), api=ApiSettings(base_url=emulator.base_url))
    summary = run_extract(RunParams(str(corpus), RECIPE), settings=settings, wiring=RunWiring(progress=False))
    store = open_store(settings.store)

    assert emulator.state.drain()
    billed = emulator.state.accounting.billed
    assert sum(int(b.usage.get("cache_read_input_tokens") or 0) for b in billed) > 20 * 3000  # in the bill
    totals = CostLedger(store, summary["run_id"]).totals()
    assert abs(totals["usd"] - emulator.state.accounting.total_usd()) < 1e-9
    assert totals["tokens"]["cache_read_input_tokens"] > 20 * 3000 and totals["cache_saved_usd"] > 0
    report = store.get(f"runs/{summary['run_id']}/report.md").decode()
    line = next(x for x in report.splitlines() if "prompt cache:" in x)
    assert f"saved ${totals['cache_saved_usd']:.4f} against the same requests uncached" in line
    assert 'id="cost-cache"' in store.get(f"runs/{summary['run_id']}/report.html").decode()


def test_batches_take_the_one_hour_ttl_only_when_the_prefix_is_cached_at_all(
    tmp_path: Path, emulator: Any
) -> None:
    """A batch runs for minutes to hours: a prefix that reaches the minimum is written with the 1-hour
    TTL (one write, read by every later item); a prefix below it keeps the 5-minute marker, which costs
    nothing (nothing is cached)."""
    fast_batches(emulator)
    emulator.state.configure({"record_requests": True})
    corpus, _ = make_corpus(tmp_path, count=12, seed=8)
    fast = BatchSettings(poll_seconds=0.02, poll_max_seconds=0.05)
    for recipe, ttl in ((RECIPE, "1h"), ("invoices", None)):
        settings = Settings(
            store=str(tmp_path / str(ttl)), api=ApiSettings(base_url=emulator.base_url), batch=fast
        )
        run_extract(
            RunParams(str(corpus), recipe, mode="batch"), settings=settings, wiring=RunWiring(progress=False)
        )
        creates = [r.body for r in emulator.state.accounting.requests if r.path == "/v1/messages/batches"]
        markers = {
            item["params"]["system"][0]["cache_control"].get("ttl") for item in creates[-1]["requests"]
        }
        assert markers == {ttl}
    items = [b for b in emulator.state.accounting.billed if b.batch]
    written_1h = sum(int(b.usage["cache_creation"]["ephemeral_1h_input_tokens"]) for b in items)
    assert written_1h > 3000 and sum(int(b.usage["cache_read_input_tokens"]) for b in items) > 3000

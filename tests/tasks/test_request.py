"""Golden idempotency keys: the key of one example document per built-in recipe, as computed before
tasks/ was reorganised (commit 9fc8072). A key that changes makes every stored result unreachable
and every document paid for again, so a move, rename or refactor must keep these exact values."""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from docmill.settings import Settings
from tasks.recipes import load_recipe
from tasks.request import file_key, file_params, recipe_parts
from tasks.source.inventory import inventory

ROOT = Path(__file__).resolve().parents[2]
INVOICE = (
    "INVOICE\nInvoice number: INV-0001\nInvoice date: 2026-01-02\nVendor: ACME Corp\nCurrency: EUR\n"
    "Subtotal: 1.00\nTax: 0.00\nTotal: 1.00\n"
)
GOLDEN = {
    "invoices": ("inv-0001.txt", "file_3hqnxzaplzqp4iy47hco4yoeodcfsixbemqwvb5vc6kbh72pyo"),
    "code-review": ("config.py", "file_mz53jlyyidwhgo7zfuqxgmbewyauwfycimlac5otvhmvgmhzy3"),
}


@pytest.mark.parametrize("recipe_name", sorted(GOLDEN))
def test_golden_idempotency_key(recipe_name: str, tmp_path: Path) -> None:
    (tmp_path / "inv-0001.txt").write_text(INVOICE)
    source = tmp_path if recipe_name == "invoices" else ROOT / "examples" / "codebase"
    settings = Settings(
        api={"model": "claude-sonnet-4-6", "max_tokens": 4096}, ANTHROPIC_API_KEY="sk-ant-test"
    )
    recipe = load_recipe(recipe_name)
    doc_id, golden = GOLDEN[recipe_name]
    doc = next(d for d in inventory(str(source), settings, doc_types=recipe.doc_types) if d.doc_id == doc_id)
    assert file_key(recipe, doc, settings.api.model, file_params(settings)) == golden
    # an emulator's answer (no API key) is never a ledger hit of a run on the API
    offline = settings.model_copy(update={"anthropic_api_key": None})
    assert offline.offline and not settings.offline
    assert file_key(recipe, doc, settings.api.model, file_params(offline)) != golden


def test_requests_built_at_once_on_threads_share_one_schema_object() -> None:
    """The batch pass builds requests on threads: each carries the one schema object (RepeatedJson
    then compares it by identity), never a copy made by a thread that raced the first."""
    recipe = dataclasses.replace(load_recipe("invoices"))  # a recipe object whose parts are not made yet
    start = threading.Barrier(8)

    def schema(_: int) -> int:
        start.wait()
        return id(recipe_parts(recipe).schema)

    with ThreadPoolExecutor(8) as pool:
        assert len(set(pool.map(schema, range(8)))) == 1

"""flows.run.small: what a run has left to send, counted before Prefect is started for it."""

from __future__ import annotations

from pathlib import Path

from checkpoints.ledger import ResultsLedger
from checkpoints.store import open_store
from docmill.settings import Settings
from flows.run.small import work_left
from tasks.recipes import load_recipe
from tasks.request import FILE_PASS, file_key, file_params
from tasks.source.inventory import inventory


def test_documents_without_a_result_are_counted_up_to_the_limit(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(4):
        (src / f"inv-{i}.txt").write_text(f"Invoice INV-{i} total {i}0.00 EUR\n")
    (src / "copy.txt").write_text("Invoice INV-0 total 00.00 EUR\n")  # a duplicate: no call of its own
    (src / "empty.txt").write_text("")  # skipped: no call
    settings = Settings(store=str(tmp_path / "store"))
    assert work_left(str(src), "invoices", settings, limit=100) == 4
    assert work_left(str(src), "invoices", settings, limit=2) == 2  # stops counting there
    assert work_left(str(src), "invoices", settings, limit=0) == 0
    assert not list(open_store(settings.store).list("sources/"))  # a look only: the run writes the cache

    recipe, ledger = load_recipe("invoices"), ResultsLedger(open_store(settings.store))
    for doc in inventory(str(src), settings, doc_types=recipe.doc_types):
        if doc.doc_id != "inv-3.txt" and doc.status == "ok" and not doc.duplicate_of:
            key = file_key(recipe, doc, str(settings.api.model), file_params(settings))
            ledger.put(FILE_PASS, key, {"doc_id": doc.doc_id, "output": {}})
    assert work_left(str(src), "invoices", settings, limit=100) == 1  # only inv-3 has no result
    other = Settings(store=str(tmp_path / "store"), api={"max_tokens": 1234})  # type: ignore[arg-type]
    assert work_left(str(src), "invoices", other, limit=100) == 4  # other call parameters: other keys

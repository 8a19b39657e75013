"""flows.run.small: what a run has left to send, counted before Prefect is started for it."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from checkpoints.ledger import ResultsLedger
from checkpoints.store import open_store
from docmill.settings import Settings, get_settings
from examples import formats as F
from flows.cli.main import main
from flows.run.continuation import source_id
from flows.run.small import work_left
from tasks.recipes import load_recipe
from tasks.request import FILE_PASS, file_key, file_params
from tasks.source.inventory import inventory
from tasks.source.known_files import known_files


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(4):
        (src / f"inv-{i}.txt").write_text(f"Invoice INV-{i} total {i}0.00 EUR\n")
    (src / "copy.txt").write_text("Invoice INV-0 total 00.00 EUR\n")  # a duplicate: no call of its own
    (src / "empty.txt").write_text("")  # skipped: no call
    return src


def test_a_source_never_inventoried_is_counted_from_its_listing(tmp_path: Path) -> None:
    src = _source(tmp_path)
    (src / "notes.xyz").write_text("a type the recipe does not take")
    settings = Settings(store=str(tmp_path / "store"))
    # nothing read: the duplicate and the empty file count too (an upper bound), a foreign type not
    assert work_left(str(src), "invoices", settings, limit=100) == 6
    assert work_left(str(src), "invoices", settings, limit=3) == 3
    # an e-mail's attachments are documents too: the message, each MIME boundary line and one more
    (src / "mail.eml").write_text("Subject: hi\n\na body of one part\n")
    assert work_left(str(src), "invoices", settings, limit=100) == 6 + 2
    inner = F.eml_bytes("fwd", "forwarded", [("b.txt", "text/plain", b"Invoice INV-9 total 9.00 EUR\n")])
    attached = [
        ("a.txt", "text/plain", b"Invoice INV-8 total 8.00 EUR\n"),
        ("f.eml", "message/rfc822", inner),
    ]
    (src / "mail.eml").write_bytes(
        F.eml_bytes("two attachments, one a message with its own", "see", attached)
    )
    counted = work_left(str(src), "invoices", settings, limit=100)
    made = [d for d in inventory(str(src), settings, doc_types=load_recipe("invoices").doc_types)]
    assert len(made) == 6 + 4 and len(made) <= counted < 100  # not the limit for any e-mail any more
    small = settings.model_copy(
        update={"inventory": settings.inventory.model_copy(update={"max_document_bytes": 64})}
    )
    assert work_left(str(src), "invoices", small, limit=100) == 100  # an e-mail too large to read: the limit


def test_documents_without_a_result_are_counted_up_to_the_limit(tmp_path: Path) -> None:
    src = _source(tmp_path)
    settings = Settings(store=str(tmp_path / "store"))
    recipe = load_recipe("invoices")
    store = open_store(settings.store)
    known = known_files(store, source_id(str(src)), settings, recipe.doc_types)
    assert list(inventory(str(src), settings, doc_types=recipe.doc_types, known=known))  # a run's inventory
    assert work_left(str(src), "invoices", settings, limit=100) == 4
    assert work_left(str(src), "invoices", settings, limit=2) == 2  # stops counting there
    assert work_left(str(src), "invoices", settings, limit=0) == 0
    cached = sorted(store.list("sources/"))
    assert work_left(str(src), "invoices", settings, limit=100) == 4
    assert sorted(store.list("sources/")) == cached  # a look only: the run writes the cache

    ledger = ResultsLedger(store)
    for doc in inventory(str(src), settings, doc_types=recipe.doc_types):
        if doc.doc_id != "inv-3.txt" and doc.status == "ok" and not doc.duplicate_of:
            key = file_key(recipe, doc, str(settings.api.model), file_params(settings))
            ledger.put(FILE_PASS, key, {"doc_id": doc.doc_id, "output": {}})
    assert work_left(str(src), "invoices", settings, limit=100) == 1  # only inv-3 has no result
    other = Settings(store=str(tmp_path / "store"), api={"max_tokens": 1234})  # type: ignore[arg-type]
    assert work_left(str(src), "invoices", other, limit=100) == 4  # other call parameters: other keys

    os.utime(src / "inv-1.txt", ns=(time.time_ns() + 10**10,) * 2)  # touched: hashed, still answered
    assert work_left(str(src), "invoices", settings, limit=100) == 1
    (src / "inv-2.txt").write_text("")  # changed: counted without being parsed (an upper bound)
    assert work_left(str(src), "invoices", settings, limit=100) == 2


def test_an_email_with_attachments_is_inventoried_to_count_them(tmp_path: Path) -> None:
    src = _source(tmp_path)
    (src / "mail.eml").write_bytes(
        F.eml_bytes(
            "invoices",
            "two attached",
            [(f"a{i}.txt", "text/plain", f"INV-A{i} 9.00 EUR".encode()) for i in range(2)],
        )
    )
    settings = Settings(store=str(tmp_path / "store"))
    recipe = load_recipe("invoices")
    known = known_files(open_store(settings.store), source_id(str(src)), settings, recipe.doc_types)
    assert list(inventory(str(src), settings, doc_types=recipe.doc_types, known=known))  # a run's inventory
    assert work_left(str(src), "invoices", settings, limit=100) == 7  # 4 invoices, the message, 2 attached
    assert work_left(str(src), "invoices", settings, limit=5) == 5


def test_a_new_source_with_few_files_runs_without_a_temporary_server(
    emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _source(tmp_path)
    for name in ("PREFECT_API_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DOCMILL_PREFECT_MIN_DOCUMENTS", "100")
    monkeypatch.setenv("DOCMILL_API__BASE_URL", emulator.base_url)
    monkeypatch.setenv("DOCMILL_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))
    get_settings.cache_clear()
    from prefect.settings import PREFECT_API_URL, temporary_settings

    # as a fresh process: no API URL in Prefect's settings (another test of this process may have
    # pointed them at its server, and a running server keeps every run on Prefect)
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        assert main(["--store", str(tmp_path / "store"), "run", str(src)]) == 0
    err = capsys.readouterr().err
    assert "at most 6 document(s) to send, fewer than prefect_min_documents (100)" in err, err
    assert emulator.state.accounting.received_by_path.get("/v1/messages", 0) >= 4

"""A nightly's report lists what changed: past settings.report_unchanged_rows, documents reused
unchanged from the ledger are counted but not listed (every document stays in the exports)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints.store.local import LocalStore
from tasks.reporting.exports import export_rows
from tasks.reporting.html import html_report
from tasks.reporting.markdown import markdown
from tasks.reporting.pages import report_pages
from tasks.reporting.results import listed

MANIFEST = {"run_id": "r1", "recipe": "invoices", "mode": "batch", "phase": "done", "source": "/src"}


def outcome(doc_id: str, *, state: str = "succeeded", from_ledger: bool = True) -> dict[str, Any]:
    return {
        "doc_id": doc_id,
        "state": state,
        "from_ledger": from_ledger,
        "output": {"invoice_number": {"value": doc_id.upper(), "evidence": doc_id.upper()}},
    }


def corpus() -> list[dict[str, Any]]:
    same = [outcome(f"old-{i}") for i in range(5)]
    return [*same, outcome("new-1", from_ledger=False), outcome("bad-1", state="failed", from_ledger=True)]


def test_unchanged_documents_are_counted_not_listed_past_the_limit() -> None:
    outs = corpus()
    shown, unlisted = listed(outs, 4)
    assert unlisted == 5 and [o["doc_id"] for o in shown] == ["new-1", "bad-1"]
    md = markdown(MANIFEST, outs, None, extra={"unlisted": unlisted}, listed=shown)
    page = html_report(MANIFEST, outs, None, {"usd": 0.0}, [], [], extra={"unlisted": unlisted}, listed=shown)
    for text in (md, page):
        assert "new-1" in text and "bad-1" in text and "old-0" not in text
        assert "5 documents unchanged since an earlier run" in text.replace("<b>5</b>", "5")
        assert "exports/results.csv" in text
    assert "| **total** | **7** |" in md and 'id="count-total">7<' in page
    assert len(export_rows(outs)) == 7  # the exports keep every document


def test_within_the_limit_every_document_is_listed() -> None:
    outs = corpus()
    shown, unlisted = listed(outs, 5)
    assert (shown, unlisted) == (outs, 0)
    md = markdown(MANIFEST, outs, None, extra={"unlisted": unlisted}, listed=shown)
    assert all(o["doc_id"] in md for o in outs) and "unchanged since an earlier run" not in md


class CountingStore(LocalStore):
    """The local backend, counting the inventory chunks read."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.reads = 0

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        self.reads += "/inventory/" in key
        return super().get_with_etag(key)


def test_a_report_listing_only_failures_reads_no_document(tmp_path: Path) -> None:
    """The pages section shows evidence: the failures and skips a nightly lists have none, so its
    report neither reads the inventory nor the documents; a listed result with evidence still does."""
    store = CountingStore(str(tmp_path / "store"))
    doc = {"doc_id": "new-1", "source_uri": (tmp_path / "new-1.txt").as_uri(), "doc_type": "txt"}
    doc |= {"sha256": "0" * 64, "size": 3, "status": "ok"}
    store.put_json("runs/r1/inventory/000000.json", [doc])
    failed = [{"doc_id": "bad-1", "state": "failed", "from_ledger": True}]
    assert report_pages(store, "r1", failed) == []
    assert store.reads == 0
    cited = outcome("new-1", from_ledger=False)
    cited["provenance"] = {"fields": {"$.invoice_number.evidence": {"start": 0, "end": 3}}}
    report_pages(store, "r1", [cited, *failed])
    assert store.reads == 1

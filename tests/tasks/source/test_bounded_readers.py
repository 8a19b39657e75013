"""Readers run bounded (invariant 19): hostile files generated small (examples/hostile.py) meet small
bounds (a 200 MiB address space, a 1.5 s deadline) so they trip fast; each gets `over_limit` naming
its limit, the worker is replaced and the next document reads as before. Zip members are inflated in
bounded chunks whatever the directory says; HTML is parsed in linear time. The full-size files, a
whole run and its peak memory: bench/hostile.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from docmill.settings import FormatSettings, Settings
from examples import formats as F
from examples import hostile as H
from tasks.source.inventory import inventory
from tasks.source.loading import load_content
from tasks.source.readers import Limits, Unreadable, read
from tasks.source.readers.bounded import IN_PROCESS_BYTES, Bounds, close_pools, pool_for, read_bounded
from tasks.source.readers.content import BinaryContent, ExtractError
from tests.fixtures.formats import invoice


@pytest.fixture(autouse=True)
def _stop_readers() -> Iterator[None]:
    """Reader processes started during a test end with it (the next read starts them again)."""
    yield
    close_pools()


def test_hostile_files_get_over_limit_with_their_limit_and_the_run_goes_on(tmp_path: Path) -> None:
    files = {
        "a-invoice.pdf": F.text_pdf([invoice(1)]),
        "flood.docx": H.paragraph_flood_docx(20 << 20),  # an lxml tree of ~450 MB
        "form-flood.pdf": H.form_flood_pdf(),  # minutes in pypdf and in pdfium
        "lying.docx": H.lying_zip_docx(inflated=400 << 20),
        "quadratic.html": H.quadratic_html(),
        "z-invoice.docx": F.docx_bytes(invoice(2)),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    settings = Settings(
        formats=FormatSettings(read_memory_bytes=200 << 20, read_seconds=1.5, read_processes=1)
    )
    started = time.monotonic()
    docs = {d.doc_id: d for d in inventory(str(tmp_path), settings)}
    elapsed = time.monotonic() - started
    outcome = {k: (d.skip_reason.value if d.skip_reason else d.status) for k, d in docs.items()}
    assert outcome == {
        "a-invoice.pdf": "ok",
        "flood.docx": "over_limit",
        "form-flood.pdf": "over_limit",
        "lying.docx": "corrupt",  # its member does not inflate to what the directory says (bounded read)
        "quadratic.html": "ok",  # read in linear time
        "z-invoice.docx": "ok",
    }
    assert "formats.read_memory_bytes (200 MiB)" in (docs["flood.docx"].skip_detail or "")
    # pdfium builds the 5,000 drawings in memory: past 200 MiB it aborts (the reader's peak tells that
    # death from a crash), or with more room it runs past the deadline; either limit is named
    flood = docs["form-flood.pdf"].skip_detail or ""
    assert (
        "formats.read_seconds (1.5 s of CPU time" in flood or "formats.read_memory_bytes (200 MiB)" in flood
    )
    assert elapsed < 30, elapsed
    # the per-file pass reads through the same bounded workers, replaced after each trip
    content, _ = load_content(docs["z-invoice.docx"], settings)
    assert "INV-2" in content.text or "Invoice" in content.text
    bounds = Bounds(200 << 20, 1.5, 1, True)
    assert pool_for(bounds).started >= 3  # the first worker, and one after each trip


def test_a_lying_zip_directory_inflates_nothing_past_the_checked_sizes() -> None:
    """300 MB behind a directory entry of 40 KB: zipfile's one-call inflate would take 300 MB (over
    this reader's 200 MiB); read in 1 MiB chunks it stops at the stated size, a CRC mismatch."""
    data = H.lying_zip_docx(inflated=300 << 20, claimed=40_000)
    with pytest.raises(Unreadable) as e:
        read_bounded("docx", data, Limits(), Bounds(memory_bytes=200 << 20, seconds=20, processes=1))
    assert e.value.reason == "corrupt" and "CRC" in str(e.value)


def test_quadratic_html_is_read_in_linear_time() -> None:
    started = time.monotonic()
    content = read("html", H.quadratic_html(360_000))
    assert content.text.startswith("Hostile page")
    assert time.monotonic() - started < 5  # Python 3.11's HTMLParser: minutes


def test_bounded_read_gives_the_same_content_and_reuses_its_worker() -> None:
    bounds = Bounds(memory_bytes=300 << 20, seconds=20, processes=1)
    pdf = F.text_pdf([invoice(3), invoice(4)])
    assert read_bounded("pdf", pdf, Limits(), bounds) == read("pdf", pdf)
    pool = pool_for(bounds)
    before = pool.started
    for i in range(5):
        assert read_bounded("txt", f"line {i}".encode(), Limits(), bounds).text == f"line {i}"
    with pytest.raises(Unreadable) as e:
        read_bounded("pdf", b"%PDF-1.7 broken", Limits(), bounds)
    assert e.value.reason == "corrupt"
    assert pool.started == before  # no process started per document


def test_a_small_utf8_text_is_read_in_process_and_everything_else_in_a_worker() -> None:
    bounds = Bounds(memory_bytes=300 << 20, seconds=21, processes=1)
    pool = pool_for(bounds)
    plain = {
        "txt": "Invoice INV-1 — total 12,00 €\n",
        "md": "# Rechnung\n",
        "csv": "a,b\n1,2\n",
        "py": "x = 1\n",
        "json": '{"total": 12.0, "currency": "€"}',
    }
    for doc_type, text in plain.items():
        assert read_bounded(doc_type, text.encode(), Limits(), bounds) == read(doc_type, text.encode())
    with pytest.raises(BinaryContent):  # what the worker would raise, raised here
        read_bounded("txt", b"bin\x00ary", Limits(), bounds)
    with pytest.raises(ExtractError, match="nested deeper"):  # the depth check before json's parser
        read_bounded("json", b"[" * 100_000, Limits(), bounds)
    assert pool.started == 0  # no reader process for any of them
    others = {
        "txt": "Müller, Straße".encode("cp1252"),  # charset-normalizer's guess
        "md": b"#" * (IN_PROCESS_BYTES + 1),  # larger than a decode worth doing here
        "html": b"<p>Invoice</p>",  # lxml's parser
    }
    for doc_type, data in others.items():
        assert read_bounded(doc_type, data, Limits(), bounds) == read(doc_type, data)
    assert pool.started == 1  # one worker, reused for each


CHILD = """
import os, sys, time
from tasks.source.readers import Limits
from tasks.source.readers.bounded import Bounds, pool_for, read_bounded
bounds = Bounds(memory_bytes=300 << 20, seconds=20, processes=1)
read_bounded("txt", "Müller".encode("cp1252"), Limits(), bounds)  # a charset guess: in a worker
print(pool_for(bounds).idle[0].proc.pid, flush=True)
time.sleep(60)
"""


def _gone(pid: int, within: float) -> bool:
    end = time.monotonic() + within
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.05)


def _as_a_terminal_starts_it() -> None:
    """SIGINT at its default and not blocked, whatever the test process inherited or changed
    (an ignored or blocked SIGINT is passed on to a child and its Ctrl-C would never arrive)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@pytest.mark.parametrize("how", ["ctrl-c", "sigkill"])
def test_workers_end_with_docmill(how: str) -> None:
    """A Ctrl-C to docmill's process group ends docmill and its workers (they ignore the SIGINT
    themselves and stop at exit); a docmill killed hard leaves none behind either."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_as_a_terminal_starts_it,
    )
    assert child.stdout is not None
    worker = int(child.stdout.readline())
    if how == "ctrl-c":
        os.killpg(child.pid, signal.SIGINT)
    else:
        child.kill()
    child.wait(30)  # a hang guard: it ends in about a second
    try:
        assert _gone(worker, 10), "the reader process outlived docmill"
    finally:
        if not _gone(worker, 0):
            os.kill(worker, signal.SIGKILL)

"""A run ends its own threads: a process that runs many (a worker, a notebook, a script that loops)
does not keep an event loop and its I/O threads per run until a collection happens to find them."""

from __future__ import annotations

import gc
import threading
from pathlib import Path
from typing import Any

from flows.entry import RunWiring, run_extract
from flows.run.context import RunParams
from tests.flows.helpers import make_corpus, settings_for


def run_threads() -> set[int]:
    return {t.ident or 0 for t in threading.enumerate() if t.name.startswith(("docmill-loop", "docmill-io"))}


def test_three_runs_in_one_process_leave_no_event_loop_thread_behind(tmp_path: Path, emulator: Any) -> None:
    corpus, _ = make_corpus(tmp_path, count=6, seed=5)
    before = run_threads()
    gc.disable()  # nothing is left to a collection: what the run does not close stays
    try:
        for n in range(3):
            settings = settings_for(emulator, str(tmp_path / f"store{n}"))
            summary = run_extract(
                RunParams(str(corpus), "invoices"), settings=settings, wiring=RunWiring(progress=False)
            )
            assert summary["phase"] == "done"
            assert run_threads() - before == set()
    finally:
        gc.enable()

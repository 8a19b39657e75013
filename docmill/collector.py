"""Python's cyclic garbage collector kept out of a pass's way (`relaxed_gc`).

A full collection walks every live object. In a docmill process that is Prefect, pydantic, the SDK
and everything a run has loaded before its pass: a single full collection measured 222 ms in the
middle of a realtime pass (every answer on the event loop waited for it), and full collections cost
~15 % of the batch driver's ingest CPU at 30,000 documents. While a pass runs:
- what existed before it is frozen (`gc.freeze`): a collection walks only what the pass made;
- young collections are rarer (`GC_YOUNG` allocations apart) and full ones much rarer (`GC_OLD`).
Objects are still freed by reference counting as ever; only cycles wait (at most until the pass ends).
Nested and concurrent uses (a batch pass inside the per-file pass, chunks on threads) share one
relaxation: the outermost restores the thresholds and unfreezes.

The `docmill` process also has rarer young collections outside its passes (`relax_process_gc`).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

GC_YOUNG, GC_OLD = 200_000, 1000  # allocations between young collections; full ones this much rarer
GC_PROCESS_YOUNG = 50_000  # the `docmill` process outside its passes (CPython's default: 700)
_lock = threading.Lock()
_depth = 0
_saved: tuple[int, ...] = ()


@contextmanager
def relaxed_gc() -> Iterator[None]:
    """Rare cyclic collections, and none over what existed before, while the block runs."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            gc.freeze()
            young, middle, old = _saved
            gc.set_threshold(max(young, GC_YOUNG), middle, max(old, GC_OLD))
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.set_threshold(*_saved)
                gc.unfreeze()


def relax_process_gc() -> None:
    """Fewer young cyclic-GC passes for the rest of the process (the `docmill` command only: an
    embedding program keeps its own). A run's decoded results (~300,000 containers per 10,000
    documents, without cycles) scanned again and again at the default threshold cost ~15% of an
    unchanged run's CPU. `relaxed_gc` builds on whatever thresholds it finds."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, GC_PROCESS_YOUNG), middle, old)

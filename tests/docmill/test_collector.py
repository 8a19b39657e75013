"""docmill.collector.relaxed_gc: what existed before a pass is frozen and collections are rarer while
it runs; nested and concurrent uses share one relaxation and the outermost puts everything back."""

from __future__ import annotations

import gc
import threading

from docmill.collector import GC_OLD, GC_YOUNG, relaxed_gc


def test_relaxed_gc_freezes_what_exists_and_restores_on_the_way_out() -> None:
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    with relaxed_gc():
        frozen = gc.get_freeze_count()
        assert frozen > 0  # the objects that existed: no collection walks them during the pass
        assert gc.get_threshold()[0] >= GC_YOUNG and gc.get_threshold()[2] >= GC_OLD
        with relaxed_gc():  # nested (a batch pass inside the per-file pass): one relaxation
            assert gc.get_freeze_count() > frozen // 2  # (frozen objects freed meanwhile leave it)
        assert gc.get_freeze_count() > frozen // 2  # the inner exit did not unfreeze
        cycle: list[object] = []
        cycle.append(cycle)
        del cycle
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_relaxed_gc_from_threads_at_once_restores_once() -> None:
    before = gc.get_threshold()
    inside = threading.Barrier(4)

    def run() -> None:
        with relaxed_gc():
            inside.wait(timeout=10)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0

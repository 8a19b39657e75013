"""The property tests are reproducible where the suite runs them: the same draws on every machine, and
a draw is not upset by another thread of the same pytest worker that uses the `random` module (a
Prefect server or client that an earlier test left running in the worker: its services and its
reconnects use `random` for their jitter)."""

from __future__ import annotations

import random
import threading

from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st


def test_the_ci_profile_draws_the_same_examples_everywhere() -> None:
    assert hsettings.default.derandomize is True
    assert hsettings.default.database is None  # derandomized: no example database either


def test_a_thread_using_random_does_not_make_a_draw_fail() -> None:
    stop = threading.Event()

    def jitter() -> None:  # what a background service's backoff does, as often as it can
        while not stop.is_set():
            random.uniform(0.0, 1.0)

    drawn: list[int] = []

    slow_ok = [HealthCheck.too_slow]  # the busy thread beside it slows the draws down

    @hsettings(max_examples=200, deadline=None, suppress_health_check=slow_ok)
    @given(st.lists(st.sampled_from(["a", "bb", "\n"]), max_size=50).map("".join))
    def prop(text: str) -> None:
        drawn.append(len(text))

    thread = threading.Thread(target=jitter, daemon=True)
    thread.start()
    try:
        prop()  # under the suite's warning filters (pyproject.toml): "error" for everything else
    finally:
        stop.set()
        thread.join()
    assert len(drawn) >= 100

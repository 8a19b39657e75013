"""Fixtures of the checkpoints tests: `store` runs each test on both backends."""

from __future__ import annotations

import pytest

from checkpoints.store import ObjectStore, open_store


class FakeClock:
    """The only thing these tests mock: time."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def store(store_uri: str) -> ObjectStore:
    return open_store(store_uri)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()

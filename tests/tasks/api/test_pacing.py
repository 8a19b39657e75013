"""Client-side limiter: token buckets on a fake clock, and reaction to the emulator's headers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from docmill.errors import BudgetExhausted
from docmill.settings import Settings
from tasks.api.client import ModelClient
from tasks.api.pacing import Budget, RateLimiter
from tests.fixtures.clock import FakeTime


def limiter(fake: FakeTime, rpm: int = 60, tpm: int = 6000) -> RateLimiter:
    return RateLimiter(rpm, tpm, clock=fake.clock, sleep=fake.sleep, wall=fake.wall)


def test_requests_per_minute_paces_after_the_burst() -> None:
    fake = FakeTime()
    lim = limiter(fake, rpm=60)
    for _ in range(60):
        assert lim.acquire(1) == 0.0
    assert lim.acquire(1) == pytest.approx(1.0)  # one request per second once the bucket is empty
    assert fake.sleeps == [pytest.approx(1.0)]


def test_input_tokens_per_minute_paces_big_requests() -> None:
    fake = FakeTime()
    lim = limiter(fake, rpm=1000, tpm=6000)
    lim.acquire(6000)
    waited = lim.acquire(3000)
    assert waited == pytest.approx(30.0)  # 3000 tokens at 100 tokens/s


def test_oversized_request_waits_for_a_full_bucket_not_forever() -> None:
    fake = FakeTime()
    lim = limiter(fake, rpm=1000, tpm=600)
    assert lim.acquire(10_000) == 0.0
    assert lim.acquire(10_000) == pytest.approx(60.0)


def test_pause_holds_everyone() -> None:
    fake = FakeTime()
    lim = limiter(fake)
    lim.pause(5.0)
    assert lim.acquire(1) == pytest.approx(5.0)
    assert lim.acquire(1) == 0.0


def test_remaining_zero_header_pauses_until_reset() -> None:
    fake = FakeTime()
    lim = limiter(fake)
    reset = datetime.fromtimestamp(fake.now + 12, tz=UTC).isoformat().replace("+00:00", "Z")
    lim.observe({"anthropic-ratelimit-requests-remaining": "0", "anthropic-ratelimit-requests-reset": reset})
    assert lim.paused_for == pytest.approx(12.0)
    lim.observe({"anthropic-ratelimit-requests-remaining": "5", "anthropic-ratelimit-requests-reset": reset})
    assert lim.paused_for == pytest.approx(12.0)  # remaining > 0 never shortens or adds a pause


def test_client_reacts_to_emulator_rate_limit_headers_without_a_429(emulator: Any) -> None:
    emulator.state.configure({"requests_per_minute": 2, "frozen_clock": True})
    fake = FakeTime(emulator)
    client = ModelClient(
        Settings(api={"backoff_max_seconds": 0.0}),
        base_url=emulator.base_url,
        api_key="test-key",
        clock=fake.clock,
        sleep=fake.sleep,
        wall=fake.wall,
    )
    req = {"model": "claude-sonnet-4-6", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(3):
        client.call(req, key="k", doc_id="d", pass_name="file")
    assert emulator.state.accounting.errors_by_status.get(429, 0) == 0
    assert len(client.limiter.waited) == 1 and client.limiter.waited[0] > 0
    assert len(emulator.state.accounting.billed) == 3


def test_budget_reserves_worst_case_and_settles_to_actual() -> None:
    import threading

    budget = Budget(1.0)
    a = budget.reserve(0.6)
    # 0.6 in flight + 0.5 would pass the cap, but only in-flight work stands in the way: it waits
    settle = threading.Timer(0.2, lambda: budget.settle(a, 0.1))
    settle.start()
    b = budget.reserve(0.5)
    settle.join()
    assert budget.spent_usd == pytest.approx(0.1) and budget.reserved_usd == pytest.approx(0.5)
    budget.settle(b, 0.85)
    with pytest.raises(BudgetExhausted):
        budget.reserve(0.1)  # what is spent (0.95) leaves no room: refused at once
    assert Budget(None).reserve(1e9) == 1e9  # no cap

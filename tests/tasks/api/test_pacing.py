"""Client-side pacer on a fake clock: it adopts the server's limits, refills continuously (never waits
for a full reset), ramps, counts output tokens, and sizes the in-flight window; plus the cost cap."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from docmill.errors import BudgetExhausted
from docmill.settings import Settings
from tasks.api.aio import Changes, Gate, loop_sleep
from tasks.api.budget import Budget
from tasks.api.client import ModelClient
from tasks.api.pacing import RateLimiter, Ticket
from tests.fixtures.clock import FakeTime


def limiter(fake: FakeTime, rpm: int = 4000, tpm: int = 2_000_000, **kw: Any) -> RateLimiter:
    kw.setdefault("ramp_seconds", 0.0)
    return RateLimiter(rpm, tpm, clock=fake.clock, **kw)


def admit(lim: RateLimiter, fake: FakeTime, tokens: int, max_tokens: int = 0) -> Ticket:
    """A request admitted as the client's event loop admits one (tasks.api.aio.Gate), its waits
    slept on the fake clock: `ticket.waited` and `lim.stats.waits` say how long it waited."""
    gate = Gate(lim, Changes(), loop_sleep(fake.sleep), lambda: None)
    return asyncio.run(gate.acquire(tokens, max_tokens))


def headers(fake: FakeTime, kind: str, limit: int, remaining: int, reset_in: float = 60.0) -> dict[str, str]:
    reset = datetime.fromtimestamp(fake.now + reset_in, tz=UTC).isoformat().replace("+00:00", "Z")
    return {
        f"anthropic-ratelimit-{kind}-limit": str(limit),
        f"anthropic-ratelimit-{kind}-remaining": str(remaining),
        f"anthropic-ratelimit-{kind}-reset": reset,
    }


def sent_in(fake: FakeTime, lim: RateLimiter, seconds: float, tokens: int = 1) -> int:
    """Requests admitted (and answered at once) in the next `seconds` of fake time."""
    end, n = fake.now + seconds, 0
    while True:
        ticket = admit(lim, fake, tokens)
        lim.release(ticket, usage={"input_tokens": tokens})
        if fake.now > end:
            return n
        n += 1


def test_adopts_the_servers_request_limit_from_headers() -> None:
    fake = FakeTime()
    lim = limiter(fake, rpm=4000)  # the configured guess is far above the account's limit
    lim.release(admit(lim, fake, 1), headers=headers(fake, "requests", 60, 59))
    assert lim.limits["requests"] == 60
    assert sent_in(fake, lim, 60.0) == pytest.approx(60, abs=3)  # 60/min, not 4,000


def test_adopts_a_higher_limit_too() -> None:
    fake = FakeTime()
    lim = limiter(fake, rpm=60)
    lim.release(admit(lim, fake, 1), headers=headers(fake, "requests", 600, 599))
    assert sent_in(fake, lim, 10.0) == pytest.approx(100, abs=3)


def test_remaining_zero_refills_continuously_never_waits_for_the_reset() -> None:
    fake = FakeTime()
    lim = limiter(fake)
    lim.release(admit(lim, fake, 1), headers=headers(fake, "requests", 60, 0, reset_in=60.0))
    ticket = admit(lim, fake, 1)
    assert 0 < ticket.waited < 2.0  # one request's refill (1 s at 60/min) plus the margin, not 60 s
    assert max(fake.sleeps) < 2.0
    # and from then on one request per second: the bucket's refill rate, no stall at any dip to zero
    lim.release(ticket, headers=headers(fake, "requests", 60, 0))
    assert sent_in(fake, lim, 30.0) == pytest.approx(30, abs=2)


def test_remaining_counts_what_is_still_in_flight() -> None:
    fake = FakeTime()
    lim = limiter(fake, rpm=6000, concurrency=64)
    lim.latency = 10.0  # (a window wide enough for the requests held below)
    for _ in range(5):
        admit(lim, fake, 1)
    # the server has counted none of the 5 yet: its remaining 70 leaves 65, 5 above the 1 % margin
    lim.observe(headers(fake, "requests", 6000, 70))
    assert [admit(lim, fake, 1).waited for _ in range(5)] == [0.0] * 5
    assert admit(lim, fake, 1).waited > 0


def test_input_tokens_limit_is_adopted_and_estimates_are_corrected_from_usage() -> None:
    fake = FakeTime()
    lim = limiter(fake, tpm=10_000_000)
    ticket = admit(lim, fake, 1000)
    lim.release(ticket, usage={"input_tokens": 2000}, headers=headers(fake, "input-tokens", 60_000, 58_000))
    assert lim.limits["input-tokens"] == 60_000
    assert admit(lim, fake, 1000).input_tokens > 1000  # the estimate learnt that answers bill more
    for _ in range(20):
        lim.release(admit(lim, fake, 1000), usage={"input_tokens": 2000})
    assert admit(lim, fake, 1000).input_tokens == pytest.approx(2000, rel=0.05)


def test_an_oversized_request_waits_for_a_full_bucket_not_forever() -> None:
    fake = FakeTime()
    lim = limiter(fake, tpm=600)
    lim.release(admit(lim, fake, 10_000), headers=headers(fake, "input-tokens", 600, 0))
    assert admit(lim, fake, 10_000).waited == pytest.approx(60.0, abs=1.0)  # one full refill, then it goes


def test_the_estimate_correction_converges_with_many_requests_in_flight() -> None:
    fake = FakeTime()
    lim = limiter(fake, concurrency=64)
    lim.latency = 10.0  # (a window wide enough for 20 requests in flight)
    held = [admit(lim, fake, 1000) for _ in range(20)]  # all estimated before any answer
    for t in held:  # each billed a tenth of its estimate: the ratio must settle at 0.1, not run away
        lim.release(t, usage={"input_tokens": 60, "cache_creation_input_tokens": 40})
    assert admit(lim, fake, 1000).input_tokens == pytest.approx(100, rel=0.15)  # EWMA: 0.1 + 0.9 x 0.8^20


@pytest.mark.parametrize("counts_reads", [False, True])
def test_cache_reads_do_not_count_against_the_input_limit(counts_reads: bool) -> None:
    """Current models do not count cache reads against the input-token limit: a request whose prefix
    is read from the cache takes only its uncached part (and its cache writes) from the bucket."""
    fake = FakeTime()
    lim = limiter(fake, counts_cache_reads=counts_reads)
    lim.observe(headers(fake, "input-tokens", 60_000, 60_000))
    start, sent = fake.now, 0
    while fake.now - start < 60.0:  # 3,000-token requests, 2,800 of them read from the cache
        lim.release(admit(lim, fake, 3000), usage={"input_tokens": 200, "cache_read_input_tokens": 2800})
        sent += 1
    if counts_reads:
        assert sent <= 2 * 60_000 / 3000  # 3,000 counted tokens each: about 20 a minute
    else:
        assert sent > 5 * 60_000 / 3000  # 200 counted tokens each: many times more
        assert admit(lim, fake, 3000).input_tokens == pytest.approx(200, rel=0.05)


def test_output_tokens_held_at_what_answers_use_while_max_tokens_must_fit() -> None:
    """Holding max_tokens (4,096) per request while answers use ~270 capped a tier-4 run at ~0.7 of its
    input limit (issue 23): a request in flight holds 1.5 x the mean billed output (+64), max_tokens
    only before the first answer; it goes only while its whole max_tokens fits in the bucket."""
    fake = FakeTime()
    lim = limiter(fake)
    lim.observe(headers(fake, "output-tokens", 8000, 8000))
    lim.latency = 100.0  # (a window wide enough for every request below)
    bucket = lim._kinds["output-tokens"].server
    a, b = lim.try_acquire(10, max_tokens=3000), lim.try_acquire(10, max_tokens=3000)
    assert isinstance(a, Ticket) and isinstance(b, Ticket)
    assert a.output_tokens == b.output_tokens == 3000  # nothing answered yet: the whole max_tokens
    assert lim.try_acquire(10, max_tokens=3000) > 0  # 6,000 held: 3,000 more do not fit in 8,000 - 80
    lim.release(a, usage={"input_tokens": 10, "output_tokens": 100})  # 2,900 given back each
    lim.release(b, usage={"input_tokens": 10, "output_tokens": 100})
    before = bucket.level
    c = lim.try_acquire(10, max_tokens=3000)
    assert isinstance(c, Ticket) and c.output_tokens == 214  # 1.5 x 100 + 64
    assert before - bucket.level == pytest.approx(214)  # held: what answers use, not max_tokens
    bucket.level = 3000.0  # a bucket with room for the hold but not for max_tokens and the margin
    assert lim.try_acquire(10, max_tokens=3000) > 0


def test_output_is_paced_at_the_mean_billed_output() -> None:
    """With answers of 100 output tokens and 6,000 output tokens/min, 60 requests/min go, not the
    bucket's whole minute at once."""
    fake = FakeTime()
    lim = limiter(fake)
    lim.observe(headers(fake, "output-tokens", 6000, 6000))
    lim.latency = 100.0
    lim.release(admit(lim, fake, 10, max_tokens=500), usage={"input_tokens": 10, "output_tokens": 100})
    end, n = fake.now + 10.0, 0
    while fake.now <= end:
        ticket = admit(lim, fake, 10, max_tokens=500)
        lim.release(ticket, usage={"input_tokens": 10, "output_tokens": 100})
        n += 1
    assert n == pytest.approx(10 + 2, abs=2)  # 1/s for 10 s, after 2 s of burst


def test_starts_conservatively_and_ramps_to_the_limit() -> None:
    fake = FakeTime()
    lim = limiter(fake, rpm=600, ramp_seconds=20.0, ramp_start=0.25)
    lim.observe(headers(fake, "requests", 600, 600))
    first = sent_in(fake, lim, 4.0)
    sent_in(fake, lim, 20.0)
    steady = sent_in(fake, lim, 4.0)
    assert first < 0.5 * steady  # ~2.5-4/s at first, 10/s once ramped
    assert steady == pytest.approx(40, abs=3)


def test_a_429_backs_the_ramp_off_once_not_per_answer() -> None:
    fake = FakeTime()
    lim = limiter(fake, rpm=600, ramp_seconds=20.0, ramp_start=1.0)
    lim.observe(headers(fake, "requests", 600, 600))
    tickets = [admit(lim, fake, 1) for _ in range(4)]
    assert lim.ramp(fake.now) == 1.0
    for t in tickets:  # four answers of one moment, all 429
        lim.release(t, throttled=True)
    assert lim.ramp(fake.now) == pytest.approx(0.5)
    assert lim.stats.throttled == 4


def test_in_flight_window_is_littles_law_over_the_tightest_limit() -> None:
    fake = FakeTime()
    lim = limiter(fake, rpm=4000, tpm=2_000_000)
    assert lim.window == 16  # nothing sent yet: a start
    ticket = admit(lim, fake, 1000, max_tokens=1000)
    fake.now += 1.0
    assert lim.window == 54  # no answer yet, but answers take at least 1 s: 33.3/s x 1 s x 1.5 + 4
    fake.now += 1.0
    lim.release(ticket, usage={"input_tokens": 1000, "output_tokens": 200})
    # 2,000,000 input tokens/min at 1,000 a request admit 33.3/s (4,000 requests/min 66.7/s):
    # 33.3/s x 2 s x 1.5 + 4
    assert lim.window == 104
    lim.observe(headers(fake, "output-tokens", 60_000, 60_000))  # 5/s at 200 output tokens a request
    assert lim.window == 19  # 5/s x 2 s x 1.5 + 4: the tightest limit decides
    capped = limiter(fake, rpm=4000, tpm=2_000_000, concurrency=64)
    capped.release(admit(capped, fake, 1000), usage={"input_tokens": 1000})
    capped.latency = 100.0
    assert capped.window == 64  # never above api.concurrency when it is given


def test_requests_in_flight_pass_what_was_declared_only_once_it_is_recorded() -> None:
    """checkpoints.inflight counts at most what a killed process declared in flight: a request that
    would pass it goes only after the new figure is recorded (a few writes), and not when that fails."""
    fake = FakeTime()
    lim = limiter(fake, rpm=4000, tpm=2_000_000)
    declared: list[int] = []
    lim.declare_to("run-1", declared.append)
    held = [admit(lim, fake, 10) for _ in range(12)]
    assert declared == [4, 5, 6, 7, 8, 9, 11, 13]  # ahead of the 12 in flight, growing by 1/8
    fake.now += 1.0  # answers take a second: the window stays wide
    for ticket in held:
        lim.release(ticket, usage={"input_tokens": 10})
    held = [admit(lim, fake, 10) for _ in range(12)]
    assert declared[-1] == 13 and len(declared) == 8  # as many again: nothing new to write
    refused = limiter(fake, rpm=4000, tpm=2_000_000)

    def fail(n: int) -> None:
        raise OSError("store down")

    refused.declare_to("run-1", fail)
    assert refused.try_acquire(10) == pytest.approx(1.0)  # not sent: asked again later
    refused.declare_to("run-2", declared.append)  # a new owner declares anew
    assert isinstance(refused.try_acquire(10), Ticket) and declared[-1] == 4


def test_a_share_of_the_limits_set_from_outside_at_runtime() -> None:
    """A pacer shared across workers hands each process a share of the organisation's limits."""
    fake = FakeTime()
    lim = limiter(fake, rpm=600)
    lim.observe(headers(fake, "requests", 600, 600))
    lim.set_share(0.5)
    assert lim.limits["requests"] == 300
    assert sent_in(fake, lim, 10.0) == pytest.approx(60, abs=3)  # half of 10/s, after 2 s of burst
    lim.observe(headers(fake, "requests", 1200, 1200))  # the adopted limit is shared too
    assert lim.limits["requests"] == 600
    lim.set_share(1.0)
    assert sent_in(fake, lim, 10.0) == pytest.approx(200, abs=25)  # all of 20/s (and the bucket's fill)
    with pytest.raises(ValueError):
        lim.set_share(0)
    lim.set_share(1.0000001)  # a sum of fair shares a hair above 1 is all of it
    assert lim.limits["requests"] == pytest.approx(1200)


def test_client_adopts_emulator_limits_without_a_429(emulator: Any) -> None:
    emulator.state.configure({"requests_per_minute": 2, "frozen_clock": True})
    fake = FakeTime(emulator)
    client = ModelClient(
        Settings(api={"backoff_max_seconds": 0.0, "ramp_seconds": 0.0}),
        base_url=emulator.base_url,
        api_key="test-key",
        clock=fake.clock,
        sleep=fake.sleep,
    )
    req = {"model": "claude-sonnet-4-6", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(3):
        client.call(req, key="k", doc_id="d", pass_name="file")
    assert emulator.state.accounting.errors_by_status.get(429, 0) == 0
    assert client.limiter.limits["requests"] == 2
    assert 30.0 <= sum(client.limiter.stats.waits) < 35.0  # one request's refill at 2/min, no reset stall
    assert len(emulator.state.accounting.billed) == 3


def test_budget_reserves_worst_case_and_settles_to_actual() -> None:
    budget = Budget(1.0)
    a = budget.try_reserve(0.6)
    assert a == 0.6
    # 0.6 in flight + 0.5 would pass the cap, but only in-flight work stands in the way: wait (None),
    # and the event loop asks again after an answer settles (tasks.api.client.AsyncModelClient)
    assert budget.try_reserve(0.5) is None
    budget.settle(a, 0.1)
    b = budget.try_reserve(0.5)
    assert b == 0.5
    assert budget.spent_usd == pytest.approx(0.1) and budget.reserved_usd == pytest.approx(0.5)
    budget.settle(b, 0.85)
    with pytest.raises(BudgetExhausted):
        budget.try_reserve(0.1)  # what is spent (0.95) leaves no room: refused at once
    assert Budget(None).try_reserve(1e9) == 1e9  # no cap

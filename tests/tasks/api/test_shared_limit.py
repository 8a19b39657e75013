"""The organisation's rate limit shared through the store (checkpoints.limits, tasks.api.shared_limit):
the split, leases that give a dead member's share back, limits stated by headers reaching every
member, and three real clients against one emulator keeping together to its limit."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpoints.limits import MIN_WANT, LimitPool, fair_shares
from checkpoints.store import open_store
from docmill.settings import Settings
from tasks.api.client import ModelClient
from tasks.api.pacing import RateLimiter
from tasks.api.shared_limit import DEFAULT_BASE_URL, SharedLimit, scope_for
from tests.fixtures.clock import FakeTime

wants = st.dictionaries(st.text(min_size=1, max_size=4), st.none() | st.floats(0, 1), min_size=1, max_size=8)


@given(wants)
def test_fair_shares_split_the_whole_limit_and_never_less_than_asked_or_equal(
    w: dict[str, float | None],
) -> None:
    shares = fair_shares(w)
    assert set(shares) == set(w)
    assert sum(shares.values()) == pytest.approx(1.0)  # never more than the limit, nothing left idle
    equal = 1.0 / len(w)
    for h, want in w.items():
        assert shares[h] >= min(max(want if want is not None else 1.0, MIN_WANT), equal) - 1e-9


def test_fair_shares_give_what_a_quiet_member_leaves_to_the_busy_ones() -> None:
    assert fair_shares({"a": None, "b": None, "c": None}) == pytest.approx(
        {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}
    )
    assert fair_shares({"a": None, "b": None, "quiet": 0.1}) == pytest.approx(
        {"a": 0.45, "b": 0.45, "quiet": 0.1}
    )
    assert fair_shares({"a": 0.2, "b": 0.1}) == pytest.approx({"a": 0.55, "b": 0.45})  # leftover shared out


def test_pool_a_dead_member_gives_its_share_back_within_one_lease(tmp_path: Path) -> None:
    clock = FakeTime()
    pool = LimitPool(open_store(tmp_path), "org", clock=clock.clock)
    assert pool.renew("a", {"want": None}, lease_seconds=15)[0] == pytest.approx(1.0)
    assert pool.renew("b", {"want": None}, lease_seconds=15)[0] == pytest.approx(0.5)
    clock.sleep(10)
    assert pool.renew("a", {"want": None}, lease_seconds=15)[0] == pytest.approx(0.5)  # b still counts
    clock.sleep(6)  # b has not renewed for 16 s: its lease (15 s) ran out
    share, record = pool.renew("a", {"want": None}, lease_seconds=15)
    assert share == pytest.approx(1.0) and set(record["members"]) == {"a"}
    pool.leave("a")
    assert pool.read()["members"] == {}


def test_members_apply_their_share_and_adopt_limits_another_member_saw(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    a_lim = RateLimiter(600, 1_000_000, ramp_seconds=0)
    b_lim = RateLimiter(4000, 1_000_000, ramp_seconds=0)  # a guess, not what the API says
    a = SharedLimit(LimitPool(store, "org"), a_lim, "a", lease_seconds=15)
    b = SharedLimit(LimitPool(store, "org"), b_lim, "b", lease_seconds=15)
    a_lim.observe(
        {"anthropic-ratelimit-requests-limit": "500", "anthropic-ratelimit-requests-remaining": "500"}
    )
    assert a.renew() == pytest.approx(1.0) and a_lim.limits["requests"] == pytest.approx(500)
    assert b.renew() == pytest.approx(0.5)  # joins: half, and the limit a's headers stated
    assert b_lim.stats.adopted["requests"] == 500 and b_lim.limits["requests"] == pytest.approx(250)
    a.renew()
    assert a_lim.limits["requests"] == pytest.approx(250)
    # headers count the whole organisation: `remaining` is scaled to this member's share
    a_lim.observe(
        {"anthropic-ratelimit-requests-limit": "500", "anthropic-ratelimit-requests-remaining": "100"}
    )
    assert a_lim._kinds["requests"].server.level == pytest.approx(50)  # type: ignore[union-attr]
    b.stop()
    assert a.renew() == pytest.approx(1.0) and a_lim.limits["requests"] == pytest.approx(500)


def test_scope_is_per_endpoint_and_not_shared_with_the_built_in_emulator() -> None:
    assert scope_for("org", None, builtin=True) is None
    assert scope_for("org", "http://a:1", builtin=False) != scope_for("org", "http://b:1", builtin=False)
    # no base URL is the SDK's default endpoint (a trailing slash does not matter)
    assert scope_for("org", None, builtin=False) == scope_for("org", DEFAULT_BASE_URL + "/", builtin=False)


def _request() -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-6",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "Say ok."}],
    }


def test_three_clients_sharing_the_limit_send_at_it_together(emulator: Any, tmp_path: Path) -> None:
    """Three processes' worth of clients (each its own pacer) against one emulator at 600 requests/min,
    sending as fast as their pacers let them for 8 s: together they send at the limit, not three times
    it, and the emulator answers none of them 429."""
    emulator.state.configure({"requests_per_minute": 600, "latency_ms": 50})
    store = open_store(tmp_path)
    settings = Settings(
        api={"concurrency": 8, "ramp_seconds": 0, "requests_per_minute": 600, "backoff_max_seconds": 0}
    )
    clients = [ModelClient(settings, base_url=emulator.base_url, api_key="k") for _ in range(3)]
    members = [
        SharedLimit(LimitPool(store, "org"), c.limiter, f"m{i}", lease_seconds=1.5).start()
        for i, c in enumerate(clients)
    ]
    stop = time.monotonic() + 8.0
    errors: list[BaseException] = []

    def send(client: ModelClient, n: int) -> None:
        i = 0
        while time.monotonic() < stop:
            i += 1
            try:
                client.call(_request(), key=f"k{n}-{i}", doc_id=f"d{n}-{i}", pass_name="probe")
            except BaseException as e:  # counted below
                errors.append(e)

    threads = [
        threading.Thread(target=send, args=(c, j * 10 + k)) for j, c in enumerate(clients) for k in range(8)
    ]
    t0 = emulator.state.clock.now()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    shares = {round(m.share, 2) for m in members}  # before any leaves: the others then share anew
    for m in members:
        m.stop()
    billed = [b for b in emulator.state.accounting.billed if b.at >= t0 + 2.0]  # after the first 2 s
    span = max(b.at for b in billed) - (t0 + 2.0)
    rate = len(billed) / span * 60.0
    assert not errors, errors[:3]
    assert emulator.state.accounting.errors_by_status.get(429, 0) == 0
    assert 0.85 * 600 <= rate <= 1.05 * 600, rate  # unshared, each would pace at 600: ~1,800
    assert shares <= {0.33, 0.34}, shares

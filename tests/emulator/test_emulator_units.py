"""Properties of the token counter, prompt cache and fault plan; the CLI's argument handling."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator import cli, tokens
from emulator.caching import PromptCache
from emulator.compaction import sign, verify
from emulator.faults import FaultPlan
from emulator.schema_hints import as_date
from emulator.validation import ApiError

MODEL = "claude-sonnet-4-6"
texts = st.text(min_size=1, max_size=3000)


def _body(system: str, turns: list[str], cached: bool) -> dict:
    sys_block: dict = {"type": "text", "text": system}
    if cached:
        sys_block["cache_control"] = {"type": "ephemeral"}
    return {
        "model": MODEL,
        "max_tokens": 10,
        "system": [sys_block],
        "messages": [{"role": "user", "content": t} for t in turns],
    }


@given(system=texts, turns=st.lists(texts, min_size=1, max_size=4), extra=texts)
@settings(max_examples=60, deadline=None)
def test_count_is_deterministic_and_grows_with_content(system: str, turns: list[str], extra: str) -> None:
    body = _body(system, turns, cached=False)
    assert tokens.count_tokens(body) == tokens.count_tokens(_body(system, list(turns), cached=False))
    longer = _body(system, [*turns, extra], cached=False)
    assert tokens.count_tokens(longer) > tokens.count_tokens(body)
    assert tokens.count_tokens(_body(system, turns, cached=True)) == tokens.count_tokens(body)


@given(system=texts, turns=st.lists(texts, min_size=1, max_size=3), min_tokens=st.integers(0, 800))
@settings(max_examples=60, deadline=None)
def test_cache_usage_always_adds_up_to_the_count(system: str, turns: list[str], min_tokens: int) -> None:
    cache = PromptCache()
    body = _body(system, turns, cached=True)
    total = tokens.count_tokens(body)
    segs = tokens.segments(body)
    first = cache.apply(
        scope="k",
        model=MODEL,
        segments=segs,
        total_tokens=total,
        top_level=None,
        now=0.0,
        min_tokens=min_tokens,
    )
    second = cache.apply(
        scope="k",
        model=MODEL,
        segments=segs,
        total_tokens=total,
        top_level=None,
        now=1.0,
        min_tokens=min_tokens,
    )
    for usage in (first, second):
        assert usage.read + usage.write + usage.uncached == total
    assert second.read == first.write and second.write == 0
    other = cache.apply(
        scope="other",
        model=MODEL,
        segments=segs,
        total_tokens=total,
        top_level=None,
        now=1.0,
        min_tokens=min_tokens,
    )
    assert other.read == 0  # caches are isolated per API key


@given(content=st.text(min_size=1, max_size=500), edit=st.text(min_size=1, max_size=5))
@settings(max_examples=60, deadline=None)
def test_compaction_signature_detects_any_edit(content: str, edit: str) -> None:
    block = {
        "type": "compaction",
        "content": content,
        "signature": sign("s", content),
        "encrypted_content": None,
    }
    verify("s", block, "m")
    with pytest.raises(ApiError) as info:
        verify("s", {**block, "content": content + edit}, "m")
    assert info.value.error_code == "compaction_content_mismatch"
    with pytest.raises(ApiError) as info:
        verify("other-secret", block, "m")
    assert info.value.error_code == "compaction_signature_invalid"


def test_fault_counts_are_consumed_and_rules_dropped() -> None:
    plan = FaultPlan(seed=1)
    plan.add(kind="overloaded", count=2)
    plan.add(kind="latency", latency_ms=5, path="/v1/messages*")
    hits = [plan.for_http("/v1/messages", {"x": 1}) for _ in range(3)]
    assert [h.error is not None for h in hits] == [True, True, False]
    assert all(h.latency_ms == 5 for h in hits)
    assert len(plan.rules) == 1
    assert plan.for_http("/v1/messages/batches", {}).error is None


def test_cli_help_and_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "--port" in out and "fault rules" in out and "DOCMILL_EMULATOR_" in out
    assert cli.main(["--fault", '{"kind": "nope"}']) == 2
    assert "bad option" in capsys.readouterr().err


def test_virtual_clock_speed_and_freeze_change_without_jumps() -> None:
    from emulator.clock import VirtualClock

    clock = VirtualClock(frozen=True, start=1000.0)
    assert clock.now() == 1000.0
    clock.advance(5)
    assert clock.now() == 1005.0
    clock.set_rate(frozen=False, speed=3600.0)
    t0 = clock.now()
    import time

    time.sleep(0.01)
    assert clock.now() - t0 >= 36.0  # an hour a second
    clock.set_rate(frozen=True, speed=1.0)
    t1 = clock.now()
    assert clock.now() == t1 and t1 >= t0 + 36.0


def test_a_date_field_answers_an_email_date_header_in_iso() -> None:
    """Asked for YYYY-MM-DD, a model turns an e-mail's `Date:` header into an ISO date; the emulator
    does too (it used to copy the header verbatim, which the gate rightly refuses in a date field)."""
    assert as_date("Mon, 05 Jan 2026 09:00:00 +0000", "iso-if-date") == "2026-01-05"
    assert as_date("not a date at all", "iso-if-date") == "not a date at all"

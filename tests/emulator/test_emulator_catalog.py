"""Model ids as the API treats them (emulator/catalog.py, on docmill's model table): dated ids in
answers, retirement on the emulator's day, per-model cache minimums; through the real SDK."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anthropic
import pytest

from emulator import catalog
from emulator.server import EmulatorServer
from tests.fixtures.emulator import pass_batch_time, sdk_client

ASK: list = [{"role": "user", "content": "Vendor: ACME\nTotal: 3 EUR"}]


def test_aliases_resolve_to_the_dated_ids_of_the_table() -> None:
    aliases = catalog.dated_aliases()
    assert aliases["claude-haiku-4-5"] == "claude-haiku-4-5-20251001"
    assert "claude-sonnet-4-6" not in aliases  # 4.6 and later have no dated form
    assert catalog.price_id("claude-haiku-4-5-20251001") == "claude-haiku-4-5"


def test_pre_46_alias_answers_with_dated_id_realtime_and_batch(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    msg = client.messages.create(model="claude-haiku-4-5", max_tokens=50, messages=ASK)
    assert msg.model == "claude-haiku-4-5-20251001"
    assert client.messages.create(model="claude-sonnet-4-6", max_tokens=50, messages=ASK).model == (
        "claude-sonnet-4-6"
    )
    params = {"model": "claude-haiku-4-5", "max_tokens": 50, "messages": ASK}
    batch = client.messages.batches.create(requests=[{"custom_id": "a", "params": params}])  # type: ignore[misc]
    pass_batch_time(emulator)
    (result,) = list(client.messages.batches.results(batch.id))
    assert result.result.type == "succeeded" and result.result.message.model == "claude-haiku-4-5-20251001"
    # the emulator bills a dated id at its alias's price; a dated id may also be asked for directly
    dated = client.messages.create(model="claude-haiku-4-5-20251001", max_tokens=50, messages=ASK)
    billed = emulator.state.accounting.billed
    assert billed[-1].usd == pytest.approx(billed[0].usd) and dated.model == "claude-haiku-4-5-20251001"


def test_alias_resolution_is_a_knob(emulator: EmulatorServer) -> None:
    emulator.state.configure({"resolve_aliases": False})
    msg = sdk_client(emulator).messages.create(model="claude-haiku-4-5", max_tokens=50, messages=ASK)
    assert msg.model == "claude-haiku-4-5"


def test_model_retires_on_its_end_of_life_by_the_emulator_clock(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    now = emulator.state.clock.now()
    eol = (datetime.fromtimestamp(now, tz=UTC) + timedelta(days=2)).date().isoformat()
    emulator.state.configure({"end_of_life": {"claude-haiku-4-5": eol}, "today": None})  # the clock's day
    assert client.messages.create(model="claude-haiku-4-5", max_tokens=20, messages=ASK).content
    emulator.state.clock.advance(3 * 86400)
    for model in ("claude-haiku-4-5", "claude-haiku-4-5-20251001"):
        with pytest.raises(anthropic.NotFoundError, match="end of life"):
            client.messages.create(model=model, max_tokens=20, messages=ASK)
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="claude-haiku-4-5", messages=ASK)
    params = {"model": "claude-haiku-4-5", "max_tokens": 20, "messages": ASK}
    batch = client.messages.batches.create(requests=[{"custom_id": "a", "params": params}])  # type: ignore[misc]
    pass_batch_time(emulator)
    (result,) = list(client.messages.batches.results(batch.id))
    assert result.result.type == "errored" and result.result.error.error.type == "not_found_error"


def test_the_table_retires_models_by_default_on_the_emulators_day(emulator: EmulatorServer) -> None:
    """claude-sonnet-4-5 retired on 2026-11-30 in docmill's table (the SDK 2.15 no longer lists it)."""
    assert emulator.state.config.end_of_life["claude-sonnet-4-5"] == "2026-11-30"
    client = sdk_client(emulator)
    emulator.state.configure({"today": "2026-11-29"})
    assert client.messages.create(model="claude-sonnet-4-5", max_tokens=20, messages=ASK).content
    emulator.state.configure({"today": "2026-11-30"})
    with pytest.raises(anthropic.NotFoundError, match="end of life"):
        client.messages.create(model="claude-sonnet-4-5", max_tokens=20, messages=ASK)
    emulator.state.configure({"today": "2027-06-01"})  # half a year on: still refused
    with pytest.raises(anthropic.NotFoundError, match="end of life"):
        client.messages.create(model="claude-sonnet-4-5-20250929", max_tokens=20, messages=ASK)


def test_cache_minimum_is_per_model(emulator: EmulatorServer) -> None:
    """~3,000 tokens of system prompt: cached on Sonnet 4.6 (2,048), not on Haiku 4.5 (4,096)."""
    client = sdk_client(emulator)
    system: list = [{"type": "text", "text": "Rules. " * 1700, "cache_control": {"type": "ephemeral"}}]
    sonnet = client.messages.create(model="claude-sonnet-4-6", max_tokens=20, system=system, messages=ASK)
    haiku = client.messages.create(model="claude-haiku-4-5", max_tokens=20, system=system, messages=ASK)
    assert sonnet.usage.cache_creation_input_tokens
    assert haiku.usage.cache_creation_input_tokens == 0 and haiku.usage.cache_read_input_tokens == 0
    assert emulator.state.config.min_cache_tokens("claude-some-future-model") == 4096


def test_output_schema_is_not_in_the_cached_prefix_unless_configured(emulator: EmulatorServer) -> None:
    """A 600-token system prompt plus a large schema: the schema does not lift it over the minimum."""
    client = sdk_client(emulator)
    props = {f"field_{i:03d}": {"type": "string", "description": "x" * 40} for i in range(120)}
    schema = {"type": "object", "properties": props, "required": [], "additionalProperties": False}
    fmt = {"format": {"type": "json_schema", "schema": schema}}
    system: list = [{"type": "text", "text": "Rules. " * 350, "cache_control": {"type": "ephemeral"}}]
    total = client.messages.count_tokens(
        model="claude-sonnet-4-6", system=system, messages=ASK, output_config=fmt
    ).input_tokens
    assert total > 2048 + 100

    def ask() -> anthropic.types.Usage:
        return client.messages.create(
            model="claude-sonnet-4-6", max_tokens=20, system=system, messages=ASK, output_config=fmt
        ).usage

    for _ in range(2):
        usage = ask()
        assert usage.cache_creation_input_tokens == 0 and usage.cache_read_input_tokens == 0
    emulator.state.configure({"cache_counts_output_schema": True})
    assert ask().cache_creation_input_tokens
    assert ask().cache_read_input_tokens

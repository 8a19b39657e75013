"""Prices as dated data (docmill/data/prices.json through docmill.prices): a row for every model of
docmill's table and of the locked SDK's ModelParam, the published figures, effective dates, Haiku 5.5's
prompt-length band, the batch multiplier, and user overrides that win."""

from __future__ import annotations

import json
import typing
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest
from anthropic.types import ModelParam

from docmill import prices
from docmill.errors import ConfigError
from docmill.models import MODELS
from docmill.settings import get_settings
from tests.fixtures.today import TODAY


@pytest.fixture
def fresh_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    monkeypatch.delenv("DOCMILL_PRICES", raising=False)
    monkeypatch.delenv("DOCMILL_PRICES_FILE", raising=False)
    get_settings.cache_clear()
    yield monkeypatch
    get_settings.cache_clear()


def sdk_models() -> list[str]:
    literal = next(a for a in typing.get_args(ModelParam) if typing.get_origin(a) is typing.Literal)
    return list(typing.get_args(literal))


@pytest.mark.parametrize("model", sorted(set(MODELS) | set(sdk_models())))
def test_every_model_of_the_table_and_the_sdk_has_a_row(model: str) -> None:
    row = prices.table_row(model, TODAY)
    assert row is not None, f"{model}: no row in docmill/data/prices.json"
    assert row.source  # a source per row, or the reason there is no price
    if row.price is not None:
        p = row.price
        assert p.rates.input > 0 and p.rates.output > p.rates.input and 0 < p.batch <= 1
        assert p.rates.cache_read < p.rates.input < p.rates.cache_write_5m <= p.rates.cache_write_1h


def test_published_figures(fresh_settings: pytest.MonkeyPatch) -> None:
    sonnet5 = prices.price_on("claude-sonnet-5", TODAY)
    assert sonnet5 is not None and (sonnet5.rates.input, sonnet5.rates.output) == (2.0, 10.0)  # not 3 / 15
    assert (sonnet5.rates.cache_write_5m, sonnet5.rates.cache_write_1h, sonnet5.rates.cache_read) == (
        2.5,
        4,
        0.2,
    )
    opus55 = prices.price_on("claude-opus-5-5", TODAY)
    assert opus55 is not None and (opus55.rates.input, opus55.rates.cache_read) == (4.0, 0.2)
    fable51 = prices.price_on("claude-fable-5-1", TODAY)
    assert fable51 is not None and fable51.rates.cache_read == 0.25
    # the dated id an alias resolves to is priced as the alias
    assert prices.price_on("claude-haiku-4-5-20251001", TODAY) == prices.price_on("claude-haiku-4-5", TODAY)


def test_the_sonnet_5_5_cache_read_cut_is_dated(fresh_settings: pytest.MonkeyPatch) -> None:
    before = prices.price_on("claude-sonnet-5-5", date(2026, 10, 6))
    after = prices.price_on("claude-sonnet-5-5", date(2026, 10, 7))
    assert before is not None and after is not None
    assert (before.rates.cache_read, after.rates.cache_read) == (0.20, 0.10)
    assert after.confirmed == "third_party" and before.confirmed == "official"
    usage = {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 1_000_000}
    assert prices.cost_usd("claude-sonnet-5-5", usage, day=date(2026, 10, 6)) == pytest.approx(0.20)
    assert prices.cost_usd("claude-sonnet-5-5", usage, day=date(2026, 10, 7)) == pytest.approx(0.10)


def test_haiku_5_5_above_100k_prompt_tokens_pays_the_band_on_every_token(
    fresh_settings: pytest.MonkeyPatch,
) -> None:
    def usd(input_tokens: int, cache_read: int, output: int) -> float:
        usage = {"input_tokens": input_tokens, "cache_read_input_tokens": cache_read, "output_tokens": output}
        return prices.cost_usd("claude-haiku-5-5", usage, day=TODAY)

    # 100,000 prompt tokens: the base rates; cache reads count toward the prompt
    assert usd(90_000, 10_000, 1_000) == pytest.approx((90_000 * 0.10 + 10_000 * 0.01 + 1_000 * 0.50) / 1e6)
    # one more token: every token of the request at the band, output included
    assert usd(90_001, 10_000, 1_000) == pytest.approx((90_001 * 0.50 + 10_000 * 0.05 + 1_000 * 2.50) / 1e6)
    assert usd(
        90_001,
        10_000,
        0,
    ) > 4 * usd(90_000, 10_000, 0)
    worst = prices.worst_usd("claude-haiku-5-5", 150_000, 1_000, day=TODAY)
    assert worst == pytest.approx((150_000 * 0.625 + 1_000 * 2.50) / 1e6)  # input as 5m cache writes, band


def test_batch_multiplier_and_compaction_iterations(fresh_settings: pytest.MonkeyPatch) -> None:
    usage = {
        "input_tokens": 1000,
        "output_tokens": 100,
        "iterations": [{"type": "compaction", "input_tokens": 500, "output_tokens": 50}],
    }
    realtime = prices.cost_usd("claude-sonnet-5-5", usage, day=TODAY)
    assert realtime == pytest.approx((1500 * 2 + 150 * 10) / 1e6)
    assert prices.cost_usd("claude-sonnet-5-5", usage, batch=True, day=TODAY) == pytest.approx(realtime / 2)


def test_no_published_price_is_no_price(fresh_settings: pytest.MonkeyPatch) -> None:
    assert prices.price_on("claude-fable-5-2", TODAY) is None
    assert prices.table_row("claude-fable-5-2", TODAY) is not None  # a row that says so, not an unknown model
    assert prices.price_on("claude-nonexistent-9", TODAY) is None
    assert prices.priced_usd("claude-fable-5-2", {"input_tokens": 5}) is None
    with pytest.raises(ConfigError) as no_price:
        prices.cost_usd("claude-fable-5-2", {"input_tokens": 5})
    assert "DOCMILL_PRICES" in no_price.value.one_line()  # the line names how to declare one


def test_overrides_win_env_over_file_over_table(fresh_settings: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps(
            {"claude-fable-5-2": {"input": 12, "output": 60}, "claude-sonnet-5-5": {"input": 9, "output": 9}}
        )
    )
    fresh_settings.setenv("DOCMILL_PRICES_FILE", str(path))
    fresh_settings.setenv(
        "DOCMILL_PRICES", json.dumps({"claude-sonnet-5-5": {"input": 1, "output": 5, "batch": 0.4}})
    )
    get_settings.cache_clear()
    fable = prices.price_on("claude-fable-5-2", TODAY)
    assert fable is not None and fable.rates.input == 12 and fable.rates.cache_write_5m == 15  # 1.25x
    assert fable.rates.cache_read == pytest.approx(1.2) and fable.source == f"prices file {path}"
    sonnet = prices.price_on("claude-sonnet-5-5", TODAY)
    assert sonnet is not None and (sonnet.rates.input, sonnet.batch, sonnet.source) == (
        1,
        0.4,
        "DOCMILL_PRICES",
    )
    lines = prices.override_lines()
    assert len(lines) == 2 and any("claude-fable-5-2 (prices file" in line for line in lines)
    path.write_text("{not json")
    fresh_settings.setenv("DOCMILL_PRICES", "{}")
    get_settings.cache_clear()
    with pytest.raises(ConfigError, match="prices file"):
        prices.price_on("claude-sonnet-5-5", TODAY)

"""The start-of-run model check (tasks/api/models.py) against the SDK's deprecated-models data."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from docmill.errors import ConfigError
from docmill.models import min_cacheable_tokens, price_id
from docmill.prices import cost_usd, priced_usd
from docmill.settings import ApiSettings, Settings
from tasks.api.models import check_models, end_of_life


def _at(day: str) -> float:
    return datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp()


def test_end_of_life_comes_from_the_sdk_data() -> None:
    assert end_of_life("claude-sonnet-4-5") == "2026-11-30"
    assert end_of_life("claude-sonnet-4-5-20250929") == "2026-11-30"
    assert end_of_life("claude-sonnet-4-6") is None


def test_retired_model_is_one_config_error_naming_the_setting() -> None:
    settings = Settings(api=ApiSettings(fallback_model="claude-sonnet-4-5"))
    assert check_models(settings, now=_at("2026-11-29")) == [
        "api.fallback_model claude-sonnet-4-5 is deprecated: end of life on 2026-11-30"
    ]
    with pytest.raises(ConfigError, match=r"api\.fallback_model claude-sonnet-4-5 reached its end of life"):
        check_models(settings, now=_at("2026-11-30"))


def test_unpriced_model_is_a_note_not_an_error() -> None:
    notes = check_models(Settings(api=ApiSettings(model="claude-future-9")), now=_at("2026-12-01"))
    assert notes == ["api.model claude-future-9 has no price: its answers are recorded as unpriced"]


def test_dated_ids_price_and_cache_like_their_alias() -> None:
    usage = {"input_tokens": 1000, "output_tokens": 100}
    assert price_id("claude-haiku-4-5-20251001") == "claude-haiku-4-5"
    assert cost_usd("claude-haiku-4-5-20251001", usage) == cost_usd("claude-haiku-4-5", usage) > 0
    assert priced_usd("claude-future-9", usage) is None
    with pytest.raises(ConfigError):
        cost_usd("claude-future-9", usage)
    assert min_cacheable_tokens("claude-haiku-4-5-20251001") == 4096
    assert min_cacheable_tokens("claude-sonnet-4-6") == 2048
    assert min_cacheable_tokens("claude-future-9") == 4096

"""`docmill doctor` (tasks/doctor.py) through the CLI, real SDK against the emulator."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic import transform_schema

from docmill.models import min_cacheable_tokens
from docmill.settings import Settings
from emulator import grammar
from tasks.recipes import load_recipe


def _doctor(
    emulator: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, list[str]]:
    from docmill.settings import get_settings
    from flows.cli.main import main

    monkeypatch.setenv("DOCMILL_API__BASE_URL", emulator.base_url)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    get_settings.cache_clear()
    try:
        code = main(["doctor", *args])
    finally:
        get_settings.cache_clear()
    out = capsys.readouterr()
    return code, out.out, out.err.strip().splitlines()


def test_doctor_passes_and_shows_models_costs_and_limits(
    emulator: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _doctor(emulator, monkeypatch, capsys)
    assert code == 0 and err == []
    assert "ok   key: accepted" in out
    assert "model claude-haiku-5-5 (api.fallback_model): answered by claude-haiku-5-5" in out
    assert "prices:" not in out  # no override in force
    assert "recipe invoices per-file schema: accepted" in out and "code-review integration schema" in out
    assert "requests 4000/min" in out and "checks cost $" in out
    warn = [line.strip() for line in out.splitlines() if "recipe invoices prompt cache" in line]
    assert len(warn) == 1 and warn[0].startswith("warn recipe invoices prompt cache: prefix "), out
    model = Settings().api.model  # the default model (its minimum from docmill's model table)
    assert f"< minimum {min_cacheable_tokens(model):,} of {model}: not cached ($" in warn[0]
    assert "per 1,000 documents forgone)" in warn[0] and "with a warning)" in out
    assert emulator.state.accounting.received_by_path["/v1/messages/count_tokens"] == 1 + 2 * 2


def test_schema_over_the_grammar_limit_fails_doctor_naming_the_schema(
    emulator: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = load_recipe("invoices")
    per_file = grammar.complexity(transform_schema(recipe.file_schema))
    integration = grammar.complexity(transform_schema(recipe.integration_schema))
    assert per_file > integration  # the limit below refuses only the per-file schema
    emulator.state.configure({"grammar_max_complexity": per_file - 1})
    code, out, err = _doctor(emulator, monkeypatch, capsys, "--recipe", "invoices")
    assert code == 2
    assert err == [
        "docmill: doctor: recipe invoices per-file schema: HTTP 400 invalid_request_error: "
        "output_config.format.schema: " + grammar.TOO_LARGE
    ]
    assert "FAIL recipe invoices per-file schema" in out and "ok   recipe invoices integration schema" in out


def test_retired_pinned_model_fails_doctor(
    emulator: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(
        "DOCMILL_API__INTEGRATION_MODEL", "claude-sonnet-4-5"
    )  # retired 2026-11-30 (docmill's model table)
    code, _, err = _doctor(emulator, monkeypatch, capsys, "--recipe", "invoices")
    assert code == 2
    assert any("models: api.integration_model claude-sonnet-4-5 retired on 2026-11-30" in e for e in err)
    assert any(
        e.startswith("docmill: doctor: model claude-sonnet-4-5") for e in err
    )  # and it does not answer


def test_doctor_help_describes_it_and_takes_a_model_whose_404_is_the_models_not_the_keys(
    emulator: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _doctor(emulator, monkeypatch, capsys, "--help")
    assert code == 0 and "Check what would otherwise fail" in out and "--model MODEL" in out
    code, out, err = _doctor(
        emulator, monkeypatch, capsys, "--model", "claude-nowhere-9", "--recipe", "invoices"
    )
    assert code == 2
    assert "ok   key: accepted (the model claude-nowhere-9 is not known" in out
    assert (
        "FAIL model claude-nowhere-9 (api.model): the endpoint does not know the model claude-nowhere-9"
        in out
    )
    assert "warn models: api.model claude-nowhere-9 has no price" in out  # a warning, never "ok"
    assert not any(line.startswith("ok") and "no price" in line for line in out.splitlines())
    assert not any("key" in line for line in err)  # the failure lines blame the model


def test_doctor_shows_the_price_overrides_in_force(
    emulator: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCMILL_PRICES", '{"claude-sonnet-5-5": {"input": 2.5, "output": 12}}')
    code, out, _ = _doctor(emulator, monkeypatch, capsys, "--recipe", "invoices")
    assert code == 0
    assert (
        "ok   prices: price override for claude-sonnet-5-5 (DOCMILL_PRICES): input $2.5 / output $12" in out
    )


def test_a_recipe_whose_prefix_reaches_the_minimum_is_reported_cached(emulator: Any) -> None:
    import anthropic

    from tasks.doctor import cache_check
    from tests.fixtures.recipes import cacheable_recipe

    settings = Settings(api={"base_url": emulator.base_url})
    sdk = anthropic.Anthropic(api_key="k", base_url=emulator.base_url, max_retries=0)
    check = cache_check(settings, cacheable_recipe(), sdk)
    assert check.ok and not check.warn, check.line()
    assert ">= minimum" in check.detail and "saved)" in check.detail

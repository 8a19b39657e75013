"""The start-of-run model check (tasks/api/models.py) against docmill's dated model table, on an
injected day; the SDK's private end-of-life list only ever adds a note."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path

import pytest

from docmill.errors import ConfigError
from docmill.models import (
    MODELS,
    Status,
    dated_aliases,
    min_cacheable_tokens,
    model_info,
    price_id,
)
from docmill.prices import cost_usd, priced_usd
from docmill.sdk_hints import listed_in_source, parse_sdk_date, sdk_end_of_life
from docmill.settings import ApiSettings, Settings
from tasks.api.models import check_models
from tests.fixtures.today import TODAY

D = date.fromisoformat


def _status(model: str, day: date) -> Status:
    info = model_info(model)
    assert info is not None, model
    return info.status_on(day)


def test_the_table_dates_each_status() -> None:
    assert _status("claude-sonnet-4-5", D("2026-09-30")) is Status.LEGACY
    assert _status("claude-sonnet-4-5", D("2026-10-01")) is Status.DEPRECATED
    assert _status("claude-sonnet-4-5", D("2026-11-29")) is Status.DEPRECATED
    assert _status("claude-sonnet-4-5", D("2026-11-30")) is Status.RETIRED  # from 00:00 UTC
    assert _status("claude-sonnet-4-5-20250929", D("2026-11-30")) is Status.RETIRED  # dated id too
    assert _status("claude-sonnet-5-5", D("2026-12-02")) is Status.CURRENT
    assert _status("claude-sonnet-4-6", D("2026-12-02")) is Status.LEGACY
    assert model_info("claude-future-9") is None  # not in the table: no status
    assert dated_aliases()["claude-haiku-4-5"] == "claude-haiku-4-5-20251001"
    assert "claude-sonnet-4-6" not in dated_aliases()  # 4.6 and later have no dated form


def test_every_row_is_complete_and_ordered() -> None:
    for info in MODELS.values():
        assert info.max_output_tokens > 0 and info.cache_min_tokens > 0 and info.source
        dates = [d for d in (info.legacy_from, info.deprecated_from, info.retires) if d is not None]
        assert dates == sorted(dates), info.id
        assert info.thinking in ("adaptive", "manual")


def test_retired_model_is_one_config_error_naming_the_setting() -> None:
    settings = Settings(api=ApiSettings(fallback_model="claude-sonnet-4-5"))
    notes = check_models(settings, today=D("2026-11-29"))
    assert "api.fallback_model claude-sonnet-4-5 is deprecated: it retires on 2026-11-30" in notes[-1]
    with pytest.raises(ConfigError, match=r"api\.fallback_model claude-sonnet-4-5 retired on 2026-11-30"):
        check_models(settings, today=D("2026-11-30"))


def test_the_day_comes_from_settings_never_the_wall_clock() -> None:
    settings = Settings(api=ApiSettings(model="claude-opus-4-5"), today=D("2027-01-21"))
    assert settings.on_day() == D("2027-01-21")
    assert any("is deprecated: it retires on 2027-01-22" in n for n in check_models(settings))
    with pytest.raises(ConfigError, match="retired on 2027-01-22"):
        check_models(settings.model_copy(update={"today": D("2027-01-22")}))


def test_model_checks_on_2027_06_01_retire_more_models() -> None:
    """The same configuration half a year on: opus-4-5 (retired 2027-01-22) now stops the run at start;
    the current Sonnet still runs; every model the table retires by then is refused."""
    later = D("2027-06-01")
    retired = [m for m, info in MODELS.items() if info.retires is not None and info.retires <= later]
    assert {"claude-opus-4-5", "claude-sonnet-4-5", "claude-mythos-preview"} <= set(retired)
    for model in retired:
        with pytest.raises(ConfigError, match=f"api.model {model} retired on"):
            check_models(Settings(api=ApiSettings(model=model)), today=later)
    notes = check_models(
        Settings(
            api=ApiSettings(
                model="claude-sonnet-5-5", integration_model="claude-sonnet-5-5", fallback_model=None
            )
        ),
        today=later,
    )
    assert not any("retired" in n or "deprecated" in n for n in notes)


def test_the_suite_runs_on_its_injected_day(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().on_day() == TODAY  # DOCMILL_TODAY, set by tests/fixtures/today.py
    monkeypatch.setenv("DOCMILL_TODAY", (TODAY + timedelta(days=400)).isoformat())
    assert Settings().on_day() == TODAY + timedelta(days=400)


def test_a_legacy_model_without_a_retirement_date_is_a_doctor_line_not_a_run_warning() -> None:
    settings = Settings(
        api=ApiSettings(model="claude-sonnet-4-6", integration_model="claude-sonnet-4-6", fallback_model=None)
    )
    assert check_models(settings, today=D("2026-12-02")) == []
    assert check_models(settings, today=D("2026-12-02"), everything=True) == [
        "api.model claude-sonnet-4-6 is legacy; the current sonnet is claude-sonnet-5-5",
        "api.integration_model claude-sonnet-4-6 is legacy; the current sonnet is claude-sonnet-5-5",
    ]


def test_legacy_and_unknown_models_are_notes() -> None:
    notes = check_models(
        Settings(
            api=ApiSettings(
                model="claude-sonnet-4-6", integration_model="claude-future-9", fallback_model=None
            )
        ),
        today=D("2026-12-02"),
        everything=True,
    )
    assert "api.model claude-sonnet-4-6 is legacy; the current sonnet is claude-sonnet-5-5" in notes
    assert any(
        n.startswith("api.integration_model claude-future-9 is not in docmill's model table") for n in notes
    )
    assert (
        "api.integration_model claude-future-9 has no price: its tokens are recorded and reported as unpriced"
        in notes
    )


@pytest.fixture
def fake_sdk_data() -> Iterator[types.ModuleType]:
    """A stand-in for the SDK's private module, put where `sdk_end_of_life` is told to look."""
    module = types.ModuleType("docmill_test_sdk_data")
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def test_sdk_hints_are_read_defensively(fake_sdk_data: types.ModuleType) -> None:
    name = fake_sdk_data.__name__
    assert sdk_end_of_life("no_such_module_anywhere") == {}  # a missing module is no hint, no error
    assert sdk_end_of_life(name) == {}  # the list missing from the module
    fake_sdk_data.DEPRECATED_MODELS = ["claude-x"]  # type: ignore[attr-defined]  # a changed shape
    assert sdk_end_of_life(name) == {}
    fake_sdk_data.DEPRECATED_MODELS = {  # type: ignore[attr-defined]
        "claude-a": "November 30th, 2026",
        "claude-b": "2027-01-22",
        "claude-c": "some day",
        7: "June 1st, 2027",
    }
    assert sdk_end_of_life(name) == {"claude-a": D("2026-11-30"), "claude-b": D("2027-01-22")}
    assert parse_sdk_date("January 22nd, 2027") == D("2027-01-22") and parse_sdk_date(None) is None  # type: ignore[arg-type]


def test_the_sdk_list_read_from_its_source_is_the_one_an_import_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every run reads the SDK's end-of-life list without importing the SDK (docmill.sdk): the
    literal in the package's source, the same list an import gives. The package is this test's own
    (the SDK's private module changes between releases): a module file and a folder of files."""
    import importlib

    pkg = tmp_path / "docmill_test_sdk"
    (pkg / "_folder").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('the package is never imported')\n")
    listed = {"claude-a": "November 30th, 2026", "claude-b": "2027-01-22"}
    body = f"from typing import Any\n\nOTHER = 1\nDEPRECATED_MODELS: dict[str, Any] = {listed!r}\n"
    (pkg / "_data.py").write_text(body)
    (pkg / "_folder" / "__init__.py").write_text("")
    (pkg / "_folder" / "lists.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = importlib.util.spec_from_file_location("docmill_test_sdk_data_file", pkg / "_data.py")
    assert spec is not None and spec.loader is not None
    data = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(data)  # what an import of the module itself gives
    assert listed_in_source("docmill_test_sdk._data", "DEPRECATED_MODELS") == data.DEPRECATED_MODELS
    assert listed_in_source("docmill_test_sdk._folder", "DEPRECATED_MODELS") == listed
    assert "docmill_test_sdk" not in sys.modules  # located, not imported
    with pytest.raises(LookupError):
        listed_in_source("docmill_test_sdk._data", "NO_SUCH_LIST")
    with pytest.raises(LookupError):
        listed_in_source("no_such_package_anywhere._data", "DEPRECATED_MODELS")


def test_an_sdk_date_the_table_lacks_is_a_note_never_an_error(
    fake_sdk_data: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tasks.api.models as checks

    fake_sdk_data.DEPRECATED_MODELS = {"claude-sonnet-5-5": "March 1st, 2027"}  # type: ignore[attr-defined]
    monkeypatch.setattr(checks, "sdk_end_of_life", lambda: sdk_end_of_life(fake_sdk_data.__name__))
    settings = Settings(api=ApiSettings(model="claude-sonnet-5-5"))
    notes = check_models(settings, today=D("2027-06-01"))  # past the SDK's date: still only a note
    assert any("the installed anthropic SDK lists an end of life on 2027-03-01" in n for n in notes)


def test_dated_ids_price_and_cache_like_their_alias() -> None:
    usage = {"input_tokens": 1000, "output_tokens": 100}
    assert price_id("claude-haiku-4-5-20251001") == "claude-haiku-4-5"
    assert model_info("claude-haiku-4-5-20251001") is MODELS["claude-haiku-4-5"]
    assert cost_usd("claude-haiku-4-5-20251001", usage) == cost_usd("claude-haiku-4-5", usage) > 0
    assert priced_usd("claude-future-9", usage) is None
    with pytest.raises(ConfigError):
        cost_usd("claude-future-9", usage)
    assert min_cacheable_tokens("claude-haiku-4-5-20251001") == 4096
    assert min_cacheable_tokens("claude-sonnet-4-6") == 2048
    assert min_cacheable_tokens("claude-future-9") == 4096

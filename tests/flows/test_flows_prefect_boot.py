"""The temporary server started first thing (flows.orchestration.boot) is the one the run uses.

`OwnedServer` takes the early process over only when its Prefect settings are the ones it would
start a server with; when the comparison fails, a second server boots and the first is thrown away
(measured: every CLI run through Prefect booted two). The comparison runs here on the environment
the CLI gives itself and on Prefect's own dump of its settings, in this process (no server started).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.orchestration import boot
from flows.orchestration.server import server_environment

# what `docmill` sets for itself before Prefect is imported (flows.cli.main), as os.environ strings
CLI_DEFAULTS = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_LOGGING_LOG_PRINTS": "false"}


@pytest.fixture
def early(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from prefect.settings import (
        PREFECT_HOME,
        PREFECT_LOGGING_LOG_PRINTS,
        PREFECT_SERVER_ANALYTICS_ENABLED,
        PREFECT_SERVER_EPHEMERAL_ENABLED,
        temporary_settings,
    )

    for key, value in CLI_DEFAULTS.items():
        monkeypatch.setenv(key, value)
    # as Prefect's settings hold them in a CLI run: read from that environment, the default
    # profile's ephemeral mode on, and dumped back as Prefect writes them ("False", "True")
    updates = {
        PREFECT_HOME: tmp_path / "prefect-home",
        PREFECT_SERVER_ANALYTICS_ENABLED: False,
        PREFECT_LOGGING_LOG_PRINTS: False,
        PREFECT_SERVER_EPHEMERAL_ENABLED: True,
    }
    with temporary_settings(updates=updates):
        monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))
        configured = server_environment()  # holds the database slot as prespawn would
        monkeypatch.setattr(boot, "_early", {"env": boot.server_env({boot.DB_URL: configured[boot.DB_URL]})})
        yield


def test_the_early_server_fits_the_settings_of_the_run_that_started_it(early: None) -> None:
    assert os.environ["PREFECT_LOGGING_LOG_PRINTS"] == "false"
    assert boot.fits(server_environment())


def test_an_early_server_started_with_other_server_settings_is_not_taken(early: None) -> None:
    from prefect.settings import PREFECT_SERVER_DATABASE_TIMEOUT, temporary_settings

    with temporary_settings(updates={PREFECT_SERVER_DATABASE_TIMEOUT: 123.0}):
        assert not boot.fits(server_environment())

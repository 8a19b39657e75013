"""The temporary server started first thing (flows.orchestration.boot) is the one the run uses.

`OwnedServer` takes the early process over only when its Prefect settings are the ones it would
start a server with; when the comparison fails, a second server boots and the first is thrown away
(measured: every CLI run through Prefect booted two). The comparison runs in a fresh interpreter,
as in a `docmill` process: the environment the CLI gives itself, Prefect's settings read from it and
from the default profile, and Prefect's own dump of them (no server is started).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHECK = """
import json, os, sys
from flows.cli.main import quiet_prefect

quiet_prefect()  # the environment `docmill` gives itself before Prefect is imported
from flows.orchestration import boot
from flows.orchestration.server import server_environment
from prefect.settings import PREFECT_SERVER_DATABASE_TIMEOUT, temporary_settings

configured = server_environment()  # holds the database slot, as prespawn does first
boot._early["env"] = boot.server_env({boot.DB_URL: configured[boot.DB_URL]})
same = boot.fits(server_environment())
with temporary_settings(updates={PREFECT_SERVER_DATABASE_TIMEOUT: 123.0}):
    other = boot.fits(server_environment())
print(json.dumps({"same": same, "other": other, "log_prints": os.environ.get("PREFECT_LOGGING_LOG_PRINTS")}))
"""


def test_the_early_server_fits_the_run_that_started_it_and_not_other_server_settings(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    done = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["log_prints"] == "false"  # the CLI's own default, as os.environ spells it
    assert found["same"] is True  # was False: 'false' vs Prefect's 'False', the profile's switch
    assert found["other"] is False

"""Prefect's temporary API server: a start that times out is tried once more, then ends the run with
one docmill line naming the setting (exit 3), never Prefect's bare RuntimeError, and leaves no server
behind. A real `docmill run` in a subprocess (no PREFECT_API_URL: the ephemeral server path)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.flows.helpers import make_corpus

ROOT = Path(__file__).resolve().parents[2]


def test_a_server_that_does_not_start_in_time_is_one_line_and_exit_3(tmp_path: Path) -> None:
    corpus, _ = make_corpus(tmp_path, count=2, seed=5)
    runtime = tmp_path / "rt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "ANTHROPIC_API_KEY"))}
    env.update(
        DOCMILL_PREFECT_START_TIMEOUT_SECONDS="0.01",  # no server answers /health that fast: both tries fail
        DOCMILL_PREFECT_PRESPAWN="false",  # (one started first thing could be up by the time it is asked)
        DOCMILL_PREFECT_MIN_DOCUMENTS="0",  # two documents: through Prefect all the same
        DOCMILL_RUNTIME_DIR=str(runtime),
        DOCMILL_API__BASE_URL="http://127.0.0.1:9",  # never reached: the run stops before any request
    )
    env.pop("DOCMILL_RAISE_ERRORS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", "--store", str(tmp_path / "store"), "run", str(corpus)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 3, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(
        "docmill: OrchestratorUnavailable: Prefect's temporary API server did not start"
    )
    assert "tried twice" in lines[0] and "DOCMILL_PREFECT_START_TIMEOUT_SECONDS" in lines[0]
    assert "RuntimeError" not in proc.stderr and "Traceback" not in proc.stderr

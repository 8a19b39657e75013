"""Graceful shutdown through the real CLI in a subprocess: SIGINT/SIGTERM mid-run -> no request after
the signal (counted at an HTTP proxy), exit 130/143 with the run id; `resume` ends with the same
results as an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from checkpoints.manifest import ManifestStore
from checkpoints.store import open_store
from docmill.settings import get_settings
from flows.cli.main import main
from tests.fixtures.proxy import CountingProxy
from tests.flows.helpers import ROOT, make_corpus, outcomes_of

SIGNAL_LAG = 0.25  # the signal's delivery and the handler's turn in the main thread


def _results(store: str, run_id: str) -> dict[str, Any]:
    return {d: (o["state"], o.get("output")) for d, o in outcomes_of(open_store(store), run_id).items()}


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_stops_sending_exits_with_the_run_id_and_resume_finishes(
    emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: int, code: int
) -> None:
    corpus, _ = make_corpus(tmp_path, count=12, seed=9)
    store = str(tmp_path / "store")
    emulator.state.config.latency_ms = 150.0
    env = {
        **os.environ,
        "DOCMILL_API__CONCURRENCY": "3",
        "DOCMILL_CHUNK_SIZE": "5",
        "DOCMILL_SHUTDOWN_GRACE_SECONDS": "20",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("ANTHROPIC_API_KEY", None)
    with CountingProxy(emulator.base_url) as proxy:
        env["DOCMILL_API__BASE_URL"] = proxy.base_url
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "flows.cli",
                "--store",
                store,
                "run",
                str(corpus),
                "--no-prefect",
                "--run-id",
                "sig-1",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.time() + 60
        while len(proxy.sent()) < 4 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.02)
        assert proc.poll() is None, proc.communicate()
        signaled = time.time()
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=60)
        late = [t - signaled for t in proxy.sent() if t > signaled + SIGNAL_LAG]
    assert proc.returncode == code, err
    assert late == [], f"requests sent after the signal: {late}"
    assert "docmill resume sig-1" in err.strip().splitlines()[-1], err
    assert ManifestStore(open_store(store)).load("sig-1").phase == "stopped"

    emulator.state.config.latency_ms = 0.0
    monkeypatch.setenv("DOCMILL_API__BASE_URL", emulator.base_url)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    get_settings.cache_clear()
    try:
        assert main(["--store", store, "resume", "sig-1", "--no-prefect"]) == 0
        other = str(tmp_path / "uninterrupted")
        assert main(["--store", other, "run", str(corpus), "--no-prefect", "--run-id", "whole"]) == 0
    finally:
        get_settings.cache_clear()
    assert _results(store, "sig-1") == _results(other, "whole")

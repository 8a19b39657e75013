"""A run that sends nothing never imports the anthropic SDK (nor its HTTP libraries): importing them
is over a second of an unchanged nightly's start-up (docmill.sdk). One CLI run in a fresh
interpreter over a source whose every answer is in the ledger, looking at `sys.modules` as it ends:
the module-level imports and whatever the run calls (model checks, clients, the batch engine's
ledger hits, the realtime pass's event loop, the report) are all covered."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.server import EmulatorServer
from flows.entry import run_extract
from flows.run.context import RunParams
from tests.flows.helpers import ROOT, settings_for

SDK_MODULES = ("anthropic", "httpx2", "httpx", "aiohttp")
# the CLI as `docmill` runs it, then the SDK's modules it imported, the last line on stderr
WATCHED = f"""
import runpy, sys
try:
    runpy.run_module("flows.cli", run_name="__main__", alter_sys=True)
finally:
    print("imported:", sorted(m for m in {SDK_MODULES!r} if m in sys.modules), file=sys.stderr)
"""


@pytest.mark.parametrize("mode", ["batch", "realtime"])
def test_a_run_with_every_answer_in_the_ledger_never_imports_the_sdk(
    tmp_path: Path, emulator: EmulatorServer, mode: str
) -> None:
    src, store = tmp_path / "src", tmp_path / "store"
    src.mkdir()
    for i in range(3):
        (src / f"inv-{i}.txt").write_text(f"Invoice INV-{i}\nVendor: Acme GmbH\nTotal: {i}0.00 EUR\n")
    settings = settings_for(emulator, str(store))
    first = run_extract(RunParams(str(src), "invoices", mode="realtime"), settings=settings)
    assert first["states"]["succeeded"] == 3  # every answer is in the ledger now

    env = {**os.environ, "DOCMILL_API__BASE_URL": emulator.base_url, "ANTHROPIC_API_KEY": ""}
    env["PYTHONPATH"] = str(ROOT)
    args = ["run", str(src), "--recipe", "invoices", "--mode", mode, "--store", str(store), "--no-prefect"]
    done = subprocess.run(
        [sys.executable, "-c", WATCHED, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "3 succeeded" in done.stdout and "cost $0.0000" in done.stdout, done.stdout[-2000:]
    assert done.stderr.rstrip().splitlines()[-1] == "imported: []"

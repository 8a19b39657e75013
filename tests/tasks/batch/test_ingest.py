"""Batch answers gated in worker processes give exactly what gating in-process gives: the same
terminal states, outputs and repairs, and nothing billed twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tasks.batch import ingest as batch_ingest
from tasks.per_file.outcome import DocState
from tests.tasks.batch.test_engine import Rig, by_key, make_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("ingest") / "corpus", 24, seed=21)


def _run(emulator: Any, tmp_path: Path, corpus: Path, name: str) -> tuple[Rig, dict[str, Any]]:
    rig = Rig(emulator, tmp_path / name, corpus)
    rig.run_id = name
    repaired = rig.key(rig.ok_docs()[3])
    emulator.state.faults.add(kind="schema_invalid", custom_id=repaired, count=1)
    return rig, by_key(rig.run())


def test_worker_processes_gate_like_the_main_process(
    emulator: Any, tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batch_ingest, "MIN_RESULTS", 10**9)
    batch_ingest.STATS.clear()
    _, local = _run(emulator, tmp_path, corpus, "in-process")
    assert batch_ingest.STATS["chunks_in_workers"] == 0
    monkeypatch.setattr(batch_ingest, "MIN_RESULTS", 0)  # every batch goes to the worker processes
    remote_rig, remote = _run(emulator, tmp_path, corpus, "workers")
    assert batch_ingest.STATS["chunks_in_workers"] >= 1  # the worker path really ran

    assert local.keys() == remote.keys() and len(local) > 10
    for key, mine in local.items():
        theirs = remote[key]
        assert (theirs.state, theirs.output, theirs.reason, theirs.attempts) == (
            mine.state,
            mine.output,
            mine.reason,
            mine.attempts,
        ), key
    repaired = remote_rig.key(remote_rig.ok_docs()[3])
    assert remote[repaired].state is DocState.SUCCEEDED and remote[repaired].attempts == 2
    billed = [r for r in emulator.state.accounting.billed if r.custom_id]
    per_run = len(billed) // 2
    assert len(billed) == 2 * per_run  # the same requests in both runs, each billed once per run


UNGUARDED_SCRIPT = """
# A user's script with no `if __name__ == "__main__":` guard, as people write them.
import os
import sys

sys.path.insert(0, os.environ["DOCMILL_ROOT"])
with open(os.environ["MARKER"], "a") as f:
    f.write(f"{os.getpid()}\\n")

from docmill.settings import Settings
from tasks.batch import ingest as batch_ingest
from tasks.recipes import load_recipe

checker = batch_ingest.Prechecker(load_recipe("invoices"), Settings())
checker.start()
checker.submit([]).result()
print("chunks in workers:", batch_ingest.STATS["chunks_in_workers"], flush=True)
checker.close()
"""


def test_worker_processes_do_not_run_an_unguarded_script_again(tmp_path: Path) -> None:
    """Spawned workers import `__main__` again. Without care, a driving script with no main guard
    would run once more in every worker: a second docmill run, batches billed twice."""
    import os
    import subprocess
    import sys

    script, marker = tmp_path / "job.py", tmp_path / "ran.txt"
    script.write_text(UNGUARDED_SCRIPT)
    root = str(Path(__file__).resolve().parents[3])
    out = subprocess.run(
        [sys.executable, str(script)],
        env={**os.environ, "DOCMILL_ROOT": root, "MARKER": str(marker), "PYTHONPATH": root},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "chunks in workers: 1" in out.stdout, out.stdout + out.stderr  # the worker path ran
    assert len(marker.read_text().splitlines()) == 1  # the script ran once: in its own process


STARTS_WORKERS = """
import os, sys, time
from docmill.settings import Settings
from tasks.batch import ingest
from tasks.recipes import load_recipe

checker = ingest.Prechecker(load_recipe("invoices"), Settings())
checker.start()
me = os.getpid()
print(open(f"/proc/{me}/task/{me}/children").read(), flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")
def test_worker_processes_exit_with_a_sigkilled_engine_even_while_they_start() -> None:
    """Killed while its workers still import their modules: none of them (nor multiprocessing's
    resource tracker) stays behind with parent 1."""
    root = str(Path(__file__).resolve().parents[3])
    engine = subprocess.Popen(
        [sys.executable, "-c", STARTS_WORKERS], cwd=root, stdout=subprocess.PIPE, text=True
    )
    assert engine.stdout is not None
    kids = [int(p) for p in engine.stdout.readline().split()]
    engine.send_signal(signal.SIGKILL)  # at once: the workers are still starting
    engine.wait()
    assert len(kids) >= 2
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_running(p) for p in kids):
        time.sleep(0.05)
    left = [p for p in kids if _running(p)]
    for pid in left:  # not left to the next test either
        os.kill(pid, signal.SIGKILL)
    assert left == []


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


@pytest.mark.parametrize(("cpus", "workers"), [(None, 1), (1, 1), (2, 1), (3, 2), (16, 2)])
def test_gate_workers_take_only_the_cores_beside_the_engine(cpus: int | None, workers: int) -> None:
    """On 2 cores a second gate worker has no core of its own: it only adds an interpreter's CPU."""
    assert batch_ingest.gate_processes(cpus) == workers

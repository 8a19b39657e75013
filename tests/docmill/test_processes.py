"""docmill.processes / docmill.lifeline: children die with a SIGKILLed parent; reaping stops only
docmill's own leftovers. Real processes throughout (Linux /proc)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from docmill import processes
from docmill.processes import reap_stale, reaped_line, spawn, start_time

ROOT = Path(__file__).resolve().parents[2]
SLEEP = "import time; time.sleep(60)"

# A parent that starts children with `spawn` (a Python child, and any program), prints their pids
# (for the program: the launcher's and the program's own), then waits to be killed.
PARENT = """
import os, sys, threading, time
from docmill.processes import spawn
runtime = sys.argv[1]
py = spawn([sys.executable, "-c", "import time; time.sleep(60)"], role="py", runtime=runtime)
holder = {}
def from_a_thread():  # that ends at once: the child must outlive the thread that started it
    holder["p"] = spawn([sys.executable, "-c", "import time; time.sleep(60)"], role="t", runtime=runtime)
t = threading.Thread(target=from_a_thread); t.start(); t.join()
prog = spawn(["sleep", "60"], role="prog", runtime=runtime)
deadline = time.monotonic() + 10
while time.monotonic() < deadline and not os.path.exists(f"/proc/{prog.pid}/task/{prog.pid}/children"):
    time.sleep(0.01)
grandchild = ""
while time.monotonic() < deadline and not grandchild:
    grandchild = open(f"/proc/{prog.pid}/task/{prog.pid}/children").read().strip()
    time.sleep(0.01)
print(py.pid, holder["p"].pid, prog.pid, grandchild, flush=True)
time.sleep(60)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


def wait_gone(pids: list[int], seconds: float) -> list[int]:
    """The pids still alive after `seconds`: a hang guard (it returns once they are gone), generous
    because a loaded machine delays a watch thread's next look by seconds."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.02)
    return [p for p in pids if alive(p)]


@pytest.fixture
def parent(tmp_path: Path):  # type: ignore[no-untyped-def]
    proc = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path / "rt")], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    pids = [int(p) for p in proc.stdout.readline().split()]
    yield proc, pids
    proc.kill()
    proc.wait()
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")


def test_children_outlive_the_starting_thread_and_die_with_a_sigkilled_parent(
    parent: tuple[subprocess.Popen[str], list[int]], tmp_path: Path
) -> None:
    proc, pids = parent
    assert len(pids) == 4
    time.sleep(1.2)  # past a lifeline poll: the child of the ended thread is still there
    assert all(alive(p) for p in pids)
    records = sorted(json.loads(p.read_text())["role"] for p in (tmp_path / "rt").glob("*.json"))
    assert records == ["prog", "py", "t"]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert wait_gone(pids, 20.0) == []


def test_reaping_stops_a_stale_child_of_a_dead_docmill_and_nothing_else(
    parent: tuple[subprocess.Popen[str], list[int]], tmp_path: Path
) -> None:
    proc, pids = parent
    stuck = pids[0]
    os.kill(stuck, signal.SIGSTOP)  # its watch cannot act (like a child of an older docmill)
    runtime = str(tmp_path / "rt")
    assert reap_stale(runtime) == []  # its docmill is alive: not ours to stop
    assert alive(stuck)

    stranger = subprocess.Popen(["sleep", "30"])  # not docmill's, recorded under a reused pid file
    mine = spawn([sys.executable, "-c", SLEEP], role="mine", runtime=runtime)  # its parent (us) lives
    rec = json.loads((tmp_path / "rt" / f"{pids[1]}.json").read_text())
    (tmp_path / "rt" / f"{stranger.pid}.json").write_text(
        json.dumps({**rec, "pid": stranger.pid, "started": start_time(stranger.pid)})
    )
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert wait_gone(pids[1:], 20.0) == []
        assert alive(stuck)

        stale = reap_stale(runtime)
        assert [(r["pid"], r["role"]) for r in stale] == [(stuck, "py")]
        assert wait_gone([stuck], 20.0) == []
        assert alive(stranger.pid) and alive(mine.pid)
        assert sorted(p.name for p in (tmp_path / "rt").glob("*.json")) == [f"{mine.pid}.json"]
        assert reaped_line(stale).startswith("docmill: stopped 1 process(es) left running by an earlier")
        assert f"py (pid {stuck})" in reaped_line(stale)
    finally:
        for p in (stranger, mine):
            p.kill()
            p.wait()


def test_launcher_runs_python_in_its_own_process_and_other_programs_under_a_supervisor(
    tmp_path: Path,
) -> None:
    head = [sys.executable, "-m", "docmill.lifeline"]
    assert processes.launcher([sys.executable, "-m", "uvicorn", "--x"]) == [*head, "-m", "uvicorn", "--x"]
    assert processes.launcher([sys.executable, "s.py"]) == [*head, "s.py"]
    assert processes.launcher([sys.executable, "-u", "s.py"]) == [*head, "--", sys.executable, "-u", "s.py"]
    assert processes.launcher(["sleep", "1"]) == [*head, "--", "sleep", "1"]
    done = spawn(
        [sys.executable, "-c", "import sys; print(sys.argv[1:]); sys.exit(3)", "a"],
        role="x",
        runtime=str(tmp_path),
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = done.communicate(timeout=30)
    assert (done.returncode, out.strip()) == (3, "['a']")


# A docmill-like parent as a terminal runs it: the leader of its own foreground process group. It
# starts a helper with `spawn`, prints its pid, and on SIGINT says so (as docmill's handler does).
TERMINAL_PARENT = """
import signal, sys, time
from docmill.processes import spawn
signal.signal(signal.SIGINT, lambda *_: print("parent got SIGINT", flush=True))
child = spawn([sys.executable, "-c", "import time; time.sleep(60)"], role="server", runtime=sys.argv[1])
print(child.pid, flush=True)
time.sleep(60)
"""


def test_a_terminal_ctrl_c_reaches_docmill_not_its_helpers_which_still_die_with_it(tmp_path: Path) -> None:
    """A terminal sends SIGINT to the whole foreground process group. The helpers docmill starts (its
    Prefect server) are in a session of their own, so the Ctrl-C is docmill's alone to handle: the
    helper keeps serving docmill's shutdown, and still exits when docmill is gone."""
    proc = subprocess.Popen(
        [sys.executable, "-c", TERMINAL_PARENT, str(tmp_path / "rt")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    try:
        child = int(proc.stdout.readline())
        assert os.getsid(child) != os.getsid(proc.pid) and os.getpgid(child) != proc.pid
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        assert proc.stdout.readline().strip() == "parent got SIGINT"
        time.sleep(0.5)
        assert alive(child), "the terminal's SIGINT reached the helper"
        proc.kill()
        proc.wait()
        assert wait_gone([child], 20.0) == []
    finally:
        proc.kill()
        proc.wait()


POOL_PARENT = """
import multiprocessing, os, pickle, signal, threading, time
from concurrent.futures import ProcessPoolExecutor
from docmill.lifeline import watch_parent_then
got = threading.Event()
signal.signal(signal.SIGINT, lambda *_: got.set())
ctx = multiprocessing.get_context("spawn")
init = pickle.dumps((time.sleep, 0))
pool = ProcessPoolExecutor(1, mp_context=ctx, initializer=watch_parent_then, initargs=(init,))
print(pool.submit(os.getpid).result(), flush=True)
got.wait(30)
time.sleep(0.5)
print(pool.submit(os.getpid).result(), flush=True)
"""


def test_a_terminal_ctrl_c_leaves_the_batch_gate_workers_working(tmp_path: Path) -> None:
    """The batch gate's worker processes (multiprocessing, docmill's process group) ignore the
    terminal's SIGINT: the pool keeps working through docmill's graceful shutdown."""
    proc = subprocess.Popen(
        [sys.executable, "-c", POOL_PARENT],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    try:
        worker = int(proc.stdout.readline())
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.stdout.readline().strip() == str(worker)  # the same worker answers again
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()

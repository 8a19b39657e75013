"""How a child learns that docmill died, measured side by side (Linux).

For each way, a parent process starts a child, then is SIGKILLed; we time until the child is gone.
  lifeline     docmill.processes.spawn: pipe end-of-file + os.getppid() check (what docmill uses)
  ppid-poll    the same watch thread without the pipe (os.getppid() every second)
  pdeathsig    prctl(PR_SET_PDEATHSIG) set in the forked child (preexec_fn), forked by the main thread
  pdeathsig-thread  the same, but forked from a short-lived thread (Prefect starts its server
               from a thread-pool thread): does the child survive its parent thread's end?
  none         a plain subprocess: stays behind with parent 1
And the launcher's start-up cost: `python -m MODULE` directly vs through docmill.lifeline.

    .venv/bin/python bench/lifeline.py
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLEEPER = "import time; time.sleep(60)"
POLL_ONLY = "import time; from docmill.lifeline import die_with_parent; die_with_parent(); time.sleep(60)"

PARENT = """
import ctypes, signal, subprocess, sys, threading, time
from docmill.processes import spawn
mode, code = sys.argv[1], sys.argv[2]
holder = {}
def pdeathsig():  # in the forked child, before exec: the signal follows the forking thread
    ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)
def start():
    if mode == "lifeline":
        holder["p"] = spawn([sys.executable, "-c", code], role="bench", runtime=sys.argv[3])
    elif mode.startswith("pdeathsig"):
        holder["p"] = subprocess.Popen([sys.executable, "-c", code], preexec_fn=pdeathsig)
    else:
        holder["p"] = subprocess.Popen([sys.executable, "-c", code])
if mode == "pdeathsig-thread":
    t = threading.Thread(target=start); t.start(); t.join()
else:
    start()
print(holder["p"].pid, flush=True)
time.sleep(60)
"""


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return True
    return state in (b"Z", b"X")


def trial(mode: str, code: str, runtime: str) -> float | None:
    """Seconds from SIGKILL of the parent until the child is gone; None: still there after 5 s.
    For pdeathsig-thread, a child that dies *before* the kill returns -1."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, mode, code, runtime], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    time.sleep(1.0)  # the child is settled (its watch thread runs)
    if gone(child):
        parent.kill()
        parent.wait()
        return -1.0
    t0 = time.monotonic()
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    while time.monotonic() - t0 < 5:
        if gone(child):
            return time.monotonic() - t0
        time.sleep(0.005)
    os.kill(child, signal.SIGKILL)
    return None


def startup(argv: list[str], n: int = 5) -> float:
    times = []
    for _ in range(n):
        t0 = time.monotonic()
        subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)
        times.append(time.monotonic() - t0)
    return statistics.median(times)


def main() -> None:
    runtime = f"/tmp/docmill-bench-lifeline-{os.getpid()}"
    ways = {
        "lifeline": ("lifeline", SLEEPER),
        "ppid-poll": ("plain", POLL_ONLY),
        "pdeathsig": ("pdeathsig", SLEEPER),
        "pdeathsig-thread": ("pdeathsig-thread", SLEEPER),
        "none": ("plain", SLEEPER),
    }
    print(f"{'way':18} {'trials':>6} {'child gone (s), median':>24} {'left behind':>12} {'died early':>11}")
    for name, (mode, code) in ways.items():
        results = [trial(mode, code, runtime) for _ in range(3)]
        ok = [r for r in results if r is not None and r >= 0]
        left = sum(r is None for r in results)
        early = sum(r is not None and r < 0 for r in results)
        med = f"{statistics.median(ok):.3f}" if ok else "-"
        print(f"{name:18} {len(results):>6} {med:>24} {left:>12} {early:>11}")
    direct = startup([sys.executable, "-m", "uvicorn", "--version"])
    wrapped = startup([sys.executable, "-m", "docmill.lifeline", "-m", "uvicorn", "--version"])
    print(
        f"start-up of `python -m uvicorn --version`: direct {direct:.3f} s, through docmill.lifeline "
        f"{wrapped:.3f} s (ratio {wrapped / direct:.2f})"
    )
    shutil.rmtree(runtime, ignore_errors=True)


if __name__ == "__main__":
    main()

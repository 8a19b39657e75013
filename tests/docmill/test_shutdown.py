"""The way out after Ctrl-C must not need anyone to say goodbye (docmill.shutdown, flows.cli): the
grace deadline outlives the handler (Prefect's engine may still be reporting to a server that is gone),
an error raised after the signal is the signal's (exit 130, the resume line, never "unexpected
ConnectError"), and the interpreter's teardown is bounded too. Real processes, real signals."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

AFTER_THE_FLOW = """
import os, signal, time
from docmill.shutdown import install
restore = install(1.0)
os.kill(os.getpid(), signal.SIGINT)
time.sleep(0.3)  # the handler ran: no new request, requests in flight finish
restore()  # the flow body ended; Prefect's engine goes on reporting...
time.sleep(60)  # ...to a server that is gone
"""

BROKEN_AFTER_THE_SIGNAL = """
import atexit, os, signal, sys, time
import flows.cli.main as cli

def command(_args):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.3)
    raise ConnectionRefusedError(111, "Connection refused")  # the orchestrator is gone

cli.COMMANDS["status"] = command
atexit.register(time.sleep, 60)  # a client flushing its events to nobody at exit
sys.argv = ["docmill", "status"]
sys.exit(cli.main())
"""

TWICE_THEN_AGAIN = """
import os, signal, sys, time
from docmill.logs import bind_run
from docmill.shutdown import install
bind_run("r-1")
install(30.0)
os.kill(os.getpid(), signal.SIGINT)
os.kill(os.getpid(), signal.SIGINT)  # the same stop delivered twice (`timeout -s INT`: child, then group)
time.sleep(0.3)
print("still finishing the requests in flight", file=sys.stderr, flush=True)
time.sleep(1.0)
os.kill(os.getpid(), signal.SIGINT)  # a second stop: leave now
time.sleep(60)
"""


def _run(code: str) -> tuple[int, str, float]:
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "DOCMILL_SHUTDOWN_GRACE_SECONDS": "30"},
    )
    return out.returncode, out.stderr, time.monotonic() - started


def test_the_grace_deadline_outlives_the_handler_until_the_command_is_over() -> None:
    code, err, took = _run(AFTER_THE_FLOW)
    assert code == 130 and took < 30, (code, err)
    assert err.count("docmill: interrupted (SIGINT)") == 1, err


def test_an_error_after_the_signal_is_the_signal_and_teardown_is_bounded() -> None:
    code, err, took = _run(BROKEN_AFTER_THE_SIGNAL)
    assert code == 130 and took < 30, (code, err)
    lines = [line for line in err.splitlines() if line.startswith("docmill:")]
    assert lines[-1].startswith("docmill: interrupted (SIGINT)") and "unexpected" not in err, err
    assert err.count("docmill: interrupted (SIGINT)") == 1, err


def test_one_stop_delivered_twice_still_finishes_and_a_second_stop_leaves_saying_so() -> None:
    code, err, took = _run(TWICE_THEN_AGAIN)
    assert code == 130 and took < 30, (code, err)
    assert "still finishing the requests in flight" in err, err
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith("docmill: interrupted (SIGINT); run r-1 left with requests in flight")
    ), err

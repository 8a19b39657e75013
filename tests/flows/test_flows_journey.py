"""A data engineer's first week, as docs/recipes.md (linked from the README) tells it: their own recipe
(the complete one the guide starts with), a run stopped by Ctrl-C sent the way a terminal sends it (to
the whole foreground process group, docmill's temporary Prefect server included), `status`, the same
command again, `review list`, `review correct`, `review show`, `report`, `eval`. The commands are read
from the guide's session block and run as the `docmill` command (its own process, Prefect and all);
every output line the guide shows must be printed, so the docs cannot drift from the product.

Asserted on what a person reads: the exit codes; Ctrl-C -> exit 130 within the grace period, no ERROR
line, the continue command; the same command again continues the run and pays for nothing twice (the
emulator's bill: no request body billed twice); report.md shows the correction.

The one difference from the guide: the commands talk to the suite's emulator (DOCMILL_API__BASE_URL, as
the README's "Offline and real API" shows) instead of a built-in one, so its bill can be read; its
"using the built-in emulator" line is therefore not printed. Requests are made slow (2 s) so that the
Ctrl-C lands while two are in flight (DOCMILL_API__CONCURRENCY=2).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from docmill.settings import Settings
from tests.fixtures.today import day_env

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "recipes.md"
GRACE = Settings().shutdown_grace_seconds
ERRORS = ("ERROR", "Traceback", "unexpected", "Exception")


def block(marker: str) -> str:
    """The fenced block that follows `<!-- journey: MARKER -->` in the guide."""
    text = GUIDE.read_text(encoding="utf-8")
    after = text.split(f"<!-- journey: {marker} -->", 1)[1]
    return after.split("```", 2)[1].split("\n", 1)[1]


def session() -> list[tuple[list[str], list[str], bool]]:
    """(argv after `docmill`, the output lines shown, whether a ^C is sent) per `$ docmill` line."""
    steps: list[tuple[list[str], list[str], bool]] = []
    for line in block("session").splitlines():
        if line.startswith("$ docmill "):
            steps.append((shlex.split(line)[2:], [], False))
        elif line == "^C":
            steps[-1] = (steps[-1][0], steps[-1][1], True)
        elif line.strip():
            steps[-1][1].append(line)
    return steps


def shown(line: str, run_id: str | None) -> re.Pattern[str]:
    """A line of the guide as a pattern: `…` is anything, RUN_ID the run's id."""
    pattern = re.escape(line).replace("…", ".*")
    if run_id:
        return re.compile(pattern.replace("RUN_ID", re.escape(run_id)))
    first = pattern.replace("RUN_ID", r"(?P<run>\d{8}-\d{6}-[0-9a-f]{6})", 1)
    return re.compile(first.replace("RUN_ID", "(?P=run)"))


def children_of(pid: int) -> list[int]:
    """Processes marked as started by docmill process `pid` (docmill.processes: DOCMILL_CHILD_OF)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and f"DOCMILL_CHILD_OF={pid}".encode() in (
                entry / "environ"
            ).read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc (Linux)")
def test_the_first_week_as_the_guide_tells_it(emulator: Any, tmp_path: Path) -> None:
    assert "docs/recipes.md" in (ROOT / "README.md").read_text()
    assert block("examples/recipes/contracts.py") == (ROOT / "examples/recipes/contracts.py").read_text()
    store = tmp_path / "docmill-store"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DOCMILL_", "PREFECT_", "ANTHROPIC_"))}
    env.update(day_env())
    env.update(
        {
            "DOCMILL_API__BASE_URL": emulator.base_url,
            "DOCMILL_API__CONCURRENCY": "2",
            "PYTHONUNBUFFERED": "1",
            "PREFECT_HOME": str(tmp_path / "prefect"),
            "DOCMILL_RUNTIME_DIR": str(tmp_path / "run"),
        }
    )
    run_id: str | None = None
    emulator.state.config.latency_ms = 2000.0
    for argv, lines, ctrl_c in session():
        argv = [str(store) if a == "./docmill-store" else a for a in argv]
        argv = [a.replace("RUN_ID", run_id) if run_id else a for a in argv]
        proc = subprocess.Popen(
            [sys.executable, "-m", "flows.cli", *argv],
            cwd=ROOT,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # a terminal's job
        )
        if ctrl_c:
            deadline = time.monotonic() + 300  # Prefect's temporary server starts first
            while emulator.state.accounting.received_by_path.get("/v1/messages", 0) < 1:
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground process group
            sent = time.monotonic()
        out, err = proc.communicate(timeout=600)
        said = (out + err).splitlines()
        what = f"docmill {' '.join(argv)}\n--- stdout\n{out}\n--- stderr\n{err}"
        if ctrl_c:
            took = time.monotonic() - sent
            assert proc.returncode == 130 and took < GRACE, (took, what)
            emulator.state.config.latency_ms = 0.0
            assert err.strip().splitlines()[-1].startswith("docmill: interrupted (SIGINT); run "), what
            deadline = time.monotonic() + 10
            while children_of(proc.pid) and time.monotonic() < deadline:  # they die with it (lifeline)
                time.sleep(0.1)
            assert children_of(proc.pid) == [], "a helper process outlived docmill"
        else:
            assert proc.returncode == 0, what
        assert [x for x in err.splitlines() if any(word in x for word in ERRORS)] == [], what
        for line in lines:
            if "built-in emulator" in line:  # see the module docstring
                continue
            pattern = shown(line, run_id)
            match = next((m for m in map(pattern.fullmatch, said) if m), None)
            assert match, f"the guide shows\n  {line}\nbut docmill printed:\n{what}"
            run_id = run_id or match.groupdict().get("run")
    billed = [b.body_sha256 for b in emulator.state.accounting.billed]
    assert billed and len(billed) == len(set(billed)), "a request was paid for twice"
    assert run_id is not None
    report = (store / "runs" / run_id / "report.md").read_text().splitlines()
    for line in block("report.md").splitlines():
        assert any(shown(line, run_id).fullmatch(x) for x in report), (line, report)

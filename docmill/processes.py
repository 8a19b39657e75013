"""Helper processes that die with docmill, and the reaping of any an earlier, killed run left.

`spawn` starts the child through `docmill.lifeline` (which see): it exits when this process is gone,
however it ended (SIGKILL, the OOM killer). A Python child (`python -m MODULE ...`, `-c CODE` or
`SCRIPT.py ...`) runs in the launcher's own process; any other program gets a small supervisor.
Each child is marked (`DOCMILL_CHILD_OF=<our pid>` in its environment) and recorded in a pid file
under the runtime folder (settings.runtime_dir).

`reap_stale` is the backstop, run when `docmill run` / `resume` starts: a recorded child whose
docmill process is gone but which still runs (its watch could not act: it was stopped, or started
by an older docmill) is stopped, and only if it is the same process (start time) and carries the
mark: never an unrelated server that happens to reuse the pid.

Callers: flows.orchestration.server (the ephemeral Prefect server), flows.cli (reaping at start).
Processes that multiprocessing starts (tasks.batch.ingest) call `lifeline.die_with_parent`.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from docmill.lifeline import ENV_CHILD_OF, ENV_FD

STOP_WAIT = 5.0  # seconds a stale process gets to stop after SIGTERM before SIGKILL


class ChildRecord(TypedDict):
    """One pid file: a child docmill started, and the docmill process that started it."""

    pid: int
    started: int | None  # start time in clock ticks since boot (/proc/<pid>/stat), None off Linux
    parent: int
    parent_started: int | None
    role: str
    command: list[str]


SLOTS = 64  # processes that may hold a slot of one folder at once
_pipe: tuple[int, int, int] | None = None  # (pid that made it, read end, write end)
_slots: dict[tuple[Path, str], tuple[int, Path]] = {}  # (folder, stem) -> (lock fd, the slot's file)
_pipe_lock = threading.Lock()
_mine: list[Path] = []


def runtime_dir(configured: str | None = None) -> Path:
    """Where pid files live: the setting, else $XDG_RUNTIME_DIR/docmill, else <tmp>/docmill-<uid>."""
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return Path(xdg) / "docmill"
    return Path(tempfile.gettempdir()) / f"docmill-{os.getuid()}"


def _lifeline_fd() -> int:
    """The read end of this process's lifeline pipe (made once; the write end is never closed)."""
    global _pipe
    with _pipe_lock:
        if _pipe is None or _pipe[0] != os.getpid():  # a forked copy makes its own
            _pipe = (os.getpid(), *os.pipe())  # non-inheritable: only pass_fds hands the read end on
        return _pipe[1]


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), None if it is gone or not on Linux."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat.rsplit(b")", 1)[1].split()[19])  # field 22; the name may hold spaces


def launcher(argv: Sequence[str]) -> list[str]:
    """The command line that runs `argv` under the lifeline."""
    head = [sys.executable, "-m", "docmill.lifeline"]
    if len(argv) > 1 and argv[0] == sys.executable and (argv[1] in ("-m", "-c") or argv[1][:1] != "-"):
        return [*head, *argv[1:]]  # -m MODULE, -c CODE or SCRIPT.py: runs in the launcher's process
    return [*head, "--", *argv]


def spawn(
    argv: Sequence[str],
    *,
    role: str,
    env: Mapping[str, str] | None = None,
    runtime: str | None = None,
    **popen: Any,
) -> subprocess.Popen[Any]:
    """Start `argv` as a child that exits when this process does; `popen` goes to subprocess.Popen.
    The child gets a session of its own: a terminal's Ctrl-C and hang-up are docmill's to handle; a
    helper that died of them first would leave docmill's graceful shutdown talking to nobody (the
    Prefect server: minutes of connection errors)."""
    fd = _lifeline_fd()
    child_env = {**(os.environ if env is None else env), ENV_CHILD_OF: str(os.getpid()), ENV_FD: str(fd)}
    pass_fds = (*popen.pop("pass_fds", ()), fd)
    popen.setdefault("start_new_session", True)
    proc = subprocess.Popen(launcher(argv), env=child_env, pass_fds=pass_fds, **popen)
    _record(proc.pid, role, list(argv), runtime)
    return proc


def _record(pid: int, role: str, argv: list[str], runtime: str | None) -> None:
    rec = ChildRecord(
        pid=pid,
        started=start_time(pid),
        parent=os.getpid(),
        parent_started=start_time(os.getpid()),
        role=role,
        command=argv[:6],
    )
    folder = runtime_dir(runtime)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{pid}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec))
        tmp.replace(path)
    except OSError:  # no pid file: the lifeline still stops the child
        return
    if not _mine:
        atexit.register(_forget_exited)
    _mine.append(path)


def _forget_exited() -> None:
    """At a normal exit: drop the pid files of children that have exited (the rest stay for reaping)."""
    for path in _mine:
        rec = _load(path)
        if rec is None or not _alive(rec["pid"], rec["started"]):
            path.unlink(missing_ok=True)


def _load(path: Path) -> ChildRecord | None:
    try:
        rec: ChildRecord = json.loads(path.read_text())
        int(rec["pid"]), int(rec["parent"])
        return rec
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _alive(pid: int, started: int | None) -> bool:
    """The very process recorded: running, and started when it was (not a reused pid)."""
    return started is not None and start_time(pid) == started


def _marked(pid: int, parent: int) -> bool:
    """Its environment says docmill process `parent` started it."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{ENV_CHILD_OF}={parent}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def reap_stale(runtime: str | None = None) -> list[ChildRecord]:
    """Stop recorded children whose docmill process is gone; return those that were still running."""
    folder = runtime_dir(runtime)
    try:
        paths = sorted(folder.glob("*.json"))
    except OSError:
        return []
    stale: list[ChildRecord] = []
    for path in paths:
        rec = _load(path)
        if rec is not None and _alive(rec["parent"], rec["parent_started"]):
            continue  # its docmill still runs: its business
        if rec is not None and _alive(rec["pid"], rec["started"]) and _marked(rec["pid"], rec["parent"]):
            with contextlib.suppress(OSError):
                os.kill(rec["pid"], signal.SIGTERM)
                os.kill(rec["pid"], signal.SIGCONT)  # a stopped process acts on it too
                stale.append(rec)
        path.unlink(missing_ok=True)
    deadline = time.monotonic() + STOP_WAIT
    while any(_alive(r["pid"], r["started"]) for r in stale) and time.monotonic() < deadline:
        time.sleep(0.05)
    for r in stale:
        if _alive(r["pid"], r["started"]):
            with contextlib.suppress(OSError):
                os.kill(r["pid"], signal.SIGKILL)
    return stale


def reaped_line(stale: list[ChildRecord]) -> str:
    """One line for the user about what `reap_stale` stopped."""
    what = ", ".join(f"{r['role']} (pid {r['pid']})" for r in stale)
    return f"docmill: stopped {len(stale)} process(es) left running by an earlier docmill run that was killed: {what}"


def hold_slot(folder: Path, stem: str, suffix: str) -> Path:
    """`folder/<stem>-N<suffix>` for the first N no other live process holds, held by this one for its
    life (an flock on `<stem>-N.lock` that the kernel releases however the holder ends); the same path
    on every call. Raises OSError when the folder cannot be used or all `SLOTS` are taken. Callers:
    flows.orchestration.server (the temporary server's own SQLite database)."""
    if (folder, stem) in _slots:
        return _slots[(folder, stem)][1]
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(SLOTS):
        fd = os.open(folder / f"{stem}-{n}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        _slots[(folder, stem)] = (fd, folder / f"{stem}-{n}{suffix}")
        return _slots[(folder, stem)][1]
    raise OSError(f"all {SLOTS} slots of {folder / stem} are held by running processes")


def held_slots() -> list[tuple[int, Path]]:
    """(lock fd, file) of every slot this process holds (a child given the fd holds the slot too)."""
    return list(_slots.values())

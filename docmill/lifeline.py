"""The child side of `docmill.processes`: a process docmill starts exits when docmill is gone,
however docmill ended (SIGKILL and the OOM killer included). Standard library only, so it costs
a child nothing to import.

    python -m docmill.lifeline -m MODULE [ARGS...]     run MODULE as __main__ in this process
    python -m docmill.lifeline -c CODE [ARGS...]       run CODE in this process
    python -m docmill.lifeline SCRIPT.py [ARGS...]     run a script in this process
    python -m docmill.lifeline -- COMMAND [ARGS...]    run any program as a child, stopped with us

`die_with_parent` starts a daemon thread that blocks on a pipe whose write end only the parent
holds: the kernel closes it when the parent dies, the read returns end-of-file and the thread acts
at once. It also checks `os.getppid()` every `POLL` seconds, for a forked copy of the parent that
keeps the pipe open. Then the process sends itself SIGTERM (a server shuts down cleanly) and, still
alive `GRACE` seconds later, exits hard.

Not PR_SET_PDEATHSIG: the kernel sends that signal when the *thread* that forked the child ends,
not the process. Prefect starts its ephemeral server from a thread-pool thread that ends while the
run goes on (see bench/lifeline.py), so the server would be killed under a live run.

Used by `docmill.processes.spawn` (the Prefect server) and, as `watch_parent_then`, by the batch
gate's worker processes (`tasks.batch.ingest`), which multiprocessing starts.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import runpy
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

ENV_CHILD_OF = "DOCMILL_CHILD_OF"  # pid of the docmill process; marks the process as docmill's
ENV_FD = "DOCMILL_LIFELINE_FD"  # read end of the parent's lifeline pipe, inherited by the child
GRACE = 3.0  # seconds between SIGTERM to itself and a hard exit
POLL = 1.0  # seconds between checks of os.getppid()

_last_words: list[Callable[[], None]] = []  # run just before a hard exit (stop our own child)


def die_with_parent(parent_pid: int | None = None, fd: int | None = None) -> threading.Thread:
    """Exit this process when its parent `parent_pid` (default: the current parent) is gone;
    `fd` is readable at end-of-file once the parent is gone (a lifeline pipe, a sentinel)."""
    parent = os.getppid() if parent_pid is None else parent_pid
    watch = threading.Thread(target=_watch, args=(parent, fd), name="docmill-lifeline", daemon=True)
    watch.start()
    return watch


def _watch(parent: int, fd: int | None) -> None:
    while os.getppid() == parent:
        if fd is None:
            time.sleep(POLL)
            continue
        try:
            ready, _, _ = select.select([fd], [], [], POLL)
        except (OSError, ValueError):  # the fd was closed under us: fall back to polling
            fd = None
            continue
        if ready:  # nothing is ever written: readable means end-of-file, the parent is gone
            break
    _leave()


def _leave() -> None:
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(GRACE)
    finally:
        for last in _last_words:
            try:
                last()
            except Exception:
                pass
        os._exit(1)


def watch_parent_then(initializer: bytes) -> None:
    """A multiprocessing initializer: watch the parent first, then unpickle and run the real
    initializer (a pickled `(function, *args)`). Unpickling it imports the worker's modules, which
    takes seconds on a busy machine; a parent killed meanwhile must not leave the worker behind.
    A terminal's Ctrl-C reaches the worker too (it shares docmill's process group): it is ignored,
    since stopping is docmill's decision (docmill.shutdown), and a worker that died of it would
    break the pool under docmill's graceful shutdown."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None:  # its sentinel reads end-of-file once it is gone
        die_with_parent(parent.pid, parent.sentinel)
    fn, *args = pickle.loads(initializer)
    fn(*args)


def _from_env() -> tuple[int | None, int | None]:
    """The parent and lifeline fd named in the environment, taken out of it (children of ours
    must not carry the marks)."""
    parent = os.environ.pop(ENV_CHILD_OF, None)
    fd = os.environ.pop(ENV_FD, None)
    return (int(parent) if parent else None), (int(fd) if fd else None)


def _run_command(argv: list[str]) -> int:
    """Any program: started before the watch thread exists (so the fork is safe), with the
    parent-death signal set by our main thread, which lives as long as this process."""
    me, (parent, fd) = os.getpid(), _from_env()
    child = subprocess.Popen(argv, preexec_fn=lambda: _kill_me_with_parent(me))

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    _last_words.append(child.kill)
    die_with_parent(parent, fd)
    return child.wait()


def _kill_me_with_parent(parent: int) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it died before the signal was set
        os._exit(1)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "--":
        return _run_command(argv[1:])
    die_with_parent(*_from_env())
    if argv[0] == "-m" and len(argv) > 1:
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0
    if argv[0] == "-c" and len(argv) > 1:
        sys.argv = ["-c", *argv[2:]]
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        return 0
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Prefect's temporary API server, started first thing when a run will need one.

A flow run without PREFECT_API_URL starts a temporary server (flows.orchestration.server.OwnedServer)
only after importing Prefect's server package (~6 s of CPU), and the server's process then imports
it again. `prespawn()` starts that process at once, with the same command, through
docmill.processes.spawn (it dies with docmill) and on the database slot `OwnedServer` would use, so
it boots on the other core while docmill imports and checks its inputs; `OwnedServer` takes it over
(`port`, `claim`). A Prefect profile naming an API URL, or settings that change the server's
environment, get it stopped (`discard`, `fits`). Light on purpose: it imports nothing of Prefect.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

ROLE = "prefect-server"
DB_URL = "PREFECT_SERVER_DATABASE_CONNECTION_URL"
PORTS = range(8000, 9000)  # where Prefect looks for a free port too
_early: dict[str, Any] = {}  # "port": int, "proc": the started process, until claimed


def server_argv(port: int) -> list[str]:
    """The command of Prefect 3.9's SubprocessASGIServer._run_uvicorn_command."""
    spec = importlib.util.find_spec("prefect")
    assert spec is not None and spec.submodule_search_locations
    app_dir = Path(next(iter(spec.submodule_search_locations))).parent
    flags = f"--factory prefect.server.api.server:create_app --host 127.0.0.1 --port {port} --log-level error"
    return [sys.executable, "-m", "uvicorn", "--app-dir", str(app_dir), *flags.split(), "--lifespan", "on"]


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {
        **os.environ,
        "PREFECT_UI_ENABLED": "0",
        "PREFECT__SERVER_EPHEMERAL": "1",
        "PREFECT__SERVER_FINAL": "1",
        **(extra or {}),
    }


def db_url(db: Path) -> str:
    return f"sqlite+aiosqlite:///{db}"


# Client-side settings a Prefect profile sets (the default profile allows ephemeral mode): Prefect's
# own dump of the settings names them, the early process reads the same profile itself.
CLIENT_ONLY = frozenset({"PREFECT_SERVER_EPHEMERAL_ENABLED", "PREFECT_SERVER_ALLOW_EPHEMERAL_MODE"})


def _prefect_part(env: dict[str, str]) -> dict[str, str]:
    """The Prefect settings of an environment, values as Prefect reads them: `false` from
    os.environ and `False` from Prefect's own dump of its settings are the same setting."""
    return {
        k: v.lower() if v.lower() in ("true", "false") else v
        for k, v in env.items()
        if k.startswith("PREFECT") and k not in CLIENT_ONLY
    }


def fits(env: dict[str, str]) -> bool:
    """Whether the process `prespawn` started runs with the Prefect settings of `env` (the
    environment `OwnedServer` would give a server it starts itself)."""
    return "env" in _early and _prefect_part(_early["env"]) == _prefect_part(env)


def _free_port() -> int | None:
    for _ in range(10):
        port = random.choice(PORTS)
        with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
            try:
                sock.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    return None


def prespawn(runtime: str | None = None) -> None:
    """Start the temporary server's process now when no PREFECT_API_URL is in the environment and
    Prefect is not imported yet (a fresh `docmill` process; in one that has Prefect loaded there is
    little left to overlap, and a test harness's server may be the default)."""
    if _early or os.environ.get("PREFECT_API_URL") or "prefect" in sys.modules:
        return
    if os.environ.get(DB_URL) or os.environ.get("PREFECT_API_DATABASE_CONNECTION_URL"):
        return  # the user's own database: started the usual way
    port = _free_port()
    if port is None:  # Prefect finds one itself later
        return
    from docmill.processes import held_slots, hold_slot, spawn

    try:
        db = hold_slot(
            Path(os.environ.get("PREFECT_HOME") or "~/.prefect").expanduser() / "docmill", "prefect", ".db"
        )
    except OSError:
        return  # OwnedServer says why, if it comes to a start
    env = server_env({DB_URL: db_url(db)})
    held = tuple(fd for fd, path in held_slots() if path == db)
    proc = spawn(server_argv(port), role=ROLE, env=env, runtime=runtime, pass_fds=held)
    _early.update(port=port, proc=proc, env=env)


def port() -> int | None:
    """The port of a process `prespawn` started and nobody claimed yet."""
    return _early.get("port") if "proc" in _early else None


def claim(port: int | None) -> subprocess.Popen[Any] | None:
    """The started process if it listens on `port` (once), else None."""
    if port is None or _early.get("port") != port or "proc" not in _early:
        return None
    proc: subprocess.Popen[Any] = _early.pop("proc")
    return proc if proc.poll() is None else None


def discard() -> None:
    """Stop a started process nobody will claim (an API URL came from a Prefect profile)."""
    _early.pop("env", None)
    stop(_early.pop("proc", None))


def stop(proc: subprocess.Popen[Any] | None) -> None:
    """Stop a server process that may still be starting, and wait until its port is free again."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

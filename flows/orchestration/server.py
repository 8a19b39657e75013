"""Prefect's ephemeral server, started so that it dies with docmill.

With no PREFECT_API_URL, the first Prefect client of a flow run starts a temporary API server
(uvicorn, ~190 MB) as a child process and stops it at a normal exit only: a SIGKILLed run would
leave it running. `adopt_ephemeral_server` registers `OwnedServer` as the process's default server
(the slot Prefect's `prefect_test_harness` fills), which starts Prefect's usual command through
`docmill.processes.spawn` (marked, recorded, in a session of its own, stopped when this process is
gone), or takes over the one flows.orchestration.boot started first thing with the same environment.

Its database is docmill's own, not `$PREFECT_HOME/prefect.db`, which every other Prefect process
of the user shares (two servers writing one SQLite file fail with "database is locked"):
`server_environment` gives each running docmill process a slot `$PREFECT_HOME/docmill/prefect-N.db`,
locked for the life of the process and its server (docmill.processes.hold_slot), so runs one after
another reuse slot 0 (no migrations to wait for) and runs at the same time never share a file. A
database URL the user configured is kept.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Any

from prefect.server.api.server import SubprocessASGIServer
from prefect.settings import PREFECT_API_URL, get_current_settings

from docmill.errors import OrchestratorUnavailable
from docmill.processes import held_slots, hold_slot, spawn
from docmill.settings import get_settings
from flows.orchestration import boot as prefect_boot

ROLE = prefect_boot.ROLE
DB_URL = prefect_boot.DB_URL
_STARTING = threading.Lock()


def server_environment() -> dict[str, str]:
    """The temporary server's environment: Prefect's own (as its SubprocessASGIServer builds it), with
    docmill's database unless one is configured."""
    configured = get_current_settings().to_environment_variables(exclude_unset=True)
    env = prefect_boot.server_env(configured)
    if DB_URL not in configured and "PREFECT_API_DATABASE_CONNECTION_URL" not in os.environ:
        try:
            db = hold_slot(Path(get_current_settings().home) / "docmill", "prefect", ".db")
        except OSError as e:
            raise OrchestratorUnavailable(
                f"no database for Prefect's temporary server under {get_current_settings().home}: {e}",
                hint="point PREFECT_API_URL at a running Prefect server, or run with --no-prefect",
            ) from e
        env[DB_URL] = prefect_boot.db_url(db)
    return env


class OwnedServer(SubprocessASGIServer):
    """SubprocessASGIServer whose uvicorn process is started by `docmill.processes.spawn`."""

    def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
        # the command and environment of prefect 3.9's SubprocessASGIServer._run_uvicorn_command; a
        # process flows.orchestration.boot started on this port at the run's start is taken over instead
        early = prefect_boot.claim(self.port)
        if early is not None:
            return early
        assert self.port is not None
        env = server_environment()
        held = tuple(fd for fd, db in held_slots() if env.get(DB_URL, "").endswith(str(db)))
        # the server holds its database's slot too: a killed docmill's server, still stopping, keeps it
        return spawn(
            prefect_boot.server_argv(self.port),
            role=ROLE,
            env=env,
            runtime=get_settings().runtime_dir,
            pass_fds=held,
        )

    def start(self, timeout: int | None = None) -> None:
        """Prefect's start, with `settings.prefect_start_timeout_seconds` to come up (Prefect's own
        default, 20 s, is too little on a busy machine) and one more try on a new port; a second
        failure is one docmill error naming the setting, never Prefect's bare RuntimeError. One start
        at a time (Prefect marks a server running before it answers)."""
        with _STARTING:
            if self.running:
                return
            if prefect_boot.port() is not None and not prefect_boot.fits(server_environment()):
                prefect_boot.discard()  # started with another environment (a profile's settings): not ours
            self.port = self.port or prefect_boot.port()  # the one started first thing, if any
            seconds = float(timeout or get_settings().prefect_start_timeout_seconds)
            detail = ""
            for _ in range(2):
                try:
                    super().start(timeout=seconds)  # type: ignore[arg-type]  # Prefect compares, never rounds
                    return
                except RuntimeError as e:
                    detail = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
                    # stop it (it may still be starting) and free its port; unlike `stop`, this
                    # server stays the process's default for the next try
                    proc, self.server_process = self.server_process, None
                    self.running, self.port = False, None
                    prefect_boot.stop(proc)
            raise OrchestratorUnavailable(
                f"Prefect's temporary API server did not start within {seconds:g} s (tried twice): {detail}",
                hint="give it more time with DOCMILL_PREFECT_START_TIMEOUT_SECONDS, point PREFECT_API_URL at a "
                "running Prefect server, or run with --no-prefect; nothing was sent",
                setting="DOCMILL_PREFECT_START_TIMEOUT_SECONDS",
                seconds=seconds,
                detail=detail,
            )


def adopt_ephemeral_server() -> bool:
    """Make the ephemeral server Prefect may start in this process an `OwnedServer`. False when
    there is nothing to adopt: an API URL is set, or a default server exists already (one that
    runs, or a test harness's)."""
    if PREFECT_API_URL.value():
        return False
    return isinstance(OwnedServer(), OwnedServer)  # registers itself as the default unless one exists

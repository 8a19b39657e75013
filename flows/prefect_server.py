"""Prefect's ephemeral server, started so that it dies with docmill.

With no PREFECT_API_URL, the first Prefect client of a flow run starts a temporary API server
(`python -m uvicorn ... prefect.server.api.server:create_app`, ~190 MB) as a child process and
stops it at a normal exit. A SIGKILLed run used to leave it running forever. `adopt_ephemeral_server`
registers `OwnedServer` as the process's default server (the same slot Prefect's own
`prefect_test_harness` fills), so that Prefect starts exactly its usual command, but through
`docmill.processes.spawn`: marked, recorded, and stopped when this process is gone. The process
flows.prefect_boot started at the run's start, if any, is the one it takes.
"""

from __future__ import annotations

import subprocess
import threading
from typing import Any

from prefect.server.api.server import SubprocessASGIServer
from prefect.settings import PREFECT_API_URL, get_current_settings

from docmill.errors import OrchestratorUnavailable
from docmill.processes import spawn
from docmill.settings import get_settings
from flows import prefect_boot

ROLE = prefect_boot.ROLE
_STARTING = threading.Lock()


class OwnedServer(SubprocessASGIServer):
    """SubprocessASGIServer whose uvicorn process is started by `docmill.processes.spawn`."""

    def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
        # the command and environment of prefect 3.9's SubprocessASGIServer._run_uvicorn_command; a
        # process flows.prefect_boot started on this port at the run's start is taken over instead
        early = prefect_boot.claim(self.port)
        if early is not None:
            return early
        assert self.port is not None
        env = prefect_boot.server_env(get_current_settings().to_environment_variables(exclude_unset=True))
        return spawn(
            prefect_boot.server_argv(self.port), role=ROLE, env=env, runtime=get_settings().runtime_dir
        )

    def start(self, timeout: int | None = None) -> None:
        """Prefect's start, with `settings.prefect_start_timeout_seconds` to come up (Prefect's own
        default, 20 s, is too little on a busy machine) and one more try on a new port; a second
        failure is one docmill error naming the setting, never Prefect's bare RuntimeError. One start
        at a time (Prefect marks a server running before it answers)."""
        with _STARTING:
            self._start(timeout)

    def _start(self, timeout: int | None) -> None:
        if self.running:
            return
        self.port = self.port or prefect_boot.port()  # the one started first thing, if any
        seconds = float(timeout or get_settings().prefect_start_timeout_seconds)
        detail = ""
        for _ in range(2):
            try:
                super().start(timeout=seconds)  # type: ignore[arg-type]  # Prefect compares, never rounds
                return
            except RuntimeError as e:
                detail = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
                self._drop_process()
        raise OrchestratorUnavailable(
            f"Prefect's temporary API server did not start within {seconds:g} s (tried twice): {detail}",
            hint="give it more time with DOCMILL_PREFECT_START_TIMEOUT_SECONDS, point PREFECT_API_URL at a "
            "running Prefect server, or run with --no-prefect; nothing was sent",
            setting="DOCMILL_PREFECT_START_TIMEOUT_SECONDS",
            seconds=seconds,
            detail=detail,
        )

    def _drop_process(self) -> None:
        """Stop a server that did not come up in time (it may still be starting) and free its port;
        unlike `stop`, this server stays the process's default for the next try."""
        proc, self.server_process = self.server_process, None
        self.running, self.port = False, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def adopt_ephemeral_server() -> bool:
    """Make the ephemeral server Prefect may start in this process an `OwnedServer`. False when
    there is nothing to adopt: an API URL is set, or a default server exists already (one that
    runs, or a test harness's)."""
    if PREFECT_API_URL.value():
        return False
    return isinstance(OwnedServer(), OwnedServer)  # registers itself as the default unless one exists

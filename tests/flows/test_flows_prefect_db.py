"""docmill's temporary Prefect server keeps a database of its own (flows.orchestration.server): not Prefect's
default `$PREFECT_HOME/prefect.db`, which every other Prefect process of the user shares (two SQLite
writers: "database is locked" tracebacks), one slot per running docmill process; a configured URL is
kept; and a flow called from Python gets the same server as the CLI. No server is started here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from prefect.settings import PREFECT_HOME, PREFECT_SERVER_DATABASE_CONNECTION_URL, temporary_settings

from docmill.processes import hold_slot
from flows.orchestration.server import DB_URL, server_environment

ROOT = Path(__file__).resolve().parents[2]
HOLD = """
import sys, time
from pathlib import Path
from docmill.processes import hold_slot
print(hold_slot(Path(sys.argv[1]), "prefect", ".db").name, flush=True)
time.sleep(30)
"""


def test_each_running_docmill_process_gets_a_database_of_its_own(tmp_path: Path) -> None:
    folder = tmp_path / "docmill"
    mine = hold_slot(folder, "prefect", ".db")
    assert (
        mine == hold_slot(folder, "prefect", ".db") and mine.name == "prefect-0.db"
    )  # one per process, reused
    other = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "prefect-1.db"  # 0 is ours
    finally:
        other.kill()
        other.wait()
    again = subprocess.run(
        [sys.executable, "-c", HOLD.replace("time.sleep(30)", ""), str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert again.stdout.strip() == "prefect-1.db"  # the killed holder's slot is free again


def test_the_server_uses_its_own_database_unless_one_is_configured(tmp_path: Path) -> None:
    # the suite's Prefect harness may have configured a database: this is the case of none configured
    with temporary_settings(
        updates={PREFECT_HOME: tmp_path / "home"}, restore_defaults={PREFECT_SERVER_DATABASE_CONNECTION_URL}
    ):
        url = server_environment()[DB_URL]
    assert url.startswith(f"sqlite+aiosqlite:///{tmp_path}/home/docmill/prefect-") and url.endswith(".db")
    assert url != f"sqlite+aiosqlite:///{tmp_path}/home/prefect.db"
    mine = f"sqlite+aiosqlite:///{tmp_path}/mine.db"
    with temporary_settings(updates={PREFECT_SERVER_DATABASE_CONNECTION_URL: mine}):
        assert server_environment()[DB_URL] == mine


def test_a_flow_called_from_python_gets_docmills_server() -> None:
    code = (
        "import flows.orchestration.prefect_flows\n"
        "from prefect.server.api.server import SubprocessASGIServer\n"
        "print(type(SubprocessASGIServer._instances.get(None)).__name__)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": "/nonexistent", "PREFECT_HOME": "/tmp/p"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "OwnedServer", out.stderr[-2000:]

"""Every test starts from a fresh emulator. The session's server (`_emulator_session`) is shared by
every test of a pytest worker, and what a test file leaves behind stays: a rate limit on a frozen
virtual clock (the last emulator tests of tests/tasks/api/test_pacing.py and
tests/emulator/test_emulator_validation.py) is a bucket that never refills, so a realtime run on it
gets a 429 for every attempt and crawls for tens of minutes, past the suite's timeout, its chunk
threads waiting on the event loop while the loop waits for the pacer. So a test asks for `emulator`
(reset before it), and a module-scoped fixture that shares one run between tests reads the session's
server only as `fresh(_emulator_session)` (tests.fixtures.emulator)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOME = "tests/fixtures/emulator.py"
SESSION = "_emulator_session"


def raw_uses(root: Path) -> list[str]:
    """`file:line` of each use of `_emulator_session` under `root` that is not `fresh(_emulator_session)`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        if rel == HOME:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        through_fresh = {
            id(call.args[0])
            for call in ast.walk(tree)
            if isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "fresh"
            and call.args
        }
        found += [
            f"{rel}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Name) and node.id == SESSION and id(node) not in through_fresh
        ]
    return found


def test_the_session_emulator_is_read_only_with_fresh_state() -> None:
    assert raw_uses(ROOT / "tests") == []


def test_a_raw_use_of_the_session_emulator_is_found(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_a.py").write_text(
        "def run(_emulator_session):\n"
        "    ok = settings_for(fresh(_emulator_session))\n"
        "    return _emulator_session.state.accounting.billed\n"
    )
    assert raw_uses(tests) == ["tests/test_a.py:3"]

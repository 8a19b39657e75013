"""One mechanism for each thing done in several places: a second one fails here.

- Compare-and-swap: only `checkpoints/cas.py` (and the store backends that implement them) call the
  store's ETag read (`get_with_etag`) or its conditional replace (`put_if_match`). Every other module
  goes through `cas.swap` / `cas.update_json` / `cas.read` + `cas.write`, so there is one loop with
  one jitter, one bound and one meaning of "gave up".
- Retries: tenacity, built in `tasks/api/retrying.py` (API calls) and `checkpoints/retry.py` (store
  calls). A retry loop written by hand is a loop (`for`, `while`, `async for`) holding a `try` whose
  `except` branch waits before going round again: it calls something named like `sleep`, `backoff`
  or `wait`, awaited or not; or it falls through (ends in neither `raise` nor `return`) while the
  loop calls a `sleep` / `backoff` elsewhere. Loops that only poll for a condition, with a reason,
  are listed in `POLLS`. Not caught: a retry by recursion, or one whose wait has another name.
- The SDK: only `docmill/sdk.py` imports `anthropic` or `httpx2`; every other module reaches them
  through its faces (imported when first read), or imports them under `if TYPE_CHECKING:` for
  annotations. A run that sends nothing never pays their import (tests/flows/test_flows_no_sdk.py).
- Crash tests' stops: one hook, `docmill/crash_points.py`; no other module defines a `crash_point`
  or names a `DOCMILL_*CRASH*` / `DOCMILL_*KILL*` environment variable of its own.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.layout.test_import_graph import parsed

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("docmill", "flows", "tasks", "checkpoints", "emulator")
CAS_CALLS = frozenset({"get_with_etag", "put_if_match"})
CAS_HOMES = ("checkpoints/cas.py", "checkpoints/store/")
RETRY_HOMES = ("tasks/api/retrying.py", "checkpoints/retry.py")
POLLS = {
    "docmill/lifeline.py": "watches the parent process; a closed pipe falls back to polling",
}
WAITS = re.compile(r"sleep|backoff|wait", re.IGNORECASE)
SLEEPS = re.compile(r"sleep|backoff", re.IGNORECASE)
SDK_PACKAGES = ("anthropic", "httpx2")
SDK_HOME = "docmill/sdk.py"
CRASH_HOME = "docmill/crash_points.py"
CRASH_NAMES = re.compile(r"^DOCMILL_\w*(CRASH|KILL)")


def product_files(root: Path = ROOT) -> Iterator[tuple[str, ast.Module]]:
    for top in PRODUCT:
        for path in sorted((root / top).rglob("*.py")):
            yield path.relative_to(root).as_posix(), parsed(path)


def cas_calls_outside_cas(files: Iterator[tuple[str, ast.Module]]) -> list[str]:
    """`file:line name` of each call of a conditional-write primitive outside its homes."""
    found = []
    for rel, tree in files:
        if rel.startswith(CAS_HOMES):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in CAS_CALLS
            ):
                found.append(f"{rel}:{node.lineno} {node.func.attr}")
    return found


def test_only_cas_reads_with_an_etag_or_writes_if_match() -> None:
    assert cas_calls_outside_cas(product_files()) == []


def test_the_cas_check_sees_a_loop_of_its_own() -> None:
    own_loop = (
        "def bump(store, key):\n"
        "    for _ in range(10):\n"
        "        data, etag = store.get_with_etag(key)\n"
        "        try:\n"
        "            return store.put_if_match(key, data + b'!', etag)\n"
        "        except Exception:\n"
        "            continue\n"
    )
    files = iter([("checkpoints/cas.py", ast.parse(own_loop)), ("checkpoints/other.py", ast.parse(own_loop))])
    assert cas_calls_outside_cas(files) == [
        "checkpoints/other.py:3 get_with_etag",
        "checkpoints/other.py:5 put_if_match",
    ]


def _called(node: ast.AST, pattern: re.Pattern[str]) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if pattern.search(name):
                return True
    return False


def retry_loops(files: Iterator[tuple[str, ast.Module]]) -> list[str]:
    """`file:line` of each loop that retries by hand (see the module docstring)."""
    found = []
    for rel, tree in files:
        if rel.startswith(RETRY_HOMES) or rel in POLLS:
            continue
        for loop in ast.walk(tree):
            if not isinstance(loop, (ast.For, ast.While, ast.AsyncFor)):
                continue
            handlers = [h for t in ast.walk(loop) if isinstance(t, ast.Try) for h in t.handlers]
            waits = any(_called(h, WAITS) for h in handlers)
            falls = any(not isinstance(h.body[-1], (ast.Raise, ast.Return)) for h in handlers)
            if waits or (falls and _called(loop, SLEEPS)):
                found.append(f"{rel}:{loop.lineno}")
    return found


def test_no_retry_loop_written_by_hand() -> None:
    assert retry_loops(product_files()) == []


@pytest.mark.parametrize(
    "loop",
    [
        # the written-out loop the event-loop client had
        "async def call(self):\n"
        "    while True:\n"
        "        try:\n"
        "            return await self.send()\n"
        "        except Exception as e:\n"
        "            if retryable(e):\n"
        "                await self._backoff(1.0)\n"
        "                continue\n"
        "            raise\n",
        # the batch endpoints' loop
        "def call(self, fn):\n"
        "    for n in range(1, self.attempts + 1):\n"
        "        try:\n"
        "            return fn()\n"
        "        except OSError as e:\n"
        "            self.sleep(self.wait(e, n))\n",
        # the wait after the try
        "def call(fn):\n"
        "    for _ in range(5):\n"
        "        try:\n"
        "            return fn()\n"
        "        except OSError:\n"
        "            pass\n"
        "        time.sleep(1)\n",
    ],
)
def test_the_retry_check_sees_a_loop_written_by_hand(loop: str) -> None:
    files = iter([("tasks/api/retrying.py", ast.parse(loop)), ("tasks/other.py", ast.parse(loop))])
    assert retry_loops(files) == ["tasks/other.py:2"]


def test_the_retry_check_lets_a_poll_without_a_try_pass() -> None:
    poll = "def follow(api):\n    while api.live():\n        api.look()\n        time.sleep(5)\n"
    assert retry_loops(iter([("tasks/other.py", ast.parse(poll))])) == []


def sdk_imports(files: Iterator[tuple[str, ast.Module]]) -> list[str]:
    """`file:line module` of each import of the SDK outside its home and outside `if TYPE_CHECKING:`."""
    found = []
    for rel, tree in files:
        if rel == SDK_HOME:
            continue
        typing_only = {
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for stmt in block.body
            for n in ast.walk(stmt)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found += [f"{rel}:{node.lineno} {n}" for n in names if n.split(".")[0] in SDK_PACKAGES]
    return found


def test_only_the_sdk_face_imports_the_sdk() -> None:
    assert sdk_imports(product_files()) == []


def test_the_sdk_check_sees_an_import_and_lets_typing_only_ones_pass() -> None:
    code = (
        "from typing import TYPE_CHECKING\n"
        "import anthropic\n"
        "if TYPE_CHECKING:\n"
        "    from anthropic.types import Message\n"
        "def f():\n"
        "    from httpx2 import Limits\n"
        "    return Limits\n"
    )
    files = iter([(SDK_HOME, ast.parse(code)), ("tasks/other.py", ast.parse(code))])
    assert sdk_imports(files) == ["tasks/other.py:2 anthropic", "tasks/other.py:6 httpx2"]


def crash_hooks(files: Iterator[tuple[str, ast.Module]]) -> list[str]:
    """`file:line what` of each crash hook outside its home: a `crash_point` defined, a string
    naming a crash environment variable, a module-level `HOOK`."""
    found = []
    for rel, tree in files:
        if rel == CRASH_HOME:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "crash_point":
                found.append(f"{rel}:{node.lineno} def crash_point")
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.isupper()
                and CRASH_NAMES.search(node.value)
            ):
                found.append(f"{rel}:{node.lineno} {node.value}")
        for stmt in tree.body:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
            found += [
                f"{rel}:{stmt.lineno} HOOK" for t in targets if isinstance(t, ast.Name) and t.id == "HOOK"
            ]
    return found


def test_one_crash_hook() -> None:
    assert crash_hooks(product_files()) == []


def test_the_crash_hook_check_sees_a_second_hook() -> None:
    code = (
        "import os\n"
        "HOOK = None\n"
        "def crash_point(name):\n"
        "    if os.environ.get('DOCMILL_TEST_KILL_AT') == name:\n"
        "        os.abort()\n"
    )
    files = iter([(CRASH_HOME, ast.parse(code)), ("tasks/batch/other.py", ast.parse(code))])
    assert crash_hooks(files) == [
        "tasks/batch/other.py:3 def crash_point",
        "tasks/batch/other.py:4 DOCMILL_TEST_KILL_AT",
        "tasks/batch/other.py:2 HOOK",
    ]

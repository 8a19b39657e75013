"""One mechanism for each thing done in several places: a second one fails here.

- Compare-and-swap: only `checkpoints/cas.py` (and the store backends that implement them) call the
  store's ETag read (`get_with_etag`) or its conditional replace (`put_if_match`). Every other module
  goes through `cas.swap` / `cas.update_json` / `cas.read` + `cas.write`, so there is one loop with
  one jitter, one bound and one meaning of "gave up".
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("docmill", "flows", "tasks", "checkpoints", "emulator")
CAS_CALLS = frozenset({"get_with_etag", "put_if_match"})
CAS_HOMES = ("checkpoints/cas.py", "checkpoints/store/")


def product_files(root: Path = ROOT) -> Iterator[tuple[str, ast.Module]]:
    for top in PRODUCT:
        for path in sorted((root / top).rglob("*.py")):
            yield path.relative_to(root).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


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

"""What modules may take from each other, checked on the product code (docmill, flows, tasks,
checkpoints, emulator):

- No private name crosses a module: `from m import _x`, or `m._x` on a first-party module `m`
  imported by name. A name another module needs is public (no underscore).
- Few function-local first-party imports outside the CLI (`flows/cli/`, whose lazy imports keep
  `docmill --help` fast): a circle held together by one is a missing leaf (the import graph test
  counts them as edges). The ones left keep a measured import-time cost off a path that does not
  need it (Prefect, the SDK, boto3, the emulator's server). At most `LOCAL_IMPORTS_MAX`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tests.layout.test_import_graph import ROOT, parsed

PRODUCT = ("docmill", "flows", "tasks", "checkpoints", "emulator")
LAZY_ROOM = "flows/cli/"
LOCAL_IMPORTS_MAX = 20


def _module_name(rel: str) -> str:
    parts = rel.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def product_trees() -> Iterator[tuple[str, ast.Module]]:
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), parsed(path)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_crossings(trees: Iterator[tuple[str, ast.Module]]) -> list[str]:
    found = []
    for rel, tree in trees:
        me = _module_name(rel)
        modules: dict[str, str] = {}  # local name -> first-party module imported by that name
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.split(".")[0] not in PRODUCT:
                    continue
                for alias in node.names:
                    if _private(alias.name) and node.module != me:
                        found.append(f"{rel}:{node.lineno} from {node.module} import {alias.name}")
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in PRODUCT and alias.asname:
                        modules[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and _private(node.attr)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and modules[node.value.id] != me
            ):
                found.append(f"{rel}:{node.lineno} {node.value.id}.{node.attr}")
    return found


def local_imports(trees: Iterator[tuple[str, ast.Module]]) -> list[str]:
    found = set()
    for rel, tree in trees:
        if rel.startswith(LAZY_ROOM):
            continue
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module or ""]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                else:
                    continue
                if any(n.split(".")[0] in PRODUCT for n in names):
                    found.add(f"{rel}:{node.lineno} {', '.join(names)}")
    return sorted(found)


def test_no_private_name_crosses_a_module() -> None:
    assert private_crossings(product_trees()) == []


def test_the_private_check_sees_an_import_and_an_attribute() -> None:
    code = (
        "from flows.entry import _settings\n"
        "from flows.cli import commands\n"
        "from flows.cli import commands as c\n"
        "def f(a):\n"
        "    return commands._store(a), c._store_uri(a), _settings(None, {})\n"
    )
    found = private_crossings(iter([("flows/cli/run_commands.py", ast.parse(code))]))
    assert found == [
        "flows/cli/run_commands.py:1 from flows.entry import _settings",
        "flows/cli/run_commands.py:5 commands._store",
        "flows/cli/run_commands.py:5 c._store_uri",
    ]


def test_few_function_local_imports_outside_the_cli() -> None:
    found = local_imports(product_trees())
    assert len(found) <= LOCAL_IMPORTS_MAX, "\n".join(found)


def test_the_local_import_count_sees_nested_imports_and_skips_the_cli() -> None:
    code = "def f():\n    if True:\n        from tasks.api import client\n    import json\n    return client, json\n"
    found = local_imports(iter([("tasks/x.py", ast.parse(code)), ("flows/cli/y.py", ast.parse(code))]))
    assert found == ["tasks/x.py:3 tasks.api"]

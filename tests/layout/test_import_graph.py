"""The first-party import graph has no cycle, counting function-local imports and `if TYPE_CHECKING:`
imports as edges too, so no circle can hide behind an import moved into a function or behind an
annotation: a module that names another's type depends on it as much as one that calls it. Module
and function sizes stay within the layout's limits."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("docmill", "flows", "tasks", "checkpoints", "emulator")


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A file's syntax tree, parsed once per test process (the layout tests walk the same files)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    found = {}
    for pkg in packages:
        for path in (root / pkg).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """module -> the first-party modules it imports (anywhere in it, `if TYPE_CHECKING:` blocks too)."""
    modules = _modules(root, packages)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        tree = parsed(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, base]).strip(".")
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name and not name.startswith(t + "."):
                    graph[name].add(t)
    return graph


@functools.cache
def default_graph() -> dict[str, set[str]]:
    """The project's import graph, built once per test process (do not change it)."""
    return import_graph()


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_among_first_party_modules() -> None:
    assert cycles(default_graph()) == []


def test_the_check_sees_a_cycle_held_by_a_function_local_import() -> None:
    graph = {"a": {"b"}, "b": set()}
    assert cycles(graph) == []
    graph["b"].add("a")
    assert cycles(graph) == [["a", "b"]]


def test_the_check_sees_a_cycle_held_by_a_type_checking_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from pkg.b import B\n"
        "def f(b: B) -> None: ...\n"
    )
    (pkg / "b.py").write_text("from pkg import a\nclass B: ...\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.a"] == {"pkg.b"}
    assert cycles(graph) == [["pkg.a", "pkg.b"]]


@pytest.mark.parametrize(
    "package", ["api", "cost", "per_file", "batch", "conversation", "integration", "reporting"]
)
def test_layered_packages_import_only_downwards(package: str) -> None:
    """api <- cost <- per_file <- batch; api <- conversation <- per_file; conversation <- integration
    <- reporting."""
    below = {
        "api": set(),
        "cost": {"api", "integration"},
        "conversation": {"api"},
        "per_file": {"api", "conversation", "cost"},
        "batch": {"api", "conversation", "per_file", "cost"},
        "integration": {"api", "conversation"},
        "reporting": {"api", "conversation", "integration"},
    }
    layered = set(below)
    bad = []
    for module, targets in default_graph().items():
        if not module.startswith(f"tasks.{package}."):
            continue
        for t in targets:
            parts = t.split(".")
            inside = parts[0] == "tasks" and len(parts) > 1 and parts[1] in layered
            if inside and parts[1] != package and parts[1] not in below[package]:
                bad.append(f"{module} -> {t}")
    assert bad == []


def test_functions_stay_small() -> None:
    """Functions in per_file/, batch/, integration/ under ~80 lines. Modules have no line cap: they are
    split by role, since a line cap invites packing lines past the formatter."""
    too_long = []
    for path in (ROOT / "tasks").rglob("*.py"):
        if path.parent.name not in {"per_file", "batch", "integration"}:
            continue
        text = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > 80:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {n} lines")
    assert too_long == []


def test_the_formatter_decides_the_layout() -> None:
    """No code is packed past the formatter: at most a handful of `# fmt: skip` in the project (data
    tables use `# fmt: off` blocks)."""
    skips = [
        f"{path.relative_to(ROOT)}:{n}"
        for top in ("docmill", "flows", "tasks", "checkpoints", "emulator", "bench", "examples", "tests")
        for path in (ROOT / top).rglob("*.py")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "fmt: skip" in line and path.name != "test_import_graph.py"
    ]
    assert len(skips) <= 10, skips

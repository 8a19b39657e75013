"""A run's per-file pass is chosen in one place: `flows.run.modes.choose` decides the kind (a
deadline, `--mode auto` by the document count, else the mode asked) and
`flows.run.driver.choose_pass` builds the `FilePass` of that kind. Elsewhere in `flows/` no code
compares a mode with "realtime" / "batch" / "auto" (or a `Mode` / `PassKind` member), assigns such a
value to a `mode` from a condition, or builds a `RealtimePass`, `BatchPass` or `DeadlinePass`: a
second place deciding would drift from the first (it did: four places once decided it).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.run.deadline import DeadlinePass
from flows.run.modes import PassKind, choose, may_batch, recorded
from flows.run.passes import BatchPass, RealtimePass
from tests.layout.test_import_graph import parsed

ROOT = Path(__file__).resolve().parents[2]
MODES_HOME = "flows/run/modes.py"
PASS_HOME = ("flows/run/driver.py", "choose_pass")
MODE_VALUES = frozenset({"realtime", "batch", "auto", "deadline"})
MODE_ENUMS = frozenset({"Mode", "PassKind"})
PASS_CLASSES = frozenset({"RealtimePass", "BatchPass", "DeadlinePass"})


def flows_files(root: Path = ROOT) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted((root / "flows").rglob("*.py")):
        yield path.relative_to(root).as_posix(), parsed(path)


def _mode_value(node: ast.AST) -> bool:
    """Whether `node` holds a mode as a literal or an enum member anywhere inside it."""
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and n.value in MODE_VALUES:
            return True
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in MODE_ENUMS:
            return True
    return False


def _named_mode(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "mode" in name.lower()


def mode_decisions(files: Iterator[tuple[str, ast.Module]]) -> list[str]:
    """`file:line what` of each place outside flows/run/modes.py that decides a mode."""
    found = []
    for rel, tree in files:
        if rel == MODES_HOME:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(_named_mode(s) for s in sides) and any(_mode_value(s) for s in sides):
                    found.append(f"{rel}:{node.lineno} compares a mode")
            elif isinstance(node, ast.Assign):
                targets = [e for t in node.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
                if any(_named_mode(t) for t in targets) and _mode_value(node.value):
                    found.append(f"{rel}:{node.lineno} assigns a mode")
            elif (
                isinstance(node, ast.keyword)
                and node.arg == "mode"
                and isinstance(node.value, ast.IfExp)
                and _mode_value(node.value)
            ):
                found.append(f"{rel}:{node.value.lineno} passes a mode it decided")
    return found


def pass_builds(files: Iterator[tuple[str, ast.Module]]) -> list[str]:
    """`file:line class` of each FilePass built outside driver.choose_pass."""
    found = []
    for rel, tree in files:
        allowed: set[int] = set()
        if rel == PASS_HOME[0]:
            for fn in ast.walk(tree):
                if isinstance(fn, ast.FunctionDef) and fn.name == PASS_HOME[1]:
                    allowed |= {id(n) for n in ast.walk(fn)}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in PASS_CLASSES
                and id(node) not in allowed
            ):
                found.append(f"{rel}:{node.lineno} {node.func.id}")
    return found


def test_the_mode_is_decided_in_flows_run_modes_only() -> None:
    assert mode_decisions(flows_files()) == []


def test_the_per_file_pass_is_built_in_choose_pass_only() -> None:
    assert pass_builds(flows_files()) == []


def test_the_checks_see_a_second_place_deciding(tmp_path: Path) -> None:
    """What each check catches, on code written the way it was once decided in several places."""
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "elsewhere.py").write_text(
        "def pick(ctx, params, finish_by, mode):\n"
        "    if params.mode == 'batch':\n"
        "        return BatchPass()\n"
        "    if finish_by:\n"
        "        finish_by, mode = finish_by, 'batch'\n"
        "    chosen = 'batch' if ctx.n > 2 else 'realtime'\n"
        "    return RunManifest(mode='realtime' if mode == 'auto' else mode)\n"
    )
    decisions = mode_decisions(flows_files(tmp_path))
    assert [d.split(" ", 1)[1] for d in decisions] == [
        "compares a mode",
        "assigns a mode",
        "passes a mode it decided",
        "compares a mode",
    ], decisions
    assert pass_builds(flows_files(tmp_path)) == ["flows/elsewhere.py:3 BatchPass"]


@pytest.mark.parametrize(
    ("asked", "finish_by", "documents", "kind"),
    [
        ("realtime", None, 10_000, PassKind.REALTIME),
        ("batch", None, 1, PassKind.BATCH),
        ("auto", None, 199, PassKind.REALTIME),
        ("auto", None, 200, PassKind.BATCH),
        ("realtime", "2030-01-01T06:00:00+00:00", 1, PassKind.DEADLINE),  # a deadline is the batch pass
        ("auto", "2030-01-01T06:00:00+00:00", 1, PassKind.DEADLINE),
    ],
)
def test_choose(asked: str, finish_by: str | None, documents: int, kind: PassKind) -> None:
    assert choose(asked, finish_by=finish_by, documents=documents, auto_threshold=200) is kind


def test_every_kind_has_one_pass_and_a_recorded_mode() -> None:
    kinds = [RealtimePass.kind, BatchPass.kind, DeadlinePass.kind]
    assert sorted(kinds) == sorted(PassKind)
    assert [recorded(k) for k in kinds] == [
        "realtime",
        "batch",
        "batch",
    ]  # `status` shows a deadline's batches
    assert may_batch("auto") and may_batch("batch") and not may_batch("realtime")

"""No import cycle between packages either: the module graph collapsed to tasks/ and flows/
packages and top-level tasks modules (`tasks.per_file`, `tasks.request`, `flows.run`;
`test_dependency_rules.unit`) and the other rooms has no cycle. A pair of packages importing each
other (through different modules) is acyclic module by module and still cannot be understood or
moved one at a time."""

from __future__ import annotations

from tests.layout.test_dependency_rules import edges, unit
from tests.layout.test_import_graph import cycles, default_graph


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for m, t in edges(graph):
        if unit(m) != unit(t):
            out.setdefault(unit(m), set()).add(unit(t))
            out.setdefault(unit(t), set())
    return out


def test_no_import_cycle_between_packages() -> None:
    assert cycles(package_graph(default_graph())) == []


def test_a_cycle_through_different_modules_is_seen() -> None:
    graph = {
        "tasks.per_file.realtime": {"tasks.cost.estimate"},
        "tasks.cost.estimate": {"tasks.per_file.gate"},
        "tasks.per_file.gate": set(),
    }
    assert [sorted(c) for c in cycles(package_graph(graph))] == [["tasks.cost", "tasks.per_file"]]

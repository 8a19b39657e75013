"""The dependency rules the READMEs state, checked on the import graph (function-local and
`TYPE_CHECKING` imports count, as in test_import_graph):

- rooms (docs/design.md): `docmill` imports no other room; `checkpoints` and `emulator` only
  `docmill`; `tasks` never `flows` or `emulator`; only the CLI and the run context start the emulator.
- tasks/ packages (each package's README): `api` and `source.readers` import nothing else in
  tasks/; `source` only its readers; `conversation` only `api`; `recipes` only the readers; the
  request layout (`tasks.request`) only `source` and `recipes`; `cost` only `api`, `source`,
  `recipes`, the request layout and `integration` (never the passes); who may import `batch`,
  `per_file`, `cost` and `integration` is named in their READMEs.
- flows/ (flows/__init__.py): `cli -> orchestration -> entry -> workers -> run`; a flows unit imports
  only the units below it, so the workers use the run's pieces and only the entry chooses them.
"""

from __future__ import annotations

import pytest

from tests.layout.test_import_graph import default_graph


def room(module: str) -> str:
    return module.split(".")[0]


# packages inside a tasks/ package that keep rules of their own
NESTED = ("tasks.source.readers",)


def unit(module: str) -> str:
    """A tasks/ package (`tasks.api`), a package nested in one that has its own rules
    (`tasks.source.readers`), a top-level tasks module (`tasks.request`) or a flows/ package
    (`flows.run`); else the room."""
    nested = [n for n in NESTED if module == n or module.startswith(n + ".")]
    if nested:
        return nested[0]
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] in ("tasks", "flows") and len(parts) > 1 else parts[0]


def edges(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return [(m, t) for m, targets in sorted(graph.items()) for t in sorted(targets)]


ROOM_MAY_IMPORT = {
    "docmill": set(),
    "checkpoints": {"docmill"},
    "emulator": {"docmill"},
    "tasks": {"docmill", "checkpoints"},
    "flows": {"docmill", "checkpoints", "tasks", "emulator"},
}
EMULATOR_STARTERS = ("flows.cli.", "flows.run.context")
# tasks/ package -> the other tasks/ units it may import (None: any); its README says so
TASKS_MAY_IMPORT: dict[str, set[str] | None] = {
    "tasks.api": set(),
    "tasks.source.readers": set(),
    "tasks.source": {"tasks.source.readers"},
    "tasks.conversation": {"tasks.api"},
    "tasks.recipes": {"tasks.source.readers"},
    "tasks.request": {"tasks.source", "tasks.source.readers", "tasks.recipes"},
    "tasks.cost": {
        "tasks.api",
        "tasks.source",
        "tasks.source.readers",
        "tasks.recipes",
        "tasks.request",
        "tasks.integration",
    },
}
# flows/ unit -> the other flows/ units it may import (flows/__init__.py: imports point down)
FLOWS_MAY_IMPORT: dict[str, set[str]] = {
    "flows.run": set(),
    "flows.workers": {"flows.run"},
    "flows.entry": {"flows.workers", "flows.run"},
    "flows.orchestration": {"flows.entry", "flows.workers", "flows.run"},
    "flows.extract": {"flows.orchestration"},
    "flows.cli": {"flows.orchestration", "flows.entry", "flows.workers", "flows.run"},
}
# tasks/ package -> the tasks/ units that may import it (flows/ always may)
TASKS_IMPORTED_BY = {
    "tasks.batch": {"tasks.deadline"},
    "tasks.per_file": {"tasks.batch", "tasks.deadline"},
    "tasks.cost": {"tasks.per_file", "tasks.batch"},
    "tasks.integration": {"tasks.reporting", "tasks.cost"},
}


def room_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for m, t in edges(graph):
        crosses = room(t) != room(m) and room(t) not in ROOM_MAY_IMPORT[room(m)]
        starts_emulator = room(t) == "emulator" and room(m) == "flows"
        if crosses or (starts_emulator and not m.startswith(EMULATOR_STARTERS)):
            bad.append(f"{m} -> {t}")
    return bad


def tasks_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for m, t in edges(graph):
        if room(m) != "tasks" or room(t) != "tasks" or unit(m) == unit(t):
            continue
        allowed = TASKS_MAY_IMPORT.get(unit(m))
        importers = TASKS_IMPORTED_BY.get(unit(t))
        if (allowed is not None and unit(t) not in allowed) or (
            importers is not None and unit(m) not in importers
        ):
            bad.append(f"{m} -> {t}")
    return bad


def flows_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for m, t in edges(graph):
        if room(m) != "flows" or room(t) != "flows" or unit(m) == unit(t):
            continue
        if unit(t) not in FLOWS_MAY_IMPORT.get(unit(m), set()):
            bad.append(f"{m} -> {t}")
    return bad


def test_rooms_import_only_downwards() -> None:
    assert room_violations(default_graph()) == []


def test_tasks_packages_keep_the_rules_their_readmes_state() -> None:
    assert tasks_violations(default_graph()) == []


def test_flows_packages_import_only_downwards() -> None:
    assert flows_violations(default_graph()) == []


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("flows.run.driver", "flows.workers.spread"),  # the run's pieces choosing the workers
        ("flows.workers.shard_worker", "flows.entry"),  # a worker reaching up into the run's start
        ("flows.workers.shard_worker", "flows.orchestration.chunk_tasks"),
        ("flows.entry", "flows.orchestration.prefect_flows"),
        ("flows.unknown", "flows.run.context"),  # a new flows unit has its rule written down first
    ],
)
def test_the_flows_rules_see_a_forbidden_edge(importer: str, imported: str) -> None:
    assert flows_violations({importer: {imported}}) == [f"{importer} -> {imported}"]


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("tasks.api.usage", "tasks.source.readers.measure"),  # the api package reaching into readers
        ("tasks.source.readers.pdf", "tasks.source.document"),  # a reader knowing the inventory's record
        ("tasks.cost.estimate", "tasks.per_file.realtime"),  # the estimate reaching up into a pass
        ("tasks.request", "tasks.per_file.gate"),
        ("tasks.api.client", "tasks.cost.worst_case"),
        ("tasks.conversation.task", "tasks.per_file.gate"),
        ("tasks.recipes.base", "tasks.records"),
        ("tasks.review", "tasks.batch.engine"),
        ("tasks.reporting.report", "tasks.per_file.outcome"),
    ],
)
def test_the_tasks_rules_see_a_forbidden_edge(importer: str, imported: str) -> None:
    assert tasks_violations({importer: {imported}}) == [f"{importer} -> {imported}"]


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("checkpoints.ledger", "tasks.records"),
        ("docmill.prices", "checkpoints.keys"),
        ("tasks.per_file.realtime", "flows.run.context"),
        ("tasks.api.client", "emulator.server"),
        ("flows.run.driver", "emulator.server"),
    ],
)
def test_the_room_rules_see_a_forbidden_edge(importer: str, imported: str) -> None:
    assert room_violations({importer: {imported}}) == [f"{importer} -> {imported}"]

"""`RunScope`: what every stage of one run's per-file pass shares (a leaf record).

The recipe, the run id, the store, the realtime model client and the settings travel together
from the flow that starts a run (flows.run.context.RunContext is one) down to the realtime pass,
the batch engine and the deadline engine, which each build their `tasks.per_file.settle.Pass`
from it (`Pass.of`) instead of receiving its five parts as separate arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore
    from docmill.settings import Settings
    from tasks.api.client import ModelClient
    from tasks.recipes import Recipe


@dataclass(frozen=True)
class RunScope:
    """One run's shared parts, built once and passed whole."""

    recipe: Recipe
    run_id: str
    store: ObjectStore
    client: ModelClient  # realtime calls: first requests, repairs, the deadline's realtime tail
    settings: Settings

"""`RunScope`: what every stage of one run's per-file pass shares (a leaf record), built where a run
starts (flows.run.context.RunContext is one) and passed whole to the realtime pass, the batch engine
and the deadline engine, which each build their `tasks.per_file.settle.Pass` from it (`Pass.of`).
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

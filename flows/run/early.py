"""A batch run's batches created before Prefect's flow run exists.

`docmill run --mode batch` through Prefect with no API server running waits ~10 s for the temporary
server (flows.orchestration.boot starts it first thing) before the flow run, and so the inventory and
the batches, can start. The CLI runs the chain up to the created batches first
(`run_extract(..., submit_only=True)`: the inventory, the requests spooled, every batch created, with
the same records, intents and checks as inside the flow; flows.run.driver stops there) while the
server boots on the other core, and the first look at the batches goes on on a thread
(tasks.batch.lifecycle.first_look); the run's lease and active marker stay held by this process. The flow run then continues that run by its id
(bound to the flow run as any run is): its lease is taken over in-process (flows.run.guard), the
inventory and the batches are found in the store, nothing is sent twice (keys of live batches are
not streamed again), and it polls, collects, integrates and reports. A process killed in between
leaves a stopped run that the same command continues, as any run killed in its batch pass.

Only for what gains from it: mode batch or auto (auto stops after the inventory when it decides
realtime), no deadline (`--finish-by`), no workers, an endpoint of its own (with the built-in
emulator the batches would live in a server that stops between the two parts), and
`settings.prefect_early_batches`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from docmill.errors import OrchestratorUnavailable
from docmill.settings import Settings
from flows.run.modes import may_batch

SUBMITTED: set[str] = set()  # runs whose batches this process created before their flow run (entry)


def eligible(settings: Settings, mode: str, *, finish_by: str | None, workers: int | None) -> bool:
    own_endpoint = bool(settings.anthropic_api_key or settings.api.base_url)
    return (
        settings.prefect_early_batches and may_batch(mode) and not finish_by and not workers and own_endpoint
    )


def taken(run_id: str) -> bool:
    """Whether `run_id` was submitted early by this process (and is now continued: said once)."""
    found = run_id in SUBMITTED
    SUBMITTED.discard(run_id)
    return found


@contextmanager
def unfollowed(run_id: str | None) -> Iterator[None]:
    """Prefect's server that did not start ends the command as always, but its line says that the
    batches of `run_id` (created early) exist and how they are followed: nothing is sent again."""
    try:
        yield
    except OrchestratorUnavailable as e:
        if run_id is None:
            raise
        raise OrchestratorUnavailable(
            f"{e.message}; run {run_id} had created its batches before",
            hint=f"`docmill resume {run_id} --no-prefect` (or the same command once Prefect starts) follows "
            "and collects them; nothing is sent twice",
            **e.fields,
        ) from e

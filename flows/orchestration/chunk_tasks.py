"""Chunks as Prefect task runs: `chunk_task` (one chunk, under the optional global concurrency
limit), `prefect_map` (the flows' `map_chunks`), the states a stop ends a task in (Cancelled with its
one line, not Failed), the bounded task runner, and the progress artifact."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from contextlib import nullcontext
from typing import Any

from prefect import task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NONE
from prefect.states import Cancelled, State
from prefect.task_runners import ThreadPoolTaskRunner

from docmill.errors import Interrupted
from docmill.logs import current_run, get_logger
from docmill.settings import get_settings
from docmill.shutdown import SHUTDOWN, resume_line
from flows.run.passes import CHUNK_WORKERS, Chunk, ChunkFn, chunk_label

log = get_logger("flows")
RUNNER: Any = ThreadPoolTaskRunner(max_workers=CHUNK_WORKERS)  # always bounded


# A run that stops on purpose is not a failure: its chunk task runs and its flow run end Cancelled,
# under these names (what the Prefect UI shows), with the one line that says how to continue.
INTERRUPTED, BUDGET_SPENT = "Interrupted", "Budget spent"
STOP_STATES = (INTERRUPTED, BUDGET_SPENT)


def interrupted_state(e: Interrupted, data: Any) -> State[Any]:
    """A chunk or flow run a signal stopped: nothing new was sent, the answers received are kept."""
    return Cancelled(
        name=INTERRUPTED, message=resume_line(e.signal_name, e.run_id or current_run()), data=data
    )


def budget_state(message: str, data: Any) -> State[Any]:
    """A chunk or flow run the cost cap stopped (`message` names the resume with a higher cap)."""
    return Cancelled(name=BUDGET_SPENT, message=f"docmill: {message}", data=data)


class StopStateLevel(logging.Filter):
    """Prefect's engine logs every task run that does not end Completed at ERROR ("Finished in state
    ..."); one a signal or the budget stopped ends Cancelled on purpose: a WARNING, not an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.WARNING and is_stop_record(record):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def is_stop_record(record: logging.LogRecord) -> bool:
    """Prefect's "Finished in state" line of a run that ended in one of docmill's stop states."""
    msg = record.msg if isinstance(record.msg, str) else ""
    return msg.startswith("Finished in state ") and msg[18:].startswith(tuple(f"{n}(" for n in STOP_STATES))


for _name in ("prefect.task_runs", "prefect.flow_runs"):
    logging.getLogger(_name).addFilter(StopStateLevel())


# The task's name stays `per-file-chunk` (what limits, filters and dashboards key on); each run of it
# is named after the documents it holds.
@task(name="per-file-chunk", task_run_name="per-file-chunk {label}", cache_policy=NONE, retries=0)
def chunk_task(fn: Any, cid: str, docs: list[dict[str, Any]], label: str = "") -> Any:
    """One chunk; a chunk a signal or the budget stopped ends Cancelled (see STOP_STATES), not Failed."""
    limit = get_settings().chunk_limit_name
    guard: Any = nullcontext()
    if limit:
        from prefect.concurrency.sync import concurrency

        guard = concurrency(limit, occupy=1, strict=True)
    with guard:
        try:
            counts = fn(cid, docs)
        except Interrupted as e:
            return interrupted_state(e, {"interrupted": 1})
    if counts.get("budget"):
        resume = f"`docmill resume {current_run() or 'RUN_ID'} --max-cost-usd N`"
        return budget_state(f"the run's cost cap stopped this chunk; {resume} continues it", counts)
    return counts


def prefect_map(fn: ChunkFn, chunks: Iterable[Chunk]) -> list[dict[str, int]]:
    """Chunks as Prefect task runs on the flow's bounded runner, submitted as `chunks` hands them out.
    A chunk a signal stopped makes the run stop as it does without Prefect (Interrupted), once every
    chunk has ended."""
    futures = [chunk_task.submit(fn, cid, docs, label=chunk_label(cid, docs)) for cid, docs in chunks]
    results: list[dict[str, int]] = []
    for f in futures:
        f.wait()
        stopped = f.state.is_cancelled() and f.state.name in STOP_STATES
        results.append(dict(f.result(raise_on_failure=False)) if stopped else f.result())
    if any(r.get("interrupted") for r in results):
        SHUTDOWN.check()
        raise Interrupted("a chunk was interrupted", hint="`docmill resume RUN_ID` continues the run")
    return results


class ProgressArtifact:
    """The per-file pass as a Prefect progress artifact of the flow run: documents done of the
    documents left at its start, realtime and batch alike. Made when the pass starts, updated at
    most every `every` seconds (the Prefect API is not a progress bar) and when it ends."""

    def __init__(self, every: float = 5.0, clock: Any = time.monotonic) -> None:
        self.every, self.clock = every, clock
        self.artifact_id: Any = None
        self.last = float("-inf")

    def __call__(self, done: int, total: int) -> None:
        try:
            if self.artifact_id is None:
                self.artifact_id = create_progress_artifact(
                    progress=0.0,
                    key="docmill-progress",
                    description=f"docmill per-file pass: documents done of {total}",
                )
            now = self.clock()
            if done < total and now - self.last < self.every:
                return
            self.last = now
            update_progress_artifact(
                artifact_id=self.artifact_id,
                progress=100.0 * done / total if total else 100.0,
                description=f"docmill per-file pass: {done} of {total} documents done",
            )  # type: ignore[arg-type]
        except Exception as e:  # progress reporting must never break a run
            log.warning("could not update the Prefect progress artifact: %s", e)

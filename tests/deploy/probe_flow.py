"""A trivial flow the cluster test deploys to prove the plumbing: work pool, two process workers,
and the global concurrency limit held per chunk exactly as docmill's chunk tasks hold it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from prefect import flow, task, unmapped
from prefect.artifacts import create_markdown_artifact
from prefect.concurrency.sync import concurrency
from prefect.task_runners import ThreadPoolTaskRunner


@task
def hold_chunk(index: int, seconds: float) -> dict[str, float]:
    """Hold one slot of the chunk limit for `seconds`; return the held window."""
    name = os.environ["DOCMILL_CHUNK_LIMIT_NAME"]
    with concurrency(name, occupy=1, strict=True):
        start = time.time()
        time.sleep(seconds)
        end = time.time()
    return {"index": index, "start": start, "end": end}


@flow(task_runner=ThreadPoolTaskRunner(max_workers=4))  # type: ignore[arg-type]
def probe(label: str, out_dir: str, chunks: int = 2, seconds: float = 1.0) -> int:
    """Run `chunks` chunk tasks at once; write their windows and this run's worker pid."""
    futures = hold_chunk.map(range(chunks), seconds=unmapped(seconds))
    windows = [f.result() for f in futures]
    record = {"label": label, "worker_pid": os.getppid(), "cwd": os.getcwd(), "windows": windows}
    Path(out_dir, f"{label}.json").write_text(json.dumps(record))
    create_markdown_artifact(key=f"probe-{label}", markdown=f"# probe {label}\n* chunks: {chunks}\n")
    return len(windows)

"""The `shard-worker` flow at the entrypoint path of deployments registered with it here
(`flows/orchestration/shard_worker.py:shard_worker`); the flow lives in flows/workers/shard_worker.py,
which deploy/prefect.yaml names."""

from flows.workers.shard_worker import shard_worker

__all__ = ["shard_worker"]

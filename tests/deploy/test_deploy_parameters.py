"""deploy/prefect.yaml as a user adopts it without editing: every deployment that starts runs takes
the recipe, the model and the cost cap as parameters (null: the worker's settings), and the flows'
retry delay is what Prefect's flow-run policy holds (whole seconds: no pydantic warning in the
worker's log)."""

from __future__ import annotations

import inspect
import subprocess
import sys
import warnings
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def test_every_deployment_takes_recipe_model_and_budget_with_defaults() -> None:
    from flows.orchestration import prefect_flows as extract

    spec = yaml.safe_load((REPO / "deploy" / "prefect.yaml").read_text())
    for d in spec["deployments"]:
        if d["name"] == "shard-worker":  # works on a run its driver started, with that run's settings
            continue
        flow_obj = getattr(extract, d["entrypoint"].split(":")[1])
        params = inspect.signature(flow_obj.fn).parameters
        wanted = ("max_cost_usd",) if d["name"] == "resume" else ("recipe", "model", "max_cost_usd")
        for name in wanted:
            assert name in d["parameters"], (d["name"], name)  # shown (and overridable) in the UI
            assert name in params and params[name].default is None, (d["name"], name)
        assert d["parameters"].get("recipe") in (None,), d["name"]  # never a hard-coded recipe


def test_the_flows_retry_delay_serializes_as_prefect_holds_it() -> None:
    from prefect.client.schemas.objects import FlowRunPolicy

    from flows.orchestration import prefect_flows as extract
    from flows.workers import shard_worker as shards

    for flow_obj in (extract.extract, extract.nightly, extract.backfill, extract.resume, shards.shard_worker):
        policy = FlowRunPolicy()
        policy.retry_delay = flow_obj.retry_delay_seconds  # what Prefect's engine does for a deployment's run
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "Expected `int` ... retry_delay ... 120.0"
            assert policy.model_dump(mode="json")["retry_delay"] == 120


def test_every_entrypoint_loads_as_prefect_loads_it() -> None:
    """A worker loads `path/to/file.py:flow` with that file's folder first on sys.path: a module there
        named like a top-level package (`tasks.py`, `flows.py`, a `prefect/` folder) shadows it and the
        flow run dies at import. Deployments registered before the flows/ layout name flows/extract.py, and
    shard-worker deployments registered before flows/workers/ name flows/orchestration/shard_worker.py.
        One fresh interpreter per folder (the first load of a folder is the one that can be shadowed)."""
    spec = yaml.safe_load((REPO / "deploy" / "prefect.yaml").read_text())
    by_folder: dict[str, list[str]] = {
        "flows": ["flows/extract.py:nightly"],
        "flows/orchestration": ["flows/orchestration/shard_worker.py:shard_worker"],
    }
    for d in spec["deployments"]:
        by_folder.setdefault(str(Path(d["entrypoint"].split(":")[0]).parent), []).append(d["entrypoint"])
    code = (
        "import sys\n"
        "from prefect.flows import load_flow_from_entrypoint\n"
        "print(' '.join(load_flow_from_entrypoint(e).name for e in sys.argv[1:]))\n"
    )
    for entries in by_folder.values():
        out = subprocess.run(
            [sys.executable, "-c", code, *entries], cwd=REPO, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, (entries, out.stderr[-1500:])
        names = out.stdout.split()[-len(entries) :]
        assert names == [e.split(":")[1].replace("_", "-") for e in entries], (entries, out.stdout)

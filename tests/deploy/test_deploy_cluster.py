"""The multi-worker deployment, end to end on loopback: PostgreSQL, a Prefect server on it,
SeaweedFS, two process workers, all started by the deploy/ scripts, flows deployed with
`prefect deploy` from a prefect.yaml, and the global chunk limit checked from Prefect's own
concurrency events."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import yaml

from tests.fixtures.cluster import (
    REPO,
    Cluster,
    assert_completed,
    concurrency_windows,
    create_flow_run,
    emulator_accounting,
    flow_run_logs,
    kill_machine,
    list_keys,
    make_state_dir,
    max_overlap,
    prefect_cli,
    read_artifacts,
    run_script,
    s3_client,
    start_cluster,
    wait_for_flow_runs,
    workers_of_flow_runs,
)

CHUNK_LIMIT = 2
LIMIT_NAME = "docmill-chunks"
BUCKET = "docmill"
STORE = f"s3://{BUCKET}/store"
CORPUS = f"s3://{BUCKET}/corpus"
SHARDS = 3
GENERATE = [
    "--count",
    "30",
    "--seed",
    "11",
]  # part-0 and part-1: the backfill, one per worker; part-2: new for the nightly run
# The flow runs inherit the workers' environment (deploy/env.example lists these settings).
WORKER_ENV = {
    "DOCMILL_STORE": STORE,
    "DOCMILL_CHUNK_SIZE": "4",
    "DOCMILL_API__CONCURRENCY": "4",
    "DOCMILL_BATCH__POLL_SECONDS": "0.5",
    "DOCMILL_BATCH__POLL_MAX_SECONDS": "1",
    "DOCMILL_API__RAMP_SECONDS": "2",  # a short run: the pacer reaches the limit in 2 s, not 20
}


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    state = make_state_dir()
    failed_before = request.session.testsfailed
    c = start_cluster(
        state,
        workers=("w1", "w2"),
        worker_limit=1,
        chunk_limit=CHUNK_LIMIT,
        bucket=BUCKET,
        worker_env=WORKER_ENV,
        emulator_args=["--latency-ms", "40", "--seed", "1", "--clock-speed", "600"],  # batches' minute: 0.1 s
    )
    print(f"\ncluster timings: {c.timings}")
    try:
        yield c
    finally:
        keep = request.session.testsfailed > failed_before
        c.stop(keep=keep)
        print(f"\ncluster stop: {c.timings['stop_s']}s" + (f"; logs kept in {state}" if keep else ""))


def _probe_yaml(cluster: Cluster) -> Path:
    """deploy/prefect.yaml's pull steps and pool, with one deployment of the probe flow."""
    spec = yaml.safe_load((REPO / "deploy" / "prefect.yaml").read_text())
    pool = spec["deployments"][0]["work_pool"]
    spec["deployments"] = [
        {"name": "probe", "entrypoint": "tests/deploy/probe_flow.py:probe", "work_pool": pool}
    ]
    path = cluster.state / "probe-prefect.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_deploy_cluster_probe_runs_on_both_workers_and_gcl_caps_chunks(cluster: Cluster) -> None:
    since = datetime.now(UTC).isoformat()
    t0 = time.monotonic()
    prefect_cli(
        cluster, "deploy", "--all", "--prefect-file", str(_probe_yaml(cluster)), DOCMILL_REPO_DIR=str(REPO)
    )
    deploy_s = time.monotonic() - t0

    out_dir = cluster.state / "probe"
    out_dir.mkdir()
    t1 = time.monotonic()
    ids = [
        create_flow_run(
            cluster, "probe/probe", {"label": label, "out_dir": str(out_dir), "chunks": 3, "seconds": 1.0}
        )
        for label in ("a", "b")
    ]
    runs = wait_for_flow_runs(cluster, ids, timeout=120)
    runs_s = time.monotonic() - t1
    print(f"\nprobe: deploy {deploy_s:.1f}s, two runs {runs_s:.1f}s")

    assert_completed(cluster, runs)
    records = [json.loads((out_dir / f"{label}.json").read_text()) for label in ("a", "b")]
    # The pull step put each run in the repository checkout, on two different workers.
    assert {r["cwd"] for r in records} == {str(REPO)}
    assert {r["worker_pid"] for r in records} == set(cluster.workers.values())
    assert set(workers_of_flow_runs(cluster, since).values()) == set(cluster.workers)

    # Six chunks wanted to run at once (three per run); the global limit let two run at a time.
    held = [(w["start"], w["end"]) for r in records for w in r["windows"]]
    assert max_overlap(held) == CHUNK_LIMIT
    # Prefect's concurrency events show the same windows; the test for docmill's flows relies on them.
    t2 = time.monotonic()
    events = concurrency_windows(cluster, LIMIT_NAME, since, expected=6)
    print(f"events stored after {time.monotonic() - t2:.1f}s")
    assert len(events) == 6
    assert max_overlap(events, release_slack=0.05) == CHUNK_LIMIT

    artifacts = read_artifacts(cluster, ids)
    assert {a["key"] for a in artifacts} == {"probe-a", "probe-b"}

    # The UI served by the server calls the API at the port and host the script used (not 4200).
    ui = httpx.get(cluster.api_url.removesuffix("/api") + "/ui-settings", timeout=10).json()
    assert ui["api_url"] == cluster.api_url, ui


def _upload_corpus(cluster: Cluster) -> dict[int, set[str]]:
    """Generate invoices and upload them into SHARDS prefixes, split by content hash so a planted
    duplicate stays in its original's shard. Returns the content hashes of each shard."""
    local = cluster.state / "corpus"
    subprocess.run(
        [sys.executable, str(REPO / "examples" / "make_invoices.py"), "--out", str(local), *GENERATE],
        check=True,
        capture_output=True,
    )
    s3 = s3_client(cluster)
    shards: dict[int, set[str]] = {i: set() for i in range(SHARDS)}
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        shard = int(digest[:8], 16) % SHARDS
        shards[shard].add(digest)
        key = f"corpus/part-{shard}/{path.relative_to(local).as_posix()}"
        s3.put_object(Bucket=BUCKET, Key=key, Body=data)
    return shards


def _get_json(cluster: Cluster, key: str) -> dict[str, object]:
    return dict(json.loads(s3_client(cluster).get_object(Bucket=BUCKET, Key=key)["Body"].read()))


def _cost_entries(cluster: Cluster, run_id: str) -> list[dict[str, object]]:
    s3 = s3_client(cluster)
    entries: list[dict[str, object]] = []
    for key in list_keys(s3, BUCKET, f"store/runs/{run_id}/costs/"):
        entries.extend(json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()))
    return entries


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_deploy_cluster_backfill_on_two_workers_then_nightly(cluster: Cluster) -> None:
    assert cluster.emulator_url
    since = datetime.now(UTC).isoformat()
    shards = _upload_corpus(cluster)
    assert all(shards.values()), "every shard needs documents; change GENERATE"
    t0 = time.monotonic()
    prefect_cli(
        cluster,
        "deploy",
        "--all",
        "--prefect-file",
        "deploy/prefect.yaml",
        DOCMILL_REPO_DIR=str(REPO),
        DOCMILL_NIGHTLY_SOURCE=CORPUS,
    )
    deploy_s = time.monotonic() - t0
    with cluster.api() as api:
        nightly_dep = api.get("/deployments/name/nightly/nightly").json()
        backfill_dep = api.get("/deployments/name/backfill/backfill").json()
    (schedule,) = nightly_dep["schedules"]
    assert schedule["schedule"]["cron"] == "0 2 * * *" and schedule["active"]
    assert nightly_dep["parameters"]["source"] == CORPUS
    assert backfill_dep["schedules"] == [] and backfill_dep["work_pool_name"] == "docmill"

    # The backfill, split across both workers: one run per shard, running at the same time. Shard 0
    # takes the deployment's default (Message Batches); shard 1 runs realtime, where chunks are
    # Prefect tasks holding the global limit.
    t1 = time.monotonic()
    backfill_ids = [
        create_flow_run(cluster, "backfill/backfill", {"source": f"{CORPUS}/part-0"}),
        create_flow_run(
            cluster, "backfill/backfill", {"source": f"{CORPUS}/part-1", "mode": "realtime", "chunk_size": 4}
        ),
    ]
    runs = wait_for_flow_runs(cluster, backfill_ids, timeout=150)
    backfill_s = time.monotonic() - t1
    assert_completed(cluster, runs)
    after_backfill = emulator_accounting(cluster.emulator_url)

    # The nightly deployment over the whole corpus: only part-2 is new.
    t2 = time.monotonic()
    nightly_id = create_flow_run(cluster, "nightly/nightly", {})
    nightly = wait_for_flow_runs(cluster, [nightly_id], timeout=150)[nightly_id]
    nightly_s = time.monotonic() - t2
    assert_completed(cluster, {nightly_id: nightly})
    assert nightly["parameters"]["source"] == CORPUS
    print(f"\ndocmill: deploy {deploy_s:.1f}s, backfill {backfill_s:.1f}s, nightly {nightly_s:.1f}s")

    all_ids = [*backfill_ids, nightly_id]
    ran_on = workers_of_flow_runs(cluster, since)
    assert {ran_on[i] for i in backfill_ids} == set(cluster.workers), ran_on

    # Results in the bucket: a finished manifest, a report and exports for each of the three runs.
    s3 = s3_client(cluster)
    run_ids = sorted({k.split("/")[2] for k in list_keys(s3, BUCKET, "store/runs/")})
    assert len(run_ids) == 3, run_ids
    for run_id in run_ids:
        keys = set(list_keys(s3, BUCKET, f"store/runs/{run_id}/"))
        assert f"store/runs/{run_id}/report.md" in keys
        assert f"store/runs/{run_id}/exports/results.jsonl" in keys
    assert list_keys(s3, BUCKET, "store/results/file/")

    # Artifacts in Prefect: the run summary and a finished per-file progress bar (documents) for
    # each flow run, batch-mode backfill shard included.
    artifacts = read_artifacts(cluster, all_ids)
    for flow_run_id in all_ids:
        mine = [a for a in artifacts if a["flow_run_id"] == flow_run_id]
        assert any(a["key"] == "docmill-run-summary" for a in mine), mine
        assert [a["data"] for a in mine if a["type"] == "progress"] == [100.0], mine
        assert any(a["key"] == "docmill-failures" and a["type"] == "table" for a in mine), mine
        # The report link is a presigned URL of the bucket: it opens report.html without an AWS client.
        (link,) = [a["data"] for a in mine if a["key"] == "docmill-report"]
        url = link[link.index("](") + 2 : -1]
        assert url.startswith(cluster.s3_endpoint) and "Signature=" in url, url
        page = httpx.get(url, timeout=10)
        assert page.status_code == 200 and "<html" in page.text.lower()
        # docmill's own lines reach the flow run's Logs tab from the worker's flow-run process (the
        # workers run Prefect at WARNING; docmill's INFO lines are sent all the same).
        logs = flow_run_logs(cluster, flow_run_id)
        for _ in range(40):  # the API stores shipped log batches a moment after the run ends
            if "[docmill run " in logs:
                break
            time.sleep(0.25)
            logs = flow_run_logs(cluster, flow_run_id)
        assert "[docmill run " in logs, (flow_run_id, logs[-2000:])

    # No document processed twice: no request body and no batch custom_id was billed twice, every
    # billed request is in exactly one run's cost ledger, and each per-file key was sent (first
    # attempt) once overall, whichever mode sent it.
    final = emulator_accounting(cluster.emulator_url)
    billed = final["billed"]
    assert len({b["body_sha256"] for b in billed}) == len(billed)
    custom_ids = Counter(b["custom_id"] for b in billed if b["batch"])
    assert custom_ids and max(custom_ids.values()) == 1, custom_ids
    entries = [e for run_id in run_ids for e in _cost_entries(cluster, run_id)]
    # A batch item's cost entry carries the batch id as request_id and the custom_id as key.
    assert Counter(
        f"{e['request_id']}:{e['key']}" if e["batch"] else e["request_id"] for e in entries
    ) == Counter(f"{b['batch_id']}:{b['custom_id']}" if b["batch"] else b["request_id"] for b in billed)
    first_sends = Counter(e["key"] for e in entries if e["pass_name"] == "file" and e["attempt"] == 1)
    assert first_sends and max(first_sends.values()) == 1, first_sends
    # The nightly run paid only for part-2 documents; part-0/1 came from the backfill's ledger.
    manifests = {r: _get_json(cluster, f"store/runs/{r}/manifest.json") for r in run_ids}
    assert all(m["phase"] == "done" for m in manifests.values()), manifests
    assert sorted(str(m["mode"]) for m in manifests.values()) == ["batch", "realtime", "realtime"]
    (nightly_run,) = [r for r, m in manifests.items() if m["source"] == CORPUS]
    nightly_docs = [
        str(e["doc_id"]) for e in entries if e["run_id"] == nightly_run and e["pass_name"] == "file"
    ]
    assert nightly_docs and all(d.startswith("part-2/") for d in nightly_docs), nightly_docs
    assert len(billed) > len(after_backfill["billed"])

    # The global limit held across both workers: chunk windows from Prefect's concurrency events.
    expected = sum(
        len(list_keys(s3, BUCKET, f"store/runs/{r}/inventory/"))
        for r, m in manifests.items()
        if m["mode"] == "realtime"
    )
    chunks = concurrency_windows(cluster, LIMIT_NAME, since, expected=expected)
    assert len(chunks) == expected > CHUNK_LIMIT
    assert chunks
    assert max_overlap(chunks, release_slack=0.05) <= CHUNK_LIMIT

    # The resume deployment continues a run by id on whichever worker is free; a finished run's
    # documents are all in the ledger, so it bills nothing.
    (realtime_run,) = [r for r, m in manifests.items() if m["source"] == f"{CORPUS}/part-1"]
    before = len(emulator_accounting(cluster.emulator_url)["billed"])
    resume_id = create_flow_run(cluster, "resume/resume", {"run_id": realtime_run})
    assert_completed(cluster, wait_for_flow_runs(cluster, [resume_id], timeout=120))
    assert len(emulator_accounting(cluster.emulator_url)["billed"]) == before
    assert _get_json(cluster, f"store/runs/{realtime_run}/manifest.json")["phase"] == "done"


SPREAD_STORE = f"s3://{BUCKET}/store-spread"
SPREAD_RPM = 300


def _run_docmill(cluster: Cluster, *args: str, **env: str) -> subprocess.Popen[str]:
    """The `docmill` command as a user runs it against the cluster (the driver of a spread run)."""
    full = {**cluster.env, "DOCMILL_LOG_LEVEL": "WARNING", **env}
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "docmill"), *args],
        cwd=REPO,
        env=full,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _live_claim(cluster: Cluster, run_prefix: str) -> tuple[str, str] | None:
    """(worker name, shard) of an unexpired claim on an unfinished shard of the run's first generation."""
    s3 = s3_client(cluster)
    keys = set(list_keys(s3, BUCKET, f"{run_prefix}/shards/0001/"))
    for key in sorted(keys):
        if key.endswith(".claim.json") and key.replace(".claim.", ".done.") not in keys:
            claim = json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
            if claim.get("holder") and float(claim.get("expires_at") or 0) > time.time():
                return str(claim["name"]), key.rsplit("/", 1)[1].removesuffix(".claim.json")
    return None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_deploy_cluster_one_run_over_both_workers_survives_a_killed_worker(cluster: Cluster) -> None:
    """`docmill run SOURCE --workers 2` as a user runs it: one run id, shards on both pool workers,
    which share the emulator's request limit; one worker (and its flow run) SIGKILLed while it holds a
    shard: another takes the shard over and the run completes, every document once."""
    assert cluster.emulator_url
    if (
        httpx.get(f"{cluster.api_url}/deployments/name/shard-worker/shard-worker", timeout=10).status_code
        != 200
    ):
        prefect_cli(
            cluster,
            "deploy",
            "--all",
            "--prefect-file",
            "deploy/prefect.yaml",
            DOCMILL_REPO_DIR=str(REPO),
            DOCMILL_NIGHTLY_SOURCE=CORPUS,
        )
    local = cluster.state / "corpus-spread"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "examples" / "make_invoices.py"),
            "--out",
            str(local),
            "--count",
            "40",
            "--seed",
            "21",
        ],
        check=True,
        capture_output=True,
    )
    s3 = s3_client(cluster)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        s3.put_object(
            Bucket=BUCKET, Key=f"corpus-spread/{path.relative_to(local).as_posix()}", Body=path.read_bytes()
        )
    httpx.post(
        f"{cluster.emulator_url}/_emulator/config", json={"requests_per_minute": SPREAD_RPM}, timeout=10
    )
    before = emulator_accounting(cluster.emulator_url)
    t0 = time.monotonic()
    try:
        driver = _run_docmill(
            cluster,
            "run",
            f"s3://{BUCKET}/corpus-spread",
            "--workers",
            "2",
            "--chunk-size",
            "2",
            DOCMILL_STORE=SPREAD_STORE,
            DOCMILL_WORKERS__POLL_SECONDS="0.5",
            DOCMILL_WORKERS__SHARDS_PER_WORKER="2",
        )
        victim = shard = None
        while driver.poll() is None and victim is None:  # a worker in the middle of a shard
            for run_id in {k.split("/")[2] for k in list_keys(s3, BUCKET, "store-spread/runs/")}:
                billed = len(emulator_accounting(cluster.emulator_url)["billed"]) - len(before["billed"])
                held = _live_claim(cluster, f"store-spread/runs/{run_id}") if billed >= 8 else None
                victim, shard = held if held else (None, None)
            if victim is None:
                time.sleep(0.2)
        assert victim in cluster.workers, (victim, driver.stdout.read() if driver.stdout else "")
        kill_machine(cluster, victim, f"store-spread/runs/{run_id}", BUCKET)
        # it cannot write any more: without its done marker now, the shard must be taken over
        unfinished = not list_keys(s3, BUCKET, f"store-spread/runs/{run_id}/shards/0001/{shard}.done.json")
        out, _ = driver.communicate(timeout=200)
        spread_s = time.monotonic() - t0
        assert driver.returncode == 0, out
        after = emulator_accounting(cluster.emulator_url)
    finally:
        httpx.post(f"{cluster.emulator_url}/_emulator/config", json={"requests_per_minute": None}, timeout=10)
        again = run_script("start-worker.sh", str(cluster.state), victim or "w1", "1", env=cluster.env)
        cluster.workers[victim or "w1"] = int(again["DOCMILL_WORKER_PID"])  # back for later tests
    (run_id,) = {k.split("/")[2] for k in list_keys(s3, BUCKET, "store-spread/runs/")}
    print(f"\nspread run over 2 workers, {victim} killed: {spread_s:.1f}s")

    manifest = _get_json(cluster, f"store-spread/runs/{run_id}/manifest.json")
    assert manifest["phase"] == "done" and manifest["extra"]["workers"] == 2
    from checkpoints.shards import ShardTable
    from checkpoints.store import open_store

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    store = open_store(SPREAD_STORE, endpoint_url=cluster.s3_endpoint)
    shards = ShardTable(store, run_id, 1).states()
    assert {s["state"] for s in shards} == {"done"}, shards
    taken = {s["shard"]: s for s in shards}[shard]
    if unfinished:  # (almost always: a shard holds ten documents, the kill came in its middle)
        assert taken["takeovers"] == 1 and taken["worker"] != victim, shards
    # Nothing paid twice but what the killed worker had in flight (the emulator, like the API may,
    # bills an answer its client never got): at most its window, and counted as possibly billed.
    new = after["billed"][len(before["billed"]) :]
    twice = sum(n - 1 for n in Counter(b["body_sha256"] for b in new).values())
    from checkpoints.inflight import InFlight

    window = int(WORKER_ENV["DOCMILL_API__CONCURRENCY"])
    assert twice <= window, twice
    left = InFlight(store, run_id).totals()  # the killed worker's requests in flight, not its chunks
    assert twice <= left["requests"] <= window and left["lives"] <= 1, left
    # The two workers shared the limit: together never more than it (each alone would pace at all of it).
    per_file = sorted(b["at"] for b in new if b["path"] == "/v1/messages")
    span = per_file[int(len(per_file) * 0.9)] - per_file[0]
    assert int(len(per_file) * 0.9) / span * 60 <= 1.15 * SPREAD_RPM
    n429 = int(after["errors_by_status"].get("429", 0)) - int(before["errors_by_status"].get("429", 0))
    assert n429 <= 0.01 * (after["received"] - before["received"])
    from tests.flows.helpers import outcomes_of

    # Identical results to one process: tests/flows/test_flows_spread.py (threads), bench/workers.py (3,000).
    assert len(outcomes_of(store, run_id)) == 40


# Fast checks of the deploy/ files themselves (no services).


def test_deploy_cluster_prefect_yaml_matches_the_flows() -> None:
    import importlib
    import inspect

    spec = yaml.safe_load((REPO / "deploy" / "prefect.yaml").read_text())
    deployments = {d["name"]: d for d in spec["deployments"]}
    assert set(deployments) == {"nightly", "backfill", "resume", "shard-worker"}
    for d in deployments.values():
        path, func = d["entrypoint"].split(":")
        assert (REPO / path).is_file()
        flow_obj = getattr(importlib.import_module(path.removesuffix(".py").replace("/", ".")), func)
        params = inspect.signature(flow_obj.fn).parameters
        assert set(d["parameters"]) <= set(params), d["parameters"]
        assert d["work_pool"]["name"] == "docmill"
    (schedule,) = deployments["nightly"]["schedules"]
    assert schedule["cron"] == "0 2 * * *" and schedule["timezone"]
    assert not deployments["backfill"]["schedules"]
    assert deployments["backfill"]["parameters"]["mode"] == "batch"
    assert not deployments["resume"]["schedules"] and "run_id" not in deployments["resume"]["parameters"]
    # the driver of a spread run launches shard workers by this name (settings.workers.deployment)
    from docmill.settings import WorkerSettings

    assert WorkerSettings().deployment == "shard-worker/shard-worker"
    assert not deployments["shard-worker"]["schedules"] and not deployments["shard-worker"]["parameters"]
    (step,) = spec["pull"]
    assert step["prefect.deployments.steps.set_working_directory"]["directory"] == "{{ $DOCMILL_REPO_DIR }}"


def test_deploy_cluster_iam_policy_is_least_privilege() -> None:
    policy = json.loads((REPO / "deploy" / "iam-policy.json").read_text())
    allowed = {a for st in policy["Statement"] if st["Effect"] == "Allow" for a in st["Action"]}
    assert allowed == {"s3:ListBucket", "s3:GetObject", "s3:PutObject", "s3:DeleteObject"}
    for st in policy["Statement"]:
        resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        assert all(r.startswith("arn:aws:s3:::DOCMILL_BUCKET") for r in resources), st
        assert "*" not in st["Action"]
    (deny,) = [st for st in policy["Statement"] if st["Effect"] == "Deny"]
    assert deny["Condition"]["Null"] == {"s3:if-none-match": "true", "s3:if-match": "true"}


@pytest.mark.parametrize("script", sorted(p.name for p in (REPO / "deploy").glob("*.sh")))
def test_deploy_cluster_scripts_parse(script: str) -> None:
    path = REPO / "deploy" / script
    assert path.stat().st_mode & 0o111, f"{script} is not executable"
    subprocess.run(["bash", "-n", str(path)], check=True)

"""One run spread over Prefect workers that share the organisation's rate limit, and a deadline.

Starts a loopback cluster with the deploy/ scripts (PostgreSQL, a Prefect server, SeaweedFS, process
workers; tests/fixtures/cluster.py), an emulator enforcing `--rpm` requests/min (every answer takes
`--latency-ms`, 5 % take 8 s more), registers deploy/prefect.yaml, uploads `--docs` generated invoices
to the bucket and runs `docmill run s3://docmill/<corpus> --workers N` as a user would (the driver here,
the shard workers on the pool). Scenarios (`--only` picks some):

  rate      3 workers: share of the limit in the steady part, 429s
  kill      3 workers, one SIGKILLed (worker and its flow run) halfway: the run completes; requests
            billed twice; results identical to a one-process run (`docmill run --no-prefect` against
            an emulator without limits, into another store)
  six       6 workers, no other setting changed: share of the limit, 429s
  deadline  `--finish-by` 10 virtual minutes away, batches that take 20 (the emulator's clock runs 10x:
            a batch of `--deadline-docs / 4` requests ends after 1,200 virtual seconds = 120 s; the
            deadline is 60 s away): what went batch and realtime, when the run ended
  deadline-ok  batches that take 5 virtual minutes, the deadline 20 away (120 s): they end before the
            last moment realtime would have to take over, so all goes batch; cost against a pure batch
            run of the same documents

Share of the limit = requests the emulator billed in the steady part (from `--warmup` s after the first
per-file answer to the 90 % mark) per minute over the limit; 429s over the requests it received.

    .venv/bin/python bench/workers.py [--docs 3000] [--rpm 600] [--only rate,kill,six,deadline,deadline-ok]

Targets (issue 26): share >= 0.95 and 429s <= 1 % with 3 and with 6 workers; kill: the run completes,
results identical, no request billed twice beyond those in flight at the kill; deadline: the run ends
before it; deadline-ok: cost <= 1.1 x pure batch.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures.cluster import (  # noqa: E402
    Cluster,
    emulator_accounting,
    free_port,
    kill_machine,
    list_keys,
    make_state_dir,
    prefect_cli,
    run_script,
    s3_client,
    start_cluster,
)

BUCKET = "docmill"
HEAVY_TAIL = {"kind": "latency", "latency_ms": 8000, "probability": 0.05}


def post(url: str, path: str, body: dict[str, Any]) -> None:
    import httpx

    httpx.post(f"{url}{path}", json=body, timeout=30).raise_for_status()


def start_emulator(state: Path, name: str, *args: str) -> tuple[subprocess.Popen[bytes], str]:
    """An extra emulator in its own process group (the cluster's own is in STATE/emulator.pid)."""
    import httpx

    port = free_port()
    log = open(state / f"emulator-{name}.log", "wb")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen(
        [sys.executable, "-m", "emulator.cli", "--port", str(port), *args],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            httpx.get(f"{url}/_emulator/accounting", timeout=2).raise_for_status()
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit(f"emulator {name} did not start; see {state}/emulator-{name}.log")


def upload_corpus(cluster: Cluster, docs: int, prefix: str, seed: int) -> Path:
    local = cluster.state / prefix
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples/make_invoices.py"),
            "--out",
            str(local),
            "--count",
            str(docs),
            "--seed",
            str(seed),
        ],
        check=True,
        capture_output=True,
    )
    s3 = s3_client(cluster)
    paths = sorted(p for p in local.rglob("*") if p.is_file())
    with ThreadPoolExecutor(16) as pool:
        list(
            pool.map(
                lambda p: s3.upload_file(str(p), BUCKET, f"{prefix}/{p.relative_to(local).as_posix()}"), paths
            )
        )
    return local


def docmill(
    cluster: Cluster, *args: str, env: dict[str, str] | None = None, timeout: float = 3600
) -> subprocess.Popen[str]:
    full = {**cluster.env, "DOCMILL_LOG_LEVEL": "WARNING", **(env or {})}
    log = open(cluster.state / f"driver-{int(time.time())}.log", "w")  # noqa: SIM115
    return subprocess.Popen(
        [str(ROOT / ".venv/bin/docmill"), *args],
        cwd=ROOT,
        env=full,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def wait(proc: subprocess.Popen[str], timeout: float) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise SystemExit("the driver did not finish in time") from None


def steady(billed: list[dict[str, Any]], limit: float, warmup: float) -> tuple[float, float, float]:
    """(share of the limit, seconds of the steady part, requests/min) of realtime per-file answers."""
    rows = sorted((b for b in billed if not b["batch"]), key=lambda b: b["at"])
    if len(rows) < 20:
        return 0.0, 0.0, 0.0
    start, end = rows[0]["at"] + warmup, rows[int(len(rows) * 0.9)]["at"]
    n = sum(1 for b in rows if start <= b["at"] < end)
    rpm = n / max(end - start, 1e-6) * 60.0
    return rpm / limit, end - start, rpm


def store_json(cluster: Cluster, key: str) -> Any:
    return json.loads(s3_client(cluster).get_object(Bucket=BUCKET, Key=key)["Body"].read())


def only_run(cluster: Cluster, store_prefix: str) -> str:
    runs = {k.split("/")[2] for k in list_keys(s3_client(cluster), BUCKET, f"{store_prefix}/runs/")}
    (run_id,) = runs
    return run_id


def outcomes(cluster: Cluster, store_prefix: str, run_id: str) -> dict[str, tuple[str, Any]]:
    out = {}
    for key in list_keys(s3_client(cluster), BUCKET, f"{store_prefix}/runs/{run_id}/outcomes/"):
        if key.endswith(".json"):
            for o in store_json(cluster, key)["outcomes"]:
                out[o["doc_id"]] = (o["state"], o.get("output"))
    return out


def spread_run(
    cluster: Cluster, a: argparse.Namespace, name: str, workers: int, kill: str | None = None
) -> dict[str, Any]:
    url = cluster.emulator_url
    assert url
    post(url, "/_emulator/reset", {})
    store = f"store-{name}"
    t0 = time.time()
    proc = docmill(
        cluster,
        "run",
        f"s3://{BUCKET}/corpus",
        "--workers",
        str(workers),
        "--new-run",
        env={"DOCMILL_STORE": f"s3://{BUCKET}/{store}"},
    )
    killed_at = None
    if kill:
        while proc.poll() is None:
            n = sum(1 for b in emulator_accounting(url)["billed"] if not b["batch"])
            if n >= a.docs // 2:
                kill_machine(cluster, kill, f"{store}/runs/{only_run(cluster, store)}", BUCKET)
                killed_at = time.time() - t0
                print(f"  {name}: SIGKILLed worker {kill} after {n} answers ({killed_at:.0f} s)", flush=True)
                break
            time.sleep(0.5)
    code = wait(proc, 3 * 3600)
    wall = time.time() - t0
    acct = emulator_accounting(url)
    share, seconds, rpm = steady(acct["billed"], a.rpm, a.warmup)
    received = int(acct["received_by_path"].get("/v1/messages", 0))
    n429 = int(acct["errors_by_status"].get("429", 0))
    bodies = Counter(b["body_sha256"] for b in acct["billed"])
    twice = [b for b in acct["billed"] if bodies[b["body_sha256"]] > 1]
    paid_twice_usd = sum(b["usd"] for b in twice) - sum(
        max(b["usd"] for b in twice if b["body_sha256"] == h) for h in {b["body_sha256"] for b in twice}
    )
    run_id = only_run(cluster, store)
    shards = store_json(cluster, f"{store}/runs/{run_id}/manifest.json")
    print(
        f"{name:<6} workers {workers}  exit {code}  phase {shards['phase']}  wall {wall:6.1f} s  share {share:5.3f} "
        f"({rpm:5.1f}/min over {seconds:5.1f} s)  429s {n429} of {received} ({100.0 * n429 / max(received, 1):.2f} %)  "
        f"billed twice {sum(1 for v in bodies.values() if v > 1)}",
        flush=True,
    )
    status = subprocess.run(
        [str(ROOT / ".venv/bin/docmill"), "--store", f"s3://{BUCKET}/{store}", "status", run_id],
        env=cluster.env,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    print("  " + status.stdout.replace("\n", "\n  ").rstrip(), flush=True)
    as_json = subprocess.run(
        [str(ROOT / ".venv/bin/docmill"), "--store", f"s3://{BUCKET}/{store}", "status", run_id, "--json"],
        env=cluster.env,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    left = json.loads(as_json.stdout)["status"]["in_flight"] if as_json.returncode == 0 else {}
    in_flight, in_flight_usd = int(left.get("requests", 0)), float(left.get("usd", 0.0))
    if kill:
        print(
            f"  {name}: possibly billed (docmill) {in_flight} request(s) up to ${in_flight_usd:.4f}; "
            f"paid twice (emulator) {sum(v - 1 for v in bodies.values())} request(s) "
            f"${paid_twice_usd:.4f}",
            flush=True,
        )
    if kill:  # back for the next scenario
        again = run_script("start-worker.sh", str(cluster.state), kill, "1", env=cluster.env)
        cluster.workers[kill] = int(again["DOCMILL_WORKER_PID"])
    return {
        "name": name,
        "exit": code,
        "share": share,
        "rpm": rpm,
        "n429": n429,
        "received": received,
        "billed_twice": sum(1 for v in bodies.values() if v > 1),
        "run_id": run_id,
        "store": store,
        "wall": wall,
        "killed_at": killed_at,
        "in_flight": in_flight,  # requests docmill counts as possibly billed (`docmill status`)
        "in_flight_usd": in_flight_usd,
        "paid_twice_usd": paid_twice_usd,
    }


def reference_outputs(cluster: Cluster, a: argparse.Namespace) -> dict[str, tuple[str, Any]]:
    """The same documents through one process (`--no-prefect`), against an emulator without limits."""
    proc, url = start_emulator(cluster.state, "reference", "--seed", "1")
    try:
        env = {
            "DOCMILL_API__BASE_URL": url,
            "DOCMILL_STORE": f"s3://{BUCKET}/store-one",
            "PREFECT_API_URL": "",
        }
        code = wait(
            docmill(cluster, "run", f"s3://{BUCKET}/corpus", "--no-prefect", "--new-run", env=env), 3600
        )
        assert code == 0, code
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
    return outcomes(cluster, "store-one", only_run(cluster, "store-one"))


def deadline_run(
    cluster: Cluster, a: argparse.Namespace, name: str, per_request: float, seconds: int = 60
) -> dict[str, Any]:
    """--finish-by `seconds` (60 s = 10 virtual minutes at clock speed 10); batches of docs/4
    requests that take `per_request` virtual seconds per request."""
    proc_e, url = start_emulator(
        cluster.state,
        name,
        "--seed",
        "1",
        "--clock-speed",
        "10",
        "--rpm",
        str(a.rpm),
        "--batch-seconds-per-request",
        str(per_request),
        "--latency-ms",
        "500",
    )
    env = {
        "DOCMILL_API__BASE_URL": url,
        "DOCMILL_STORE": f"s3://{BUCKET}/store-{name}",
        "DOCMILL_DEADLINE__MARGIN_SECONDS": "15",
        "DOCMILL_DEADLINE__CANCEL_SECONDS": "3",
        "DOCMILL_DEADLINE__LATENCY_SECONDS": "1",
        "DOCMILL_DEADLINE__POLL_SECONDS": "2",
        "DOCMILL_API__REQUESTS_PER_MINUTE": str(a.rpm),
    }
    try:
        t0 = time.time()
        proc = docmill(
            cluster,
            "run",
            f"s3://{BUCKET}/corpus-deadline",
            "--finish-by",
            f"+{seconds}s",
            "--new-run",
            env=env,
        )
        code = wait(proc, 600)
        wall = time.time() - t0
        acct = emulator_accounting(url)
    finally:
        os.killpg(proc_e.pid, signal.SIGKILL)
    from datetime import datetime

    run_id = only_run(cluster, f"store-{name}")
    record = store_json(cluster, f"store-{name}/runs/{run_id}/deadline.json")
    manifest = store_json(cluster, f"store-{name}/runs/{run_id}/manifest.json")
    deadline = datetime.fromisoformat(record["finish_by"]).timestamp()
    ended = datetime.fromisoformat(manifest["updated_at"]).timestamp()  # phase done: report written
    batch = [b for b in acct["billed"] if b["batch"]]
    realtime = [b for b in acct["billed"] if not b["batch"]]
    usd = sum(b["usd"] for b in acct["billed"])
    switch = f"{deadline - record['switched_at']:.1f} s before it" if record.get("switched_at") else "none"
    print(
        f"{name:<11} exit {code}  phase {manifest['phase']}  ended {deadline - ended:5.1f} s before the deadline "
        f"(+{seconds}s)  per-file by batch {len(batch)}, realtime {len(record.get('realtime') or [])} "
        f"(+ integration)  cancelled batches {len(record.get('canceled') or [])}  switch {switch} "
        f"({record.get('switch_why')})  cost ${usd:.4f}",
        flush=True,
    )
    return {
        "name": name,
        "exit": code,
        "wall": wall,
        "usd": usd,
        "batch": len(batch),
        "realtime": len(realtime),
    }


def pure_batch_cost(cluster: Cluster, a: argparse.Namespace) -> float:
    proc_e, url = start_emulator(
        cluster.state, "pure-batch", "--seed", "1", "--clock-speed", "10", "--rpm", str(a.rpm)
    )
    env = {
        "DOCMILL_API__BASE_URL": url,
        "DOCMILL_STORE": f"s3://{BUCKET}/store-pure-batch",
        "DOCMILL_BATCH__POLL_SECONDS": "2",
    }
    try:
        code = wait(
            docmill(
                cluster, "run", f"s3://{BUCKET}/corpus-deadline", "--mode", "batch", "--new-run", env=env
            ),
            600,
        )
        assert code == 0, code
        return float(sum(b["usd"] for b in emulator_accounting(url)["billed"]))
    finally:
        os.killpg(proc_e.pid, signal.SIGKILL)


def unscheduled(state: Path) -> Path:
    """deploy/prefect.yaml without its cron schedule: a nightly run starting at 02:00 UTC in the
    middle of a measurement would share the emulator (and skew it)."""
    import yaml

    spec = yaml.safe_load((ROOT / "deploy" / "prefect.yaml").read_text())
    for d in spec["deployments"]:
        d["schedules"] = []
    path = state / "prefect-unscheduled.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=3000)
    ap.add_argument("--deadline-docs", type=int, default=150)
    ap.add_argument("--rpm", type=int, default=600)
    ap.add_argument("--latency-ms", type=float, default=1000)
    ap.add_argument("--warmup", type=float, default=30.0)
    ap.add_argument("--only", default="rate,kill,six,deadline,deadline-ok")
    ap.add_argument("--keep", action="store_true", help="keep the cluster's state folder (logs)")
    a = ap.parse_args()
    wanted = set(a.only.split(","))
    state = make_state_dir()
    emulator = [
        "--rpm",
        str(a.rpm),
        "--latency-ms",
        str(a.latency_ms),
        "--seed",
        "1",
        "--fault",
        json.dumps(HEAVY_TAIL),
    ]
    worker_env = {"DOCMILL_STORE": f"s3://{BUCKET}/store", "DOCMILL_CHUNK_LIMIT_NAME": ""}
    t0 = time.time()
    cluster = start_cluster(
        state,
        workers=("w1", "w2", "w3"),
        worker_limit=1,
        bucket=BUCKET,
        worker_env=worker_env,
        emulator_args=emulator,
    )
    print(f"cluster up in {time.time() - t0:.0f} s; state {state}", flush=True)
    try:
        prefect_cli(
            cluster,
            "deploy",
            "--all",
            "--prefect-file",
            str(unscheduled(state)),
            DOCMILL_REPO_DIR=str(ROOT),
            DOCMILL_NIGHTLY_SOURCE=f"s3://{BUCKET}/corpus",
        )
        if wanted & {"rate", "kill", "six"}:
            upload_corpus(cluster, a.docs, "corpus", seed=11)
        if "rate" in wanted:
            spread_run(cluster, a, "rate", 3)
        if "kill" in wanted:
            r = spread_run(cluster, a, "kill", 3, kill="w1")
            ref = reference_outputs(cluster, a)
            got = outcomes(cluster, r["store"], r["run_id"])
            same = sum(1 for d, v in ref.items() if got.get(d) == v)
            print(
                f"kill   results identical to one process: {same} of {len(ref)} documents "
                f"({len(got)} outcomes in the spread run)",
                flush=True,
            )
        if "six" in wanted:
            for name in ("w4", "w5", "w6"):
                run_script("start-worker.sh", str(state), name, "1", env=cluster.env)
            spread_run(cluster, a, "six", 6)
        if wanted & {"deadline", "deadline-ok"}:
            upload_corpus(cluster, a.deadline_docs, "corpus-deadline", seed=12)
            quarter = max(1, -(-a.deadline_docs // 4))
        if "deadline" in wanted:
            deadline_run(cluster, a, "deadline", 1200.0 / quarter)  # a batch takes 20 virtual minutes
        if "deadline-ok" in wanted:
            # batches of 5 virtual minutes (30 s) and a deadline of 20 (120 s): they end before the
            # last moment realtime would have to take over (about 67 s in), so nothing goes realtime
            ok = deadline_run(cluster, a, "deadline-ok", 300.0 / quarter, seconds=120)
            pure = pure_batch_cost(cluster, a)
            print(
                f"deadline-ok cost ${ok['usd']:.4f} vs pure batch ${pure:.4f}: {ok['usd'] / pure:.3f}x",
                flush=True,
            )
    finally:
        cluster.stop(keep=a.keep)


if __name__ == "__main__":
    main()

"""Invariant 11: every way back is the same way back. The same `docmill run` command after a SIGKILL
continues the stopped run (one run id, no custom_id in two batch creates, results identical to an
uninterrupted run); a resumed run keeps its own model; the offline demo's batches survive a kill.

The CLI (`flows.cli.main`, `--no-prefect`) runs in a forked child process (modules already imported:
no interpreter start-up), so a SIGKILL is a real one; the emulator of the test session counts what
was sent, so the proof does not rest on docmill's own accounting.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from checkpoints.batches import BatchRecords
from checkpoints.manifest import ManifestStore
from checkpoints.store import open_store
from tests.fixtures.today import day_env
from tests.flows.helpers import make_corpus

KILLS = 6
BATCH_ENV = {
    "DOCMILL_BATCH__MAX_REQUESTS": "6",
    "DOCMILL_BATCH__POLL_SECONDS": "0.2",
    "DOCMILL_BATCH__POLL_MAX_SECONDS": "0.4",
}
EMULATOR = {"batch_base_seconds": 2.0, "batch_seconds_per_request": 0.05}


def _env(emulator: Any | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DOCMILL_", "ANTHROPIC_"))}
    env.update(BATCH_ENV, PREFECT_LOGGING_LEVEL="ERROR", **day_env(), **extra)
    if emulator is not None:
        env["DOCMILL_API__BASE_URL"] = emulator.base_url
    return env


def _cli(store: Path | str, *args: str) -> list[str]:
    return ["--store", str(store), *args, "--no-prefect"]


class Child:
    """`docmill ARGV` in a forked child with environment `env`: pid, poll(), wait(), kill(), stderr."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log, self.returncode = log, None
        self.pid = os.fork()
        if self.pid == 0:  # child
            code = 3
            try:
                fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(fd, 2)
                sys.stderr = sys.stdout = open(fd, "w", buffering=1)  # noqa: SIM115 (the child exits)
                os.environ.clear()
                os.environ.update(env)
                from docmill.settings import get_settings
                from flows.cli.main import main

                get_settings.cache_clear()
                code = main(argv)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)

    def poll(self) -> int | None:
        if self.returncode is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float = 120) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"docmill child hung; stderr: {self.stderr}")
            time.sleep(0.02)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.wait()

    @property
    def stderr(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


_N = iter(range(10**6))


def _run(argv: list[str], env: dict[str, str], tmp: Path) -> Child:
    child = Child(argv, env, tmp / f"stderr-{next(_N)}.txt")
    child.wait()
    return child


def _driving(store: Path | str, pid: int) -> bool:
    """Whether process `pid` holds the lease of a run in `store` (it is past its start-up)."""
    s = open_store(store)
    for run_id in ManifestStore(s).list_runs():
        lease = s.get_json_or_none(f"runs/{run_id}/lease.json") or {}
        if str(lease.get("holder", "")).split(":")[1:2] == [str(pid)]:
            return True
    return False


def _created(store: Path | str) -> bool:
    s = open_store(store)
    return any(
        r.batch_ids for run_id in ManifestStore(s).list_runs() for r in BatchRecords(s, run_id).load_all()
    )


def _kill_after(proc: Child, ready: Any, delay: float, timeout: float = 60) -> bool:
    """SIGKILL `proc` `delay` seconds after `ready()` holds; False if it ended on its own first."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            return False
        assert time.monotonic() < deadline, "the run never got going"
        time.sleep(0.02)
    time.sleep(delay)
    if proc.poll() is not None:
        return False
    proc.kill()
    return True


def _ledger(store: Path | str) -> dict[str, Any]:
    s = open_store(store)
    out = {}
    for key in s.list("results/file/"):
        r = s.get_json(key)
        out[r["key"]] = (r["state"], r["output"], r["reason"], r["failure_type"], r.get("model"))
    return out


def _outcomes(store: Path | str, run_id: str) -> dict[str, Any]:
    from tests.flows.helpers import outcomes_of

    return {d: (o["state"], o.get("output")) for d, o in outcomes_of(open_store(store), run_id).items()}


def _creates(emulator: Any) -> Counter[str]:
    """custom_id -> in how many batch creates the emulator received it."""
    return Counter(cid for b in emulator.state.batches.batches.values() for cid, _ in b.requests)


def test_same_run_command_after_six_sigkills_continues_one_run(tmp_path: Path, emulator: Any) -> None:
    corpus, _ = make_corpus(tmp_path, count=24, seed=11)
    emulator.state.configure(EMULATOR)
    run = ["run", str(corpus), "--mode", "batch"]
    ref_store = tmp_path / "ref"
    done = _run(_cli(ref_store, *run), _env(emulator), tmp_path)
    assert done.returncode == 0, done.stderr
    ref_run = next(ManifestStore(open_store(ref_store)).list_runs())
    reference = _ledger(ref_store), _outcomes(ref_store, ref_run)
    emulator.state.drain()
    emulator.state.reset()
    emulator.state.configure(EMULATOR)

    # Kills at random moments after create: lives 0-4 while the batches run (the emulator's clock is
    # frozen, so they cannot end under a loaded machine's slow start-ups), the last one once the
    # clock has moved on and the first results of the collection are being written.
    emulator.state.configure({"frozen_clock": True})
    store, rng, kills, lines = tmp_path / "store", random.Random(13), 0, []
    for life in range(KILLS + 1):
        if life == KILLS - 1:
            emulator.state.clock.advance(3600.0)  # every batch has ended now
            emulator.state.configure({"frozen_clock": False})  # and a later round's batches end too
        proc = Child(_cli(store, *run), _env(emulator), tmp_path / f"life-{life}.txt")
        if life < KILLS:
            if life == KILLS - 1:
                ready, delay = (lambda: bool(_ledger(store))), 0.0
            elif life:
                ready, delay = (lambda p=proc: _driving(store, p.pid)), rng.uniform(0.0, 0.8)
            else:
                ready, delay = (lambda: _created(store)), rng.uniform(0.0, 0.8)
            if _kill_after(proc, ready, delay):
                kills += 1
                lines.append(proc.stderr)
                continue
        assert proc.wait() == 0, proc.stderr
        lines.append(proc.stderr)
        break
    runs = list(ManifestStore(open_store(store)).list_runs())
    assert kills == KILLS, f"only {kills} kills landed before the run finished"
    assert len(runs) == 1, f"{len(runs)} run ids: {runs}"
    assert sum("continuing stopped run " + runs[0] in err for err in lines) == KILLS
    creates = _creates(emulator)
    batches = len(emulator.state.batches.batches)
    print(
        f"\n{kills} kills, {len(runs)} run id, {batches} batch creates, {len(creates)} custom_ids sent, "
        f"{sum(v > 1 for v in creates.values())} in two creates"
    )
    assert max(creates.values()) == 1, f"{sum(v > 1 for v in creates.values())} custom_ids in two creates"
    assert (_ledger(store), _outcomes(store, runs[0])) == reference


def test_new_run_flag_starts_fresh_and_the_killed_runs_spend_stays_visible(
    tmp_path: Path, emulator: Any
) -> None:
    """`--new-run` after a kill starts a fresh run; what the killed one paid (its answers saved, the
    bound of what was in flight) stays in `docmill runs` and in the new run's report."""
    from tasks.reporting.status import run_status, runs_table

    corpus, _ = make_corpus(tmp_path, count=8, seed=12)
    emulator.state.configure({"latency_ms": 300.0})
    store, env = tmp_path / "store", _env(emulator, DOCMILL_API__CONCURRENCY="2")
    s = open_store(store)
    first = Child(_cli(store, "run", str(corpus)), env, tmp_path / "first.txt")
    assert _kill_after(first, lambda: len(list(s.list("results/file/"))) >= 1, 0.1)
    (killed,) = ManifestStore(s).list_runs()
    emulator.state.drain()
    paid = emulator.state.accounting.total_usd()
    st = run_status(s, killed)
    assert 0 < st["cost_usd"] <= paid + 1e-9 <= st["cost_usd"] + st["in_flight"]["usd"] + 1e-9
    emulator.state.configure({"latency_ms": 0.0})
    again = _run(_cli(store, "run", str(corpus), "--new-run"), env, tmp_path)
    assert again.returncode == 0, again.stderr
    assert "continuing" not in again.stderr
    runs = list(ManifestStore(s).list_runs())
    assert len(runs) == 2
    row = next(line for line in runs_table(s) if line.startswith(killed))
    assert f"${st['cost_usd']:.4f} +<=${st['in_flight']['usd']:.4f}" in row, row
    (new,) = [r for r in runs if r != killed]
    report = s.get(f"runs/{new}/report.md").decode()
    assert f"Run `{killed}` stopped over these documents" in report
    assert f"${st['cost_usd']:.4f} recorded" in report


def test_resume_keeps_the_model_the_run_was_started_with(tmp_path: Path, emulator: Any) -> None:
    corpus, _ = make_corpus(tmp_path, count=14, seed=5)
    emulator.state.configure(EMULATOR)
    store, model, env = tmp_path / "store", "claude-haiku-4-5", _env(emulator)
    proc = Child(
        _cli(store, "run", str(corpus), "--mode", "batch", "--model", model), env, tmp_path / "k.txt"
    )
    assert _kill_after(proc, lambda: _created(store), 0.3)
    run_id = next(ManifestStore(open_store(store)).list_runs())
    out = _run(_cli(store, "resume", run_id), env, tmp_path)
    assert out.returncode == 0, out.stderr
    models = Counter(
        str(p.get("model")) for b in emulator.state.batches.batches.values() for _, p in b.requests
    )
    assert models == Counter({model: sum(models.values())}), models
    assert {r[4] for r in _ledger(store).values()} == {model}
    assert max(_creates(emulator).values()) == 1
    billed = Counter(r.custom_id for r in emulator.state.accounting.billed)
    assert max(billed.values()) == 1, "a request was paid twice"


def test_offline_demo_resumes_after_kill_during_a_batch(tmp_path: Path) -> None:
    """The built-in emulator (no API key, no base URL) keeps its batches in the store: a kill -9
    during a batch and `resume` finish the run instead of failing with HTTP 404 forever."""
    corpus, _ = make_corpus(tmp_path, count=8, seed=4)
    store = tmp_path / "store"
    env = _env(None, DOCMILL_EMULATOR_BATCH_BASE_SECONDS="2")
    proc = Child(_cli(store, "run", str(corpus), "--mode", "batch"), env, tmp_path / "k.txt")
    assert _kill_after(proc, lambda: _created(store), 0.1)
    run_id = next(ManifestStore(open_store(store)).list_runs())
    out = _run(_cli(store, "resume", run_id), env, tmp_path)
    assert out.returncode == 0, out.stderr
    s = open_store(store)
    assert ManifestStore(s).load(run_id).phase == "done"
    sent = Counter(cid for key in s.list("emulator/batches/") for cid, _ in s.get_json(key)["requests"])
    assert sent and max(sent.values()) == 1


def test_resume_says_what_it_overrides(tmp_path: Path, emulator: Any) -> None:
    corpus, _ = make_corpus(tmp_path, count=3, seed=2)
    store, env = tmp_path / "store", _env(emulator)
    first = _run(_cli(store, "run", str(corpus), "--max-cost-usd", "0"), env, tmp_path)
    assert first.returncode == 4
    run_id = next(ManifestStore(open_store(store)).list_runs())
    for given in (None, "0.5"):
        extra = ["--max-cost-usd", given] if given else []
        out = _run(_cli(store, "resume", run_id, *extra), env, tmp_path)
        said = [line for line in out.stderr.splitlines() if "cost.max_cost_usd" in line]
        if given:
            assert out.returncode == 0, out.stderr
            assert said == [
                f"docmill: run {run_id} continues with cost.max_cost_usd 0.0 -> 0.5 (safe to change)"
            ]
        else:
            assert out.returncode == 4 and said == []  # its own cap, nothing to say


def test_requests_in_flight_at_a_kill_are_bounded_shown_and_counted(tmp_path: Path, emulator: Any) -> None:
    """Invariant 13: a realtime run at --concurrency 4 killed with two chunks open counts at most 4
    requests as possibly billed (not whole chunks, not the answers it saved); `status` shows that
    bound, recorded + saved + bound covers what the emulator billed, and the same command under a cap
    above the true spend (below the whole chunks' worst case) completes, the bound kept in the report."""
    from checkpoints.inflight import InFlight
    from tasks.reporting.status import run_status, status_text

    corpus, _ = make_corpus(tmp_path, count=16, seed=7)
    emulator.state.configure({"latency_ms": 400.0})
    store, env = tmp_path / "store", _env(emulator, DOCMILL_API__CONCURRENCY="4", DOCMILL_CHUNK_SIZE="6")
    proc = Child(_cli(store, "run", str(corpus)), env, tmp_path / "k.txt")
    s = open_store(store)
    assert _kill_after(proc, lambda: len(list(s.list("results/file/"))) >= 2, 0.1)
    run_id = next(ManifestStore(s).list_runs())
    records = InFlight(s, run_id).records()
    keys = {k for r in records for k in r.get("worst") or {}}
    assert len(records) >= 2 and len(keys) > 4, (
        "the kill must leave more than 4 requests' worth of chunks open"
    )
    st = run_status(s, run_id)
    left = st["in_flight"]
    assert 1 <= left["requests"] <= 4 and left["lives"] == 1  # at most the concurrency
    assert f"at most {left['requests']} request(s)" in status_text(st)
    emulator.state.drain()
    billed = emulator.state.accounting.total_usd()
    assert st["cost_usd"] <= billed + 1e-9 <= st["cost_usd"] + left["usd"] + 1e-9  # the bound holds
    whole = sum(sum((r.get("worst") or {}).values()) for r in records)  # every request of the open chunks
    # room for the whole corpus at twice its measured price per request, plus the bound
    cap = 2 * billed * 16 / max(1, len(emulator.state.accounting.billed)) + left["usd"]
    print(f"cap {cap:.4f} billed {billed:.4f} bound {left['usd']:.4f} whole chunks {whole:.4f}")
    assert st["cost_usd"] + whole > cap, "the cap must be one that whole chunks' bounds would pass"
    again = _run(_cli(store, "run", str(corpus), "--max-cost-usd", f"{cap:.4f}"), env, tmp_path)
    assert again.returncode == 0, again.stderr
    emulator.state.drain()
    after = run_status(s, run_id)
    assert after["phase"] == "done" and after["in_flight"]["requests"] == left["requests"]  # kept, frozen
    assert emulator.state.accounting.total_usd() <= after["cost_usd"] + after["in_flight"]["usd"] + 1e-9
    report = s.get(f"runs/{run_id}/report.md").decode()
    assert f"at most {left['requests']} request(s) in flight" in report


def test_an_integration_call_in_flight_at_a_kill_is_counted(tmp_path: Path, emulator: Any) -> None:
    """Invariant 13: killed while an integration call is in flight (the emulator bills it anyway, as
    the API may), the call counts as possibly billed: recorded + bound covers the bill; one request."""
    from checkpoints.inflight import CALL, InFlight
    from tasks.reporting.status import run_status

    corpus, _ = make_corpus(tmp_path, count=4, seed=3)
    slow = emulator.state.faults.add(kind="latency", latency_ms=1500, marker="integrated_digest", count=1)
    store, env = tmp_path / "store", _env(emulator, DOCMILL_API__CONCURRENCY="4")
    proc = Child(_cli(store, "run", str(corpus)), env, tmp_path / "k.txt")
    s = open_store(store)

    def calling() -> bool:  # recorded in flight, and the request has reached the emulator
        runs = list(ManifestStore(s).list_runs())
        recorded = bool(runs) and any(r.get("kind") == CALL for r in InFlight(s, runs[0]).records())
        return recorded and slow.hits == 1

    assert _kill_after(proc, calling, 0.3)
    run_id = next(ManifestStore(s).list_runs())
    emulator.state.drain()
    st = run_status(s, run_id)
    billed = emulator.state.accounting.total_usd()
    assert st["in_flight"]["requests"] == 1 and st["in_flight"]["usd"] > 0
    assert st["cost_usd"] < billed <= st["cost_usd"] + st["in_flight"]["usd"] + 1e-9


def test_new_run_never_sends_a_stopped_runs_batch_again(tmp_path: Path, emulator: Any) -> None:
    corpus, _ = make_corpus(tmp_path, count=6, seed=9)
    emulator.state.configure(EMULATOR)
    store, env = tmp_path / "store", _env(emulator)
    proc = Child(_cli(store, "run", str(corpus), "--mode", "batch"), env, tmp_path / "k.txt")
    assert _kill_after(proc, lambda: _created(store), 0.0)
    sent = sum(_creates(emulator).values())
    fresh = _run(_cli(store, "run", str(corpus), "--mode", "batch", "--new-run"), env, tmp_path)
    assert fresh.returncode == 5, fresh.stderr
    assert "not collected yet" in fresh.stderr and len(fresh.stderr.strip().splitlines()) == 1
    assert sum(_creates(emulator).values()) == sent  # nothing sent again
    again = _run(_cli(store, "run", str(corpus), "--mode", "batch"), env, tmp_path)  # continues it
    assert again.returncode == 0, again.stderr
    assert max(_creates(emulator).values()) == 1


def test_same_run_command_on_s3_with_mode_auto(tmp_path: Path, emulator: Any, s3_store_uri: str) -> None:
    """The same on S3 with `--mode auto` (batches from 5 documents): killed twice after create, the
    same command continues one run, no custom_id is in two creates, results equal an uninterrupted run."""
    corpus, _ = make_corpus(tmp_path, count=12, seed=3)
    emulator.state.configure(EMULATOR)
    env = _env(
        emulator,
        DOCMILL_BATCH__AUTO_THRESHOLD="5",
        DOCMILL_S3_ENDPOINT_URL=os.environ["DOCMILL_S3_ENDPOINT_URL"],
    )
    run = ["run", str(corpus), "--mode", "auto"]
    ref = s3_store_uri + "-ref"
    assert _run(_cli(ref, *run), env, tmp_path).returncode == 0
    reference = _ledger(ref), _outcomes(ref, next(ManifestStore(open_store(ref)).list_runs()))
    emulator.state.drain()
    emulator.state.reset()
    emulator.state.configure(EMULATOR)
    for life in range(2):
        proc = Child(_cli(s3_store_uri, *run), env, tmp_path / f"s3-life-{life}.txt")
        ready = (
            (lambda p=proc: _created(s3_store_uri) and _driving(s3_store_uri, p.pid))
            if life
            else (lambda: _created(s3_store_uri))
        )
        assert _kill_after(proc, ready, 0.2 * life)
    last = _run(_cli(s3_store_uri, *run), env, tmp_path)
    assert last.returncode == 0, last.stderr
    runs = list(ManifestStore(open_store(s3_store_uri)).list_runs())
    assert len(runs) == 1 and f"continuing stopped run {runs[0]}" in last.stderr
    assert ManifestStore(open_store(s3_store_uri)).load(runs[0]).mode == "batch"
    assert max(_creates(emulator).values()) == 1
    assert (_ledger(s3_store_uri), _outcomes(s3_store_uri, runs[0])) == reference


def test_two_resumes_of_a_killed_run_at_once_on_s3_one_drives_the_other_exits_5(
    tmp_path: Path, emulator: Any, s3_store_uri: str
) -> None:
    """Invariants 4 and 11 through the CLI on S3: two `docmill resume RUN_ID` of one killed run
    started together: one drives it to the end (exit 0), the other exits 5 with one line naming the
    driver, before sending anything; nothing is paid twice beyond what was in flight at the kill."""
    corpus, _ = make_corpus(tmp_path, count=16, seed=5)
    emulator.state.configure({"latency_ms": 300.0})
    env = _env(
        emulator,
        DOCMILL_API__CONCURRENCY="2",
        DOCMILL_CHUNK_SIZE="4",
        DOCMILL_S3_ENDPOINT_URL=os.environ["DOCMILL_S3_ENDPOINT_URL"],
    )
    s = open_store(s3_store_uri)
    proc = Child(_cli(s3_store_uri, "run", str(corpus)), env, tmp_path / "first.txt")
    assert _kill_after(proc, lambda: len(list(s.list("results/file/"))) >= 2, 0.1)
    run_id = next(ManifestStore(s).list_runs())
    both = [Child(_cli(s3_store_uri, "resume", run_id), env, tmp_path / f"resume-{i}.txt") for i in (0, 1)]
    codes = sorted(c.wait() for c in both)
    assert codes == [0, 5], [c.stderr for c in both]
    refused = next(c for c in both if c.returncode == 5).stderr.strip().splitlines()
    assert f"run {run_id} is driven by" in refused[-1] and len(refused) <= 2, refused  # after "continuing"
    emulator.state.drain()
    bodies = Counter(b.body_sha256 for b in emulator.state.accounting.billed)
    assert sum(n - 1 for n in bodies.values()) <= 2  # the kill's requests in flight, at most
    assert ManifestStore(s).load(run_id).phase == "done"

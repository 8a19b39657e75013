"""`docmill run --workers N` in one process: the driver (flows.workers.spread) plans shards and launches
shard workers (flows.workers.shard_worker) as threads instead of Prefect flow runs; everything else is real (the
emulator over HTTP, the store, the claims). The Prefect-launched version runs in
tests/deploy/test_deploy_workers.py."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from checkpoints.shards import ShardTable, WorkerLog
from checkpoints.store import open_store
from docmill.settings import Settings, WorkerSettings
from flows.entry import RunWiring, run_extract
from flows.run.context import RunParams
from flows.workers.shard_worker import work_shards
from tests.flows.helpers import make_corpus, outcomes_of, settings_for


class ThreadLauncher:
    """Shard workers as threads of this process (a `flows.workers.spread.Launcher`)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.threads: dict[str, threading.Thread] = {}
        self.results: list[dict[str, Any]] = []
        self.errors: list[BaseException] = []

    def launch(self, run_id: str, generation: int, store: str, key: str) -> str:
        name = f"t{len(self.threads) + 1}"

        def work() -> None:
            try:
                self.results.append(
                    work_shards(run_id, generation, store=store, name=name, settings=self.settings)
                )
            except BaseException as e:  # the test asserts on it
                self.errors.append(e)

        thread = threading.Thread(target=work, name=name, daemon=True)
        self.threads[key] = thread
        thread.start()
        return key

    def gone(self, handle: str) -> bool:
        return not self.threads[handle].is_alive()

    def cancel(self, handle: str) -> None:
        pass


def _settings(emulator: Any, store: Path, **workers: Any) -> Settings:
    s = settings_for(emulator, str(store))
    conf = WorkerSettings(poll_seconds=0.05, shards_per_worker=2, **workers)
    return s.model_copy(update={"chunk_size": 4, "workers": conf})


def _outputs(store_path: Path, run_id: str) -> dict[str, Any]:
    return {
        d: (o["state"], o.get("output")) for d, o in outcomes_of(open_store(str(store_path)), run_id).items()
    }


def test_spread_run_over_two_workers_matches_one_process(emulator: Any, tmp_path: Path) -> None:
    corpus, _ = make_corpus(tmp_path, count=24, seed=5)
    settings = _settings(emulator, tmp_path / "spread")
    launcher = ThreadLauncher(settings)
    summary = run_extract(
        RunParams(str(corpus), "invoices", workers=2),
        settings=settings,
        wiring=RunWiring(launcher=launcher, progress=False),
    )
    assert not launcher.errors, launcher.errors
    spread_billed = list(emulator.state.accounting.billed)

    store = open_store(str(tmp_path / "spread"))
    run_id = summary["run_id"]
    (gen,) = ShardTable.generations(store, run_id)
    states = ShardTable(store, run_id, gen).states()
    assert len(states) == 4 and {s["state"] for s in states} == {"done"}
    assert {r["worker"] for r in launcher.results} == {"t1", "t2"}
    assert sum(len(r["shards"]) for r in launcher.results) == 4  # every shard worked once
    assert {w["name"] for w in WorkerLog(store, run_id).all()} == {"t1", "t2"}
    from tasks.reporting.status import run_status, status_text

    text = status_text(run_status(store, run_id))
    assert "shards 4/4 done" in text and "worker t1" in text and "worker t2" in text
    assert "## Shards and workers" in store.get(f"runs/{run_id}/report.md").decode()
    # one request per document: no body billed twice across the two workers
    assert len({b.body_sha256 for b in spread_billed}) == len(spread_billed)

    one = run_extract(
        RunParams(str(corpus), "invoices"),
        settings=settings_for(emulator, str(tmp_path / "one")),
        wiring=RunWiring(progress=False),
    )
    assert _outputs(tmp_path / "spread", run_id) == _outputs(tmp_path / "one", one["run_id"])
    assert summary["states"] == one["states"] and summary["documents"] == one["documents"]


def test_spread_shard_of_a_silent_worker_is_claimed_after_its_lease(emulator: Any, tmp_path: Path) -> None:
    """A worker on another machine claimed a shard and went silent: the shard waits until the claim's
    lease lapses, then another worker takes it over (counted as a takeover) and the run completes."""
    corpus, _ = make_corpus(tmp_path, count=12, seed=6)
    settings = _settings(emulator, tmp_path / "s", claim_seconds=1.5)
    store = open_store(str(tmp_path / "s"))
    launcher = ThreadLauncher(settings)
    silent_until: list[float] = []
    real_launch = launcher.launch

    def launch_after_a_silent_claim(run_id: str, generation: int, store_uri: str, key: str) -> str:
        if not silent_until:  # before the first worker starts: a worker elsewhere claims s000, then dies
            table = ShardTable(store, run_id, generation)
            assert table.claim("elsewhere:1:abc:w9", "w9", 1.5) == "s000"
            silent_until.append(time.time() + 1.5)
        return real_launch(run_id, generation, store_uri, key)

    launcher.launch = launch_after_a_silent_claim  # type: ignore[method-assign]
    summary = run_extract(
        RunParams(str(corpus), "invoices", workers=2),
        settings=settings,
        wiring=RunWiring(launcher=launcher, progress=False),
    )
    assert not launcher.errors, launcher.errors
    assert summary["phase"] == "done" and time.time() >= silent_until[0]
    run_id = summary["run_id"]
    states = {s["shard"]: s for s in ShardTable(store, run_id, 1).states()}
    assert states["s000"]["state"] == "done" and states["s000"]["takeovers"] == 1
    assert states["s000"]["worker"] in {"t1", "t2"}
    billed = Counter(b.body_sha256 for b in emulator.state.accounting.billed)
    assert max(billed.values()) == 1


def test_spread_same_command_after_the_driver_dies_continues_the_same_run(
    emulator: Any, tmp_path: Path
) -> None:
    """The driver stops once the first shard is done (Ctrl-C: its workers stop sending too); the same
    command again continues that run and its unfinished set of shards, never a second plan."""
    from docmill.shutdown import SHUTDOWN

    corpus, _ = make_corpus(tmp_path, count=24, seed=5)
    settings = _settings(emulator, tmp_path / "s")
    store = open_store(str(tmp_path / "s"))
    first = ThreadLauncher(settings)
    launched_gone = first.gone

    def gone_until_a_shard_is_done(handle: str) -> bool:  # the driver asks this while it waits
        if any(k.endswith(".done.json") for k in store.list("runs/")):
            raise KeyboardInterrupt
        return launched_gone(handle)

    first.gone = gone_until_a_shard_is_done  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        run_extract(
            RunParams(str(corpus), "invoices", workers=2),
            settings=settings,
            wiring=RunWiring(launcher=first, progress=False),
        )
    for thread in first.threads.values():
        thread.join(30)
    SHUTDOWN.reset()  # the workers' stop (as on their own Ctrl-C) belonged to that life
    (run_id,) = [k.split("/")[1] for k in store.list("runs/") if k.endswith("/manifest.json")]
    done_before = len(ShardTable(store, run_id, 1).done())
    assert 1 <= done_before < 4

    summary = run_extract(
        RunParams(str(corpus), "invoices", workers=2),
        settings=settings,
        wiring=RunWiring(launcher=ThreadLauncher(settings), progress=False),
    )
    assert summary["run_id"] == run_id and summary["phase"] == "done"
    assert ShardTable.generations(store, run_id) == [1]  # the same shards, continued
    billed = Counter(b.body_sha256 for b in emulator.state.accounting.billed)
    assert max(billed.values()) == 1


def test_spread_workers_share_the_cost_cap_and_never_pass_it(emulator: Any, tmp_path: Path) -> None:
    """Two workers under one cap: each spends only its grant of what is left; the run stops on its
    budget without passing it (answers, and what may be in flight, counted), and a resume with a
    higher cap finishes it without paying for anything twice."""
    from checkpoints.costs import CostLedger
    from checkpoints.inflight import InFlight
    from docmill.errors import BudgetExhausted
    from flows.entry import RunWiring, resume_run
    from flows.run.context import RunParams

    corpus, _ = make_corpus(tmp_path, count=24, seed=5)
    settings = _settings(emulator, tmp_path / "s")
    cap = 0.08  # about half of what the documents cost
    capped = settings.model_copy(update={"cost": settings.cost.model_copy(update={"max_cost_usd": cap})})
    launcher = ThreadLauncher(capped)
    with pytest.raises(BudgetExhausted):
        run_extract(
            RunParams(str(corpus), "invoices", workers=2),
            settings=capped,
            wiring=RunWiring(launcher=launcher, progress=False),
        )
    assert not launcher.errors, launcher.errors
    store = open_store(str(tmp_path / "s"))
    (run_id,) = [k.split("/")[1] for k in store.list("runs/") if k.endswith("/manifest.json")]
    spent = float(CostLedger(store, run_id).totals()["usd"]) + InFlight(store, run_id).totals()["usd"]
    assert 0 < spent <= cap
    assert sum(b.usd for b in emulator.state.accounting.billed) <= cap
    summary = resume_run(
        run_id,
        settings=settings,
        max_cost_usd=1.0,
        wiring=RunWiring(progress=False, launcher=ThreadLauncher(settings)),
    )
    assert summary["phase"] == "done"
    billed = Counter(b.body_sha256 for b in emulator.state.accounting.billed)
    assert max(billed.values()) == 1


def test_spread_needs_the_shard_worker_deployment(
    emulator: Any, tmp_path: Path, prefect_engine: None
) -> None:
    from docmill.errors import InputError

    corpus, _ = make_corpus(tmp_path, count=3, seed=1)
    settings = settings_for(emulator, str(tmp_path / "s"))
    with pytest.raises(InputError, match=r"shard-worker/shard-worker.*not registered"):
        run_extract(
            RunParams(str(corpus), "invoices", workers=2), settings=settings, wiring=RunWiring(progress=False)
        )
    assert emulator.state.accounting.received == 0


def test_cli_workers_without_a_prefect_server_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before anything starts (no temporary Prefect server, nothing sent): one line, exit 2."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.cli.main import main

    corpus, _ = make_corpus(tmp_path, count=12, seed=9)
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        assert main(["--store", str(tmp_path / "s"), "run", str(corpus), "--workers", "2"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--workers needs a Prefect server" in lines[0]
    assert not (tmp_path / "s" / "runs").exists()


def test_cli_workers_with_a_deadline_is_refused_in_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A deadline runs in one process: `--workers N --finish-by T` is refused before anything starts
    (the workers would idle while the run claims to use them); the flows refuse the pair alike."""
    from docmill.errors import InputError
    from flows.cli.main import main

    corpus, _ = make_corpus(tmp_path, count=3, seed=9)
    argv = ["--store", str(tmp_path / "s"), "run", str(corpus), "--workers", "2", "--finish-by", "+2h"]
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--workers and --finish-by cannot be combined" in lines[0], lines
    assert not (tmp_path / "s" / "runs").exists()
    settings = Settings(store=str(tmp_path / "s"))
    with pytest.raises(InputError, match="cannot be combined"):
        run_extract(
            RunParams(str(corpus), "invoices", workers=2, finish_by="+2h"),
            settings=settings,
            wiring=RunWiring(progress=False),
        )
    assert not (tmp_path / "s" / "runs").exists()

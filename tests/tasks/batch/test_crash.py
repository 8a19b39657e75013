"""Invariant 2: SIGKILL the batch engine at each lifecycle point, resume, and prove with the
emulator's accounting that no request was billed twice, every document ended in one terminal
state, and the outputs equal an uninterrupted run's.

The engine runs in a forked child process; the emulator runs in the test process, so it survives
the kill. The subprocess's sleep advances the emulator's virtual clock (batches take
virtual time), so a resumed run moves the clock on too. The forked child arms its kill
point as DOCMILL_CRASH_AT=point#n would at start (`docmill.crash_points.arm`).
"""

from __future__ import annotations

import json
import os
import signal
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from checkpoints.batches import BatchRecords
from checkpoints.store import open_store
from docmill import crash_points

POINTS = ["before_create", "after_create", "polling", "streaming_results", "before_ledger_write"]
BATCH = {"max_requests": 3, "poll_seconds": 30.0, "poll_max_seconds": 60.0}
EMULATOR = {"batch_seconds_per_request": 10.0}


def engine_run(
    emulator_url: str,
    store: Path,
    corpus: Path,
    out: Path,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> None:
    """One run of the batch pass over `corpus`; outcomes written as JSON lines to `out`."""
    from docmill.settings import Settings
    from tasks.api.client import ModelClient
    from tasks.batch.engine import run_batches
    from tasks.per_file.scope import RunScope
    from tasks.recipes import load_recipe
    from tasks.source.inventory import inventory
    from tests.fixtures.emulator import sdk_client

    class _Emu:
        base_url = emulator_url

    settings = Settings(store=str(store), batch=BATCH)  # type: ignore[arg-type]
    recipe = load_recipe("invoices")
    outcomes = run_batches(
        inventory(str(corpus), settings, doc_types=recipe.doc_types),
        RunScope(
            recipe,
            "crash-run",
            open_store(store),
            ModelClient(settings, base_url=_Emu.base_url, api_key="k"),
            settings,
        ),
        lambda: sdk_client(_Emu()),  # type: ignore[arg-type]
        clock=clock,
        sleep=sleep,
    )
    with open(out, "w") as fh:
        for o in outcomes:
            fh.write(o.model_dump_json() + "\n")


def _child(emulator_url: str, store: Path, corpus: Path, out: Path) -> None:
    """In the forked child (its crash point armed: it SIGKILLs itself there). The emulator lives in
    the parent; clock and sleep go over HTTP."""
    import httpx2

    control = httpx2.Client(base_url=emulator_url)

    def advance(seconds: float) -> None:
        control.post("/_emulator/clock/advance", json={"seconds": seconds}).raise_for_status()

    engine_run(
        emulator_url,
        store,
        corpus,
        out,
        lambda: float(control.get("/_emulator/clock").json()["now"]),
        advance,
    )


def run_killed(emulator: Any, store: Path, corpus: Path, out: Path, point: str, nth: int) -> None:
    """Run the engine in a forked child (modules already imported: no interpreter start-up) and
    assert it died of SIGKILL at the named point."""
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            crash_points.arm(f"{point}#{nth}")
            _child(emulator.base_url, store, corpus, out)
        except BaseException:
            traceback.print_exc()
            code = 3
        finally:
            os._exit(code)
    deadline = time.monotonic() + 120
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError(f"engine child hung at {point}")
        time.sleep(0.05)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
        f"the engine was not killed at {point} (status {status}): the point was never reached"
    )


def run_here(emulator: Any, store: Path, corpus: Path, out: Path) -> None:
    """The same run in the test process (the resume, and the uninterrupted reference)."""
    engine_run(emulator.base_url, store, corpus, out, emulator.state.clock.now, emulator.state.clock.advance)


def setup_faults(emulator: Any, corpus: Path) -> None:
    """One document's first answer fails the gate (repair round); another's first try is overloaded."""
    emulator.state.configure(EMULATOR)
    files = sorted(p for p in corpus.rglob("inv-*") if p.parent.name.startswith("20"))
    emulator.state.faults.add(kind="schema_invalid", marker=_marker(corpus, files[0]), count=1)
    emulator.state.faults.add(kind="overloaded", marker=_marker(corpus, files[1]), count=1)


def _marker(corpus: Path, path: Path) -> str:
    """A line of `path` that no other file of the corpus contains."""
    others = [p.read_bytes().decode(errors="replace") for p in corpus.rglob("*") if p.is_file() and p != path]
    for line in path.read_text().splitlines():
        line = line.strip()
        if len(line) > 10 and not any(line in text for text in others):
            return line
    raise AssertionError(f"no unique line in {path}")


def settle(emulator: Any) -> None:
    """Let every batch the emulator holds run to its end, so each one bills what it processed (the
    emulator bills lazily, when a batch is looked at; an orphan batch is otherwise never billed)."""
    from tests.fixtures.emulator import sdk_client

    emulator.state.clock.advance(2 * 24 * 3600.0)
    for _ in sdk_client(emulator).messages.batches.list(limit=1000):
        pass


def summary(emulator: Any, store: Path, out: Path) -> dict[str, Any]:
    settle(emulator)
    s = open_store(store)
    ledger = {}
    for key in s.list("results/file/"):
        rec = s.get_json(key)
        ledger[rec["key"]] = (rec["state"], rec["output"], rec["reason"], rec["failure_type"])
    outcomes = [json.loads(line) for line in out.read_text().splitlines()]
    billed = Counter((r.custom_id, r.body_sha256) for r in emulator.state.accounting.billed)
    return {"ledger": ledger, "outcomes": outcomes, "billed": billed}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tasks.batch.test_engine import make_corpus

    return make_corpus(tmp_path_factory.mktemp("crash") / "corpus", 16, seed=3)


_REFERENCE: dict[str, Any] = {}


def reference(emulator: Any, corpus: Path, tmp: Path) -> dict[str, Any]:
    if not _REFERENCE:
        setup_faults(emulator, corpus)
        run_here(emulator, tmp / "ref-store", corpus, tmp / "ref.jsonl")
        _REFERENCE.update(summary(emulator, tmp / "ref-store", tmp / "ref.jsonl"))
        emulator.state.reset()
    return _REFERENCE


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_at_each_lifecycle_point_then_resume(
    emulator: Any, corpus: Path, tmp_path: Path, point: str
) -> None:
    ref = reference(emulator, corpus, tmp_path)
    assert any(state == "succeeded" for state, *_ in ref["ledger"].values())
    assert max(ref["billed"].values()) == 1
    setup_faults(emulator, corpus)
    store, out = tmp_path / "store", tmp_path / "out.jsonl"
    run_killed(emulator, store, corpus, out, point, 2)
    run_here(emulator, store, corpus, out)  # resume: same run id, the clock moves on
    got = summary(emulator, store, out)
    assert max(got["billed"].values()) == 1, "a request was billed twice"
    assert set(got["billed"]) == set(ref["billed"]), "different requests were billed"
    assert got["ledger"] == ref["ledger"], "outputs differ from an uninterrupted run"
    docs = [o["doc_id"] for o in got["outcomes"]]
    assert sorted(docs) == sorted(o["doc_id"] for o in ref["outcomes"]) and len(set(docs)) == len(docs)
    assert all(o["state"] in ("succeeded", "needs_review", "failed", "skipped") for o in got["outcomes"])
    notes = [n for r in BatchRecords(open_store(store), "crash-run").load_all() for n in r.notes]
    assert any("reconciled" in n or "no batch was created" in n for n in notes) == (
        point in ("before_create", "after_create")
    )

"""Invariant 2: SIGKILL the batch engine at each lifecycle point, resume, and prove with the
emulator's accounting that no request was billed twice, every document ended in one terminal
state, and the outputs equal an uninterrupted run's.

The engine runs in a subprocess (this module's `main`); the emulator runs in the test process, so
it survives the kill. The subprocess's sleep advances the emulator's virtual clock (batches take
virtual time), so a resumed run moves the clock on too. The kill point is named by env var
DOCMILL_TEST_KILL_AT (and DOCMILL_TEST_KILL_NTH: which occurrence).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from checkpoints.batches import BatchRecords
from checkpoints.store import open_store

ROOT = Path(__file__).resolve().parents[2]
POINTS = ["before_create", "after_create", "polling", "streaming_results", "before_ledger_write"]
BATCH = {"max_requests": 3, "poll_seconds": 30.0, "poll_max_seconds": 60.0}
EMULATOR = {"batch_seconds_per_request": 10.0}


def main() -> None:
    """Subprocess entry: run the batch pass once; SIGKILL ourselves at the named point."""
    import httpx2

    from checkpoints.store import open_store
    from docmill.settings import Settings
    from tasks import batch_records
    from tasks.batch import run_batches
    from tasks.inventory import inventory
    from tasks.recipes import load_recipe
    from tests.fixtures.emulator import sdk_client

    args = json.loads(sys.argv[1])
    control = httpx2.Client(base_url=args["base_url"])
    kill_at, nth = os.environ.get("DOCMILL_TEST_KILL_AT"), int(os.environ.get("DOCMILL_TEST_KILL_NTH", "1"))
    seen: Counter[str] = Counter()

    def hook(point: str) -> None:
        seen[point] += 1
        if point == kill_at and seen[point] == nth:
            os.kill(os.getpid(), signal.SIGKILL)

    batch_records.HOOK = hook

    def advance(seconds: float) -> None:
        control.post("/_emulator/clock/advance", json={"seconds": seconds}).raise_for_status()

    class _Emu:
        base_url = args["base_url"]

    settings = Settings(store=args["store"], batch=BATCH)  # type: ignore[arg-type]
    recipe = load_recipe("invoices")
    outcomes = run_batches(
        inventory(args["corpus"], settings, doc_types=recipe.doc_types),
        recipe=recipe,
        run_id="crash-run",
        store=open_store(args["store"]),
        client=sdk_client(_Emu()),  # type: ignore[arg-type]
        settings=settings,
        clock=lambda: float(control.get("/_emulator/clock").json()["now"]),
        sleep=advance,
    )
    with open(args["out"], "w") as fh:
        for o in outcomes:
            fh.write(o.model_dump_json() + "\n")


def run_here(emulator: Any, store: Path, corpus: Path, out: Path) -> None:
    """The same run in the test process (the resume, and the uninterrupted reference)."""
    from checkpoints.store import open_store
    from docmill.settings import Settings
    from tasks.batch import run_batches
    from tasks.inventory import inventory
    from tasks.recipes import load_recipe
    from tests.fixtures.emulator import sdk_client

    settings = Settings(store=str(store), batch=BATCH)  # type: ignore[arg-type]
    recipe = load_recipe("invoices")
    outcomes = run_batches(
        inventory(str(corpus), settings, doc_types=recipe.doc_types),
        recipe=recipe,
        run_id="crash-run",
        store=open_store(store),
        client=sdk_client(emulator),
        settings=settings,
        clock=emulator.state.clock.now,
        sleep=emulator.state.clock.advance,
    )
    with open(out, "w") as fh:
        for o in outcomes:
            fh.write(o.model_dump_json() + "\n")


def run_engine(emulator: Any, store: Path, corpus: Path, out: Path, kill: tuple[str, int] | None) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCMILL_TEST_KILL")}
    if kill:
        env["DOCMILL_TEST_KILL_AT"], env["DOCMILL_TEST_KILL_NTH"] = kill[0], str(kill[1])
    args = {"base_url": emulator.base_url, "store": str(store), "corpus": str(corpus), "out": str(out)}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.tasks.test_tasks_batch_crash", json.dumps(args)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"engine failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.returncode


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
    from tests.tasks.test_tasks_batch import make_corpus

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
    assert run_engine(emulator, store, corpus, out, (point, 2)) == -signal.SIGKILL
    run_here(emulator, store, corpus, out)  # resume: same run id, the clock moves on
    got = summary(emulator, store, out)
    assert max(got["billed"].values()) == 1, "a request was billed twice"
    assert set(got["billed"]) == set(ref["billed"]), "different requests were billed"
    assert got["ledger"] == ref["ledger"], "outputs differ from an uninterrupted run"
    docs = [o["doc_id"] for o in got["outcomes"]]
    assert sorted(docs) == sorted(o["doc_id"] for o in ref["outcomes"]) and len(set(docs)) == len(docs)
    assert all(o["state"] in ("succeeded", "needs_review", "failed") for o in got["outcomes"])
    notes = [n for r in BatchRecords(open_store(store), "crash-run").load_all() for n in r.notes]
    assert any("reconciled" in n or "no batch was created" in n for n in notes) == (
        point in ("before_create", "after_create")
    )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

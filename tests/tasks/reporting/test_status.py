"""`docmill status` and `docmill runs` as a person reads them, from a store written by hand (no API):
a stopped run says why and how to continue, answers kept in unfinished chunks are counted and named,
columns line up whatever the recipe, and the CLI names the store it looked in and ends quietly when
its reader goes away (`docmill status | head`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from checkpoints.costs import CostEntry, CostLedger
from checkpoints.manifest import ManifestStore, Phase, RunManifest
from checkpoints.outcomes import OutcomeLog
from checkpoints.store import ObjectStore, open_store
from tasks.reporting.status import run_status, runs_table, status_text

ROOT = Path(__file__).resolve().parents[3]


def _run(store: ObjectStore, run_id: str, recipe: str, *, docs: int, written: int, answered: int) -> None:
    """A run of `docs` documents stopped by Ctrl-C: one chunk of `written` outcomes written, and
    `answered` more answers paid and kept in a chunk that had not ended."""
    ManifestStore(store).create(
        RunManifest(run_id=run_id, source="/data/contracts", recipe=recipe, mode="realtime")
    )
    ids = [f"c-{i:03d}.txt" for i in range(docs)]
    store.put_json(f"runs/{run_id}/inventory/000000.json", [{"doc_id": d} for d in ids])
    store.put_json(f"runs/{run_id}/inventory-done.json", {"chunks": ["000000"], "documents": docs})
    OutcomeLog(store, run_id).write_chunk(
        "000000", [{"doc_id": d, "state": "succeeded"} for d in ids[:written]]
    )
    entries = [
        CostEntry(
            run_id=run_id, pass_name="file", doc_id=d, key=f"k{i}", attempt=1, model="m", usd=0.01, at=1.0 + i
        )
        for i, d in enumerate(ids[: written + answered])
    ]
    CostLedger(store, run_id).record("g0", entries)
    stop = {
        "kind": "signal",
        "error": f"Interrupted: run {run_id} stopped: SIGINT received",
        "continue": f"docmill resume {run_id}",
    }
    ManifestStore(store).update(
        run_id, lambda m: m.model_copy(update={"phase": Phase.STOPPED, "extra": {"stop": stop}})
    )


def test_a_stopped_run_reads_as_what_happened_and_counts_the_answers_it_kept(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    _run(store, "r1", "invoices", docs=400, written=0, answered=21)
    text = status_text(run_status(store, "r1"))
    assert "documents  21/400 processed (5%); final outcomes so far: 0 succeeded" in text
    assert "21 more answered and kept" in text and "paying nothing again" in text
    assert "why        Interrupted: run r1 stopped: SIGINT received" in text
    assert "`docmill resume r1` continues it" in text

    _run(store, "r2", "invoices", docs=10, written=4, answered=3)
    st = run_status(store, "r2")
    assert (st["progress"], st["done"], st["answered"]) == (7, 4, 7)  # answered ∪ written, not max()


def test_runs_columns_line_up_when_the_recipe_is_a_path(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    _run(store, "20261201-040000-aaaaaa", "invoices", docs=5, written=5, answered=0)
    _run(
        store,
        "20261202-040000-bbbbbb",
        "/home/ana/recipes/contracts.py:CONTRACTS",
        docs=120,
        written=50,
        answered=3,
    )
    lines = runs_table(store)
    assert "contracts.py:CONTRACTS" in lines[2] and "/home/ana" not in lines[2]
    for word in ("PHASE", "DRIVER", "RECIPE", "MODE"):  # left-aligned columns start together
        col = lines[0].index(word)
        assert all(line[col - 1] == " " and line[col] != " " for line in lines), (word, lines)
    for word in ("DOCS", "REVIEW", "FAILED", "COST"):  # numbers end together
        end = lines[0].index(word) + len(word)
        assert all(line[end - 1] != " " and (len(line) == end or line[end] == " ") for line in lines), (
            word,
            lines,
        )


def _cli(*args: str, cwd: Path, close_stdout: bool = False) -> tuple[int, str, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(cwd)},
    )
    assert proc.stdout is not None and proc.stderr is not None
    if close_stdout:  # the reader is gone before docmill writes (`| head` that has had enough)
        proc.stdout.close()
        err = proc.stderr.read()
        return proc.wait(timeout=60), "", err
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def test_status_names_the_store_it_looked_in_and_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for command in (("status",), ("runs",), ("review", "list")):  # nothing to show is not an error
        code, out, _ = _cli(*command, cwd=elsewhere)
        assert code == 0 and f"no runs in the store ./docmill-store ({elsewhere}/docmill-store) yet" in out
    assert "--store PATH" in out
    store = open_store(str(tmp_path / "store"))
    _run(store, "r1", "invoices", docs=400, written=0, answered=21)
    for command in ("status", "runs"):
        code, _, err = _cli("--store", str(tmp_path / "store"), command, cwd=elsewhere, close_stdout=True)
        assert (code, err) == (0, ""), err

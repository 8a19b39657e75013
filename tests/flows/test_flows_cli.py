"""The command line: exit codes, one-line errors, the summary paragraph, status and review."""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from checkpoints.active import ActiveRuns
from checkpoints.lease import Lease
from checkpoints.manifest import ManifestStore
from checkpoints.store import open_store
from docmill.errors import ConfigError
from docmill.settings import get_settings
from flows.cli.main import main
from flows.run.context import holder_id
from flows.run.continuation import pinned_settings
from tests.flows.helpers import make_corpus


@pytest.fixture
def offline_env(monkeypatch: pytest.MonkeyPatch, emulator: Any, tmp_path: Path) -> str:
    store = str(tmp_path / "store")
    monkeypatch.setenv("DOCMILL_API__BASE_URL", emulator.base_url)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("DOCMILL_RAISE_ERRORS", raising=False)
    get_settings.cache_clear()
    yield store
    get_settings.cache_clear()


def test_run_prints_summary_and_status_reads_it(
    offline_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, truth = make_corpus(tmp_path, count=12, seed=9)
    assert main(["--store", offline_env, "run", str(corpus), "--no-prefect"]) == 0
    out = capsys.readouterr().out
    n = len([t for t in truth if t["record"] == "document"])
    assert f"of {n} documents" in out and "report:" in out
    assert main(["--store", offline_env, "status"]) == 0
    assert "done" in capsys.readouterr().out
    assert main(["--store", offline_env, "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["phase"] == "done" and status["counts"]["documents"] == n
    assert main(["--store", offline_env, "runs"]) == 0
    assert status["run_id"] in capsys.readouterr().out


def test_status_report_and_review_take_the_run_being_driven_before_newer_ones(
    offline_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A continued run is older than the runs finished since it started: while a process drives it,
    the commands that default to a run take it; once it is no longer driven, the newest again."""
    corpus, _ = make_corpus(tmp_path, count=3, seed=9)
    for run_id in ("r1-older", "r2-newer"):
        assert main(["--store", offline_env, "run", str(corpus), "--no-prefect", "--run-id", run_id]) == 0
    store = open_store(offline_env)
    ActiveRuns(store).mark("r1-older", {"recipe": "invoices"})  # as a driver continuing it does
    capsys.readouterr()
    with Lease(store, "r1-older", holder_id(), ttl_seconds=60):
        assert main(["--store", offline_env, "status", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["run_id"] == "r1-older"
        assert main(["--store", offline_env, "review", "list"]) == 0
        assert "in run r1-older" in capsys.readouterr().err
    assert main(["--store", offline_env, "status", "--json"]) == 0  # the lease released
    assert json.loads(capsys.readouterr().out)["run_id"] == "r2-newer"


def test_an_emulators_answers_are_never_reused_by_a_run_on_the_api(
    offline_env: str,
    emulator: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Trying docmill offline on real documents, then running them with an API key on the same
    store, asks the API: no answer of the emulator becomes a result of the run on the API."""
    corpus, _ = make_corpus(tmp_path, count=6, seed=9)
    before = emulator.state.accounting.received
    assert main(["--store", offline_env, "run", str(corpus), "--no-prefect", "--run-id", "offline-1"]) == 0
    offline_calls = emulator.state.accounting.received - before
    assert offline_calls > 0
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")  # the API (this emulator standing in for it)
    get_settings.cache_clear()
    capsys.readouterr()
    assert (
        main(["--store", offline_env, "run", str(corpus), "--no-prefect", "--new-run", "--run-id", "api-1"])
        == 0
    )
    assert emulator.state.accounting.received - before == 2 * offline_calls  # every call asked again
    assert (
        main(["--store", offline_env, "run", str(corpus), "--no-prefect", "--new-run", "--run-id", "api-2"])
        == 0
    )
    assert emulator.state.accounting.received - before == 2 * offline_calls  # and the API's are reused
    assert "sk-ant-test" not in capsys.readouterr().err
    # one run's results come from one answerer: the offline run is not continued with a key
    assert main(["--store", offline_env, "resume", "offline-1", "--no-prefect"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "run offline-1 was answered by the emulator" in err[-1] and "--new-run" in err[-1], err
    offline_run = ManifestStore(open_store(offline_env)).load("offline-1")
    with pytest.raises(ConfigError, match="answered by the emulator"):  # a shard worker's settings too
        pinned_settings(get_settings(), offline_run)


def test_bad_source_is_one_line_exit_2(offline_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--store", offline_env, "run", "/no/such/folder", "--no-prefect"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not exist" in err[0] and "Traceback" not in err[0]


def test_unknown_recipe_is_one_line_exit_2(
    offline_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "d").mkdir()
    assert main(["--store", offline_env, "run", str(tmp_path / "d"), "--recipe", "nope", "--no-prefect"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope" in err[0]


def test_api_key_never_printed(
    offline_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "sk-ant-api03-THIS-IS-A-SECRET-KEY-1234567890"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    get_settings.cache_clear()
    corpus, _ = make_corpus(tmp_path, count=6, seed=1)
    # The key sends docmill to DOCMILL_API__BASE_URL (the emulator) with a key it accepts.
    assert main(["--store", offline_env, "run", str(corpus), "--no-prefect"]) == 0
    captured = capsys.readouterr()
    assert secret not in captured.out + captured.err
    for path in Path(offline_env).rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_emulator_subcommand_takes_its_own_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["emulator", "--port", "0", "--help"])
    assert e.value.code == 0
    assert "--latency-ms" in capsys.readouterr().out


def test_invalid_setting_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCMILL_API__CONCURRENCY", "lots")
    get_settings.cache_clear()
    try:
        assert main(["runs"]) == 2
    finally:
        get_settings.cache_clear()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "DOCMILL_API__CONCURRENCY" in err[0]


def test_every_option_of_every_command_has_help_text() -> None:
    import argparse

    from flows.cli.main import build_parser

    parser = build_parser()
    (subs,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [
        f"{name} {'/'.join(action.option_strings) or action.dest}"
        for name, sub in [("docmill", parser), *subs.choices.items()]
        for action in sub._actions
        if not isinstance(action, argparse._SubParsersAction) and not action.help
    ]
    assert missing == []
    assert "overlap" in (parser.description or "")  # the exit-code lines name the overlap case (5)


def test_store_and_log_options_before_or_after_any_command_with_real_run_ids(
    offline_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`docmill status --store X` works as `docmill --store X status` does; `review list` takes the
    newest run; messages name the run, never a placeholder."""
    corpus, _ = make_corpus(tmp_path, count=12, seed=9)
    assert main(["run", str(corpus), "--no-prefect", "--store", offline_env, "--log-format", "json"]) == 0
    capsys.readouterr()
    for argv in (["status", "--store", offline_env], ["--store", offline_env, "status"]):
        assert main(argv) == 0, argv
        assert "done" in capsys.readouterr().out
    assert main(["runs", "--store", offline_env, "--log-level", "info"]) == 0
    (run_id,) = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert main(["review", "list", "--store", offline_env]) == 0
    listed = capsys.readouterr()
    assert f"in run {run_id}" in listed.err
    doc_id = listed.out.splitlines()[0].split("\t")[0]
    assert main(["review", "show", doc_id, "--store", offline_env]) == 0  # newest run
    assert json.loads(capsys.readouterr().out)["doc_id"] == doc_id
    assert main(["review", "show", run_id, "nope.txt", "--store", offline_env]) == 2
    err = capsys.readouterr().err
    assert f"docmill review list {run_id}" in err and "RUN_ID" not in err


def test_include_and_exclude_globs_pick_the_documents(
    offline_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from checkpoints.manifest import ManifestStore
    from checkpoints.outcomes import OutcomeLog
    from checkpoints.store import open_store

    src = tmp_path / "code"
    for rel in ("app/main.py", "app/util.py", "tests/test_main.py", "README.md", "app/py.typed"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text("" if rel.endswith("typed") else "def f(x):\n    return x\n")
    argv = ["--store", offline_env, "run", str(src), "--recipe", "code-review", "--no-prefect"]
    assert main([*argv, "--include", "*.py", "--include", "py.typed", "--exclude", "tests/**"]) == 0
    summary = capsys.readouterr().out
    assert "1 skipped" in summary and "0 failed" in summary, summary
    store = open_store(offline_env)
    (run_id,) = ManifestStore(store).list_runs()
    states = {o["doc_id"]: o["state"] for o in OutcomeLog(store, run_id).all()}
    assert states == {"app/main.py": "succeeded", "app/util.py": "succeeded", "app/py.typed": "skipped"}


def test_interrupted_message_names_the_run(
    offline_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import flows.run.driver as pipeline

    def interrupt(*args: Any, **kw: Any) -> None:
        raise KeyboardInterrupt  # Ctrl-C during the per-file pass

    monkeypatch.setattr(pipeline, "per_file_pass", interrupt)
    corpus, _ = make_corpus(tmp_path, count=6, seed=1)
    code = main(["--store", offline_env, "run", str(corpus), "--no-prefect", "--run-id", "night-1"])
    assert code == 130
    err = capsys.readouterr().err
    assert "`docmill resume night-1`" in err and "RUN_ID" not in err


def test_partial_integration_is_reported_everywhere_and_exits_6(
    offline_env: str, tmp_path: Path, emulator: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """An integration answer cut at max_tokens (for one document, whatever the slice size) leaves
    the integration partial: the summary line, exit code 6, report.md, report.html and `status`
    all say so, and name the document."""
    from checkpoints.store import open_store

    corpus, truth = make_corpus(tmp_path, count=12, seed=9)
    doc = next(t["doc_id"] for t in truth if t["record"] == "document" and t["expected_status"] == "ok")
    emulator.state.faults.add(kind="truncate", marker=f'\\"doc_id\\": \\"{doc}\\"')
    assert main(["--store", offline_env, "run", str(corpus), "--no-prefect"]) == 6
    out = capsys.readouterr().out
    assert "integration: PARTIAL (1 problem(s)" in out
    store = open_store(offline_env)
    assert main(["--store", offline_env, "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    run_id = status["run_id"]
    assert status["status"]["integration"]["status"] == "partial"
    md = store.get(f"runs/{run_id}/report.md").decode()
    assert "Integration: **PARTIAL**" in md and f"`{doc}`" in md and "max_tokens" in md
    html = store.get(f"runs/{run_id}/report.html").decode()
    assert '<b id="integration-status">partial</b>' in html and doc in html
    assert main(["--store", offline_env, "status"]) == 0
    assert "integration PARTIAL" in capsys.readouterr().out

    emulator.state.faults.clear()  # the next run asks only for what is missing, and is complete
    assert main(["--store", offline_env, "run", str(corpus), "--no-prefect"]) == 0
    assert "integration: complete" in capsys.readouterr().out
    assert main(["--store", offline_env, "run", str(corpus), "--no-prefect", "--integration", "skip"]) == 0
    assert "integration: skipped" in capsys.readouterr().out


def test_the_docmill_process_scans_for_cycles_less_often(monkeypatch: pytest.MonkeyPatch) -> None:
    """`docmill` itself (no argv given) raises the young-generation threshold of the cyclic GC, which
    otherwise re-scans every decoded result again and again; main() called with argv (a test, an
    embedding program) leaves the process's collector alone."""
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        assert main(["runs", "--help"]) == 0
        assert gc.get_threshold() == (700, 10, 10)
        monkeypatch.setattr(sys, "argv", ["docmill", "runs", "--help"])
        assert main() == 0
        assert gc.get_threshold() == (50_000, 10, 10)
    finally:
        gc.set_threshold(*before)

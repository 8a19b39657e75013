"""Exit codes as documented: the README's table walked row by row, and every bad flag, setting and
store case exits 2 with one line naming it (real CLI, SDK, emulator, store; SeaweedFS for S3)."""

from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from checkpoints.lease import Lease
from checkpoints.store import open_store
from docmill.settings import get_settings
from flows.cli.main import main
from tests.flows.helpers import ROOT, make_corpus


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, emulator: Any, tmp_path: Path) -> str:
    monkeypatch.setenv("DOCMILL_API__BASE_URL", emulator.base_url)
    monkeypatch.setenv("DOCMILL_API__BACKOFF_MAX_SECONDS", "0")
    monkeypatch.setenv("DOCMILL_API__CIRCUIT_BREAKER_CALLS", "3")
    monkeypatch.setenv("DOCMILL_API__CONCURRENCY", "2")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("DOCMILL_RAISE_ERRORS", raising=False)
    get_settings.cache_clear()
    yield str(tmp_path / "store")
    get_settings.cache_clear()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("exit"), count=12, seed=9)[0]


_DONE = threading.Event()  # set when a scenario's run returned: a late signal must not hit pytest


def _signal_after(emulator: Any, sig: int, requests: int = 2) -> None:
    def fire() -> None:
        while emulator.state.accounting.received_by_path.get("/v1/messages", 0) < requests:
            if _DONE.wait(0.01):
                return
        os.kill(os.getpid(), sig)

    threading.Thread(target=fire, daemon=True).start()


def _lease_held(store: str, corpus: Path) -> list[str]:
    Lease(open_store(store), "held-1", "another-host:4242:abcdef", ttl_seconds=600).acquire()
    return ["run", str(corpus), "--run-id", "held-1"]


SCENARIOS: dict[int, Callable[[str, Path, Any], list[str]]] = {
    0: lambda s, c, em: ["run", str(c)],
    2: lambda s, c, em: ["run", str(c), "--concurrency", "0"],
    3: lambda s, c, em: (em.state.faults.add(kind="invalid_request", status=401), ["run", str(c)])[1],
    4: lambda s, c, em: ["run", str(c), "--max-cost-usd", "0.0001"],
    5: lambda s, c, em: _lease_held(s, c),
    6: lambda s, c, em: _partial_integration(c, em),
    130: lambda s, c, em: (_signal_after(em, signal.SIGINT), ["run", str(c), "--run-id", "int-1"])[1],
    143: lambda s, c, em: (_signal_after(em, signal.SIGTERM), ["run", str(c), "--run-id", "term-1"])[1],
}


def _partial_integration(corpus: Path, em: Any) -> list[str]:
    """An integration answer cut at max_tokens for one document: the run finishes, integration partial."""
    from docmill.settings import Settings
    from tasks.source.inventory import inventory

    doc = next(
        d.doc_id for d in inventory(str(corpus), Settings()) if d.status == "ok" and not d.duplicate_of
    )
    em.state.faults.add(kind="truncate", marker=f'\\"doc_id\\": \\"{doc}\\"')
    return ["run", str(corpus)]


def readme_codes() -> list[int]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    return [int(m) for m in re.findall(r"^\| `(\d+)` \|", section, flags=re.M)]


def test_readme_table_lists_every_code_the_cli_returns() -> None:
    assert readme_codes() == sorted(SCENARIOS)


@pytest.mark.parametrize("code", sorted(SCENARIOS))
def test_each_row_of_the_table(
    code: int, env: str, emulator: Any, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if code in (130, 143):
        emulator.state.config.latency_ms = 100.0
    _DONE.clear()
    argv = SCENARIOS[code](env, corpus, emulator)
    try:
        assert main(["--store", env, *argv, "--no-prefect"]) == code
    finally:
        _DONE.set()
    captured = capsys.readouterr()
    err = [line for line in captured.err.splitlines() if line.startswith("docmill:")]
    if code == 6:  # a finished run: its summary line (stdout) names the partial integration
        assert "integration: PARTIAL" in captured.out
    elif code:
        assert err and "Traceback" not in "".join(err)


BAD_FLAGS = [
    (["--concurrency", "0"], "api.concurrency"),
    (["--concurrency", "-1"], "api.concurrency"),
    (["--concurrency", "1000000"], "api.concurrency"),
    (["--max-cost-usd", "-1"], "cost.max_cost_usd"),
    (["--max-cost-usd", "nan"], "cost.max_cost_usd"),
    (["--max-cost-usd", "lots"], "cost.max_cost_usd"),
    (["--chunk-size", "0"], "chunk_size"),
    (["--max-doc-cost-usd", "-2"], "cost.max_doc_cost_usd"),
    (["--run-id", "../escape"], "run id"),
    (["--run-id", "a/b"], "run id"),
    (["--mode", "sometimes"], "--mode"),
]


@pytest.mark.parametrize(("flags", "named"), BAD_FLAGS, ids=[" ".join(f) for f, _ in BAD_FLAGS])
def test_bad_flags_exit_2_in_one_line_at_parse_time(
    flags: list[str], named: str, env: str, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--store", env, "run", str(corpus), *flags]) == 2  # Prefect path: refused before it
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0] and "ConfigError" in err[0], err
    assert not Path(env).exists()  # nothing was written


@pytest.mark.parametrize("prefect", [False, True], ids=["no-prefect", "prefect"])
def test_store_and_source_problems_exit_2_in_one_line(
    prefect: bool,
    env: str,
    corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    if prefect:
        request.getfixturevalue("prefect_engine")
    tail = [] if prefect else ["--no-prefect"]
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [
        (["--store", "/proc/docmill-store", "run", str(corpus)], "/proc/docmill-store"),
        (["--store", str(blocker / "store"), "run", str(corpus)], "a-file/store"),
        (["--store", env, "run", str(empty)], "has no files"),
        (["--store", env, "resume", "no-such-run"], "no-such-run"),
        (["--store", env, "status", "no-such-run"], "no-such-run"),
        (["--store", env, "review", "list", "no-such-run"], "no-such-run"),
    ]
    for argv, named in cases:
        argv = argv + tail if argv[2] in ("run", "resume") else argv
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        said = [line for line in err if line.startswith("docmill:")]
        assert len(said) == 1 and named in said[0], (argv, err)
    assert main(["--store", env, "run", str(empty), "--allow-empty", *tail]) == 0


def test_empty_source_is_refused_before_the_emulator_starts(
    env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DOCMILL_API__BASE_URL")  # no key, no URL: a run would start the built-in emulator
    get_settings.cache_clear()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["--store", env, "run", str(empty), "--no-prefect"]) == 2
    err = capsys.readouterr().err
    assert "has no files" in err and "emulator" not in err, err


def test_bad_log_level_exits_2(
    env: str, corpus: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCMILL_LOG_LEVEL", "LOUD")
    get_settings.cache_clear()
    assert main(["--store", env, "run", str(corpus), "--no-prefect"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "DOCMILL_LOG_LEVEL" in err[0]


def test_s3_missing_credentials_and_empty_prefix_exit_2(
    env: str,
    corpus: Path,
    s3_store_uri: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--store", env, "run", f"{s3_store_uri}/nothing-here/", "--no-prefect"]) == 2
    assert "has no files" in capsys.readouterr().err
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    assert main(["--store", s3_store_uri, "run", str(corpus), "--no-prefect"]) == 2
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("docmill:")]
    assert len(said) == 1 and "store" in said[0] and "credentials" in said[0].lower(), said

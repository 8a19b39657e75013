"""The circuit breaker: systemic failures stop a run within N calls, through the real CLI, SDK and
emulator (and a real closed port); one bad file or one 400 never trips it."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from checkpoints.manifest import ManifestStore
from checkpoints.store import open_store
from docmill.errors import SystemicFailure
from docmill.settings import get_settings
from flows.cli.main import main
from tasks.api.breaker import CircuitBreaker
from tests.flows.helpers import make_corpus, outcomes_of


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, emulator: Any, tmp_path: Path) -> str:
    store = str(tmp_path / "store")
    monkeypatch.setenv("DOCMILL_API__BASE_URL", emulator.base_url)
    monkeypatch.setenv("DOCMILL_API__BACKOFF_MAX_SECONDS", "0")
    monkeypatch.setenv("DOCMILL_CHUNK_SIZE", "8")
    monkeypatch.setenv("DOCMILL_API__CONCURRENCY", "2")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("DOCMILL_RAISE_ERRORS", raising=False)
    get_settings.cache_clear()
    yield store
    get_settings.cache_clear()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("breaker"), count=40, seed=2)[0]


def _answered(emulator: Any) -> int:
    return int(emulator.state.accounting.received_by_path.get("/v1/messages", 0))


@pytest.mark.parametrize(
    ("setup", "cause"),
    [
        (
            lambda em: em.state.faults.add(kind="invalid_request", status=401, message="invalid x-api-key"),
            "auth",
        ),
        (lambda em: em.state.faults.add(kind="prose"), "invalid_answers"),
    ],
    ids=["401", "prose"],
)
def test_systemic_failure_stops_the_run_within_20_calls_then_resume_continues(
    env: str, emulator: Any, corpus: Path, capsys: pytest.CaptureFixture[str], setup: Any, cause: str
) -> None:
    setup(emulator)
    code = main(["--store", env, "run", str(corpus), "--no-prefect", "--run-id", "sys-1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3, err
    said = [line for line in err if line.startswith("docmill:")]  # (per-call warnings are log lines)
    assert len(said) == 1 and f"({cause})" in said[0] and "docmill resume sys-1" in said[0], err
    # API causes: exactly N calls (a streak near N sends one request at a time); invalid answers are
    # judged after they return, so up to concurrency - 1 more may have been sent meanwhile
    assert _answered(emulator) <= (20 if cause != "invalid_answers" else 20 + 1)
    assert ManifestStore(open_store(env)).load("sys-1").phase == "stopped"
    emulator.state.faults.clear()  # the fix
    assert main(["--store", env, "resume", "sys-1", "--no-prefect"]) == 0
    outs = outcomes_of(open_store(env), "sys-1")
    assert not [o for o in outs.values() if o.get("retryable")]
    assert (
        sum(o["state"] == "succeeded" for o in outs.values()) >= 20
    )  # (prose answers before the trip: review)


def test_a_model_nobody_knows_stops_at_start_with_nothing_sent(
    env: str, emulator: Any, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Neither in docmill's table nor served by the endpoint: one free count_tokens probe, exit 2."""
    code = main(["--store", env, "run", str(corpus), "--no-prefect", "--model", "claude-nonexistent-9"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    said = [line for line in err if line.startswith("docmill:")]
    assert len(said) == 1 and "claude-nonexistent-9" in said[0] and "nothing was sent" in said[0], err
    assert _answered(emulator) == 0
    assert emulator.state.accounting.received_by_path["/v1/messages/count_tokens"] == 1


def test_a_404_for_the_model_mid_run_stops_it_at_once(
    env: str, emulator: Any, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model the table knows but the endpoint refuses (404 not_found_error): systemic at the first
    answer, exit 3, no document failed (a resume sends them again once the model is fixed)."""
    emulator.state.faults.add(kind="invalid_request", status=404, message="model: claude-sonnet-5-5")
    code = main(["--store", env, "run", str(corpus), "--no-prefect", "--run-id", "gone"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3, err
    said = [line for line in err if line.startswith("docmill:")]
    assert len(said) == 1 and "(model_not_found)" in said[0], err
    assert _answered(emulator) <= 2  # the requests in flight at the trip (concurrency 2), no more
    assert ManifestStore(open_store(env)).load("gone").phase == "stopped"
    assert not outcomes_of(open_store(env), "gone")  # no document ends failed: the chunk is redone


def test_nothing_listening_stops_the_run(
    env: str, corpus: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("DOCMILL_API__BASE_URL", f"http://127.0.0.1:{port}")
    get_settings.cache_clear()
    assert main(["--store", env, "run", str(corpus), "--no-prefect", "--run-id", "nobody"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    said = [line for line in err if line.startswith("docmill:")]
    assert len(said) == 1 and "(connection_refused)" in said[0], err


def test_one_bad_file_or_one_400_never_trips(env: str, emulator: Any, corpus: Path) -> None:
    names = sorted(p.name for p in corpus.glob("*.txt"))[:2]
    for name in names:
        (corpus / name).write_text((corpus / name).read_text() + "\nPLANTED-BAD\n")
    emulator.state.faults.add(kind="prose", marker="PLANTED-BAD")  # every answer for 2 files: prose
    emulator.state.faults.add(kind="invalid_request", count=1)  # one 400
    assert main(["--store", env, "run", str(corpus), "--no-prefect", "--run-id", "fine"]) == 0
    for name in names:
        (corpus / name).write_text((corpus / name).read_text().replace("\nPLANTED-BAD\n", ""))


def test_streaks_are_per_cause_and_reset_by_a_healthy_call() -> None:
    b = CircuitBreaker(3)
    for cause in ("auth", "auth", None, "auth", "auth", "permission", "auth", "auth"):
        b.api(cause, "x")
    b.check()  # never 3 alike in a row
    b.answer("validation_failed:a", "a")
    b.answer("validation_failed:a", "a")
    b.api(None)  # an answered call does not reset the answers' streak
    b.answer("validation_failed:a", "a")
    with pytest.raises(SystemicFailure) as e:
        b.check()
    assert e.value.cause == "invalid_answers" and json.dumps(e.value.calls) == "3"


def test_a_healthy_run_is_never_held_to_n_in_flight_but_a_streak_is() -> None:
    """A window of hundreds in flight (issue 23) passes the breaker while no streak stands; once calls
    fail alike, new ones wait while the streak plus those in flight could complete it."""
    b = CircuitBreaker(3)
    assert all(b.try_admit() for _ in range(10))  # 10 in flight, threshold 3: a healthy run goes on
    b.api("auth", "x")
    assert not b.try_admit()  # a streak of 1 + 10 in flight could reach 3: wait for those answers
    for _ in range(9):
        b.done()
    assert b.try_admit()  # 1 + 1 in flight < 3
    assert not b.try_admit()


def test_the_same_400_for_every_document_stops_the_run_within_20_calls(
    env: str, emulator: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 22: 30 documents with a schema the API's grammar compiler refuses (the emulator's limit)
    -> exit 3 after at most 20 calls, one line naming the error, phase stopped; a resume continues."""
    corpus = make_corpus(tmp_path, count=30, seed=6)[0]
    emulator.state.configure({"grammar_max_complexity": 5})  # the invoices schema is over it
    code = main(["--store", env, "run", str(corpus), "--no-prefect", "--run-id", "grammar"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3, err
    said = [line for line in err if line.startswith("docmill:")]
    assert len(said) == 1 and "(invalid_request)" in said[0] and "grammar is too large" in said[0], err
    assert "docmill resume grammar" in said[0]
    assert _answered(emulator) <= 20
    assert ManifestStore(open_store(env)).load("grammar").phase == "stopped"
    outs = outcomes_of(open_store(env), "grammar").values()
    refused = [o for o in outs if o.get("failure_type") == "api_error:400"]
    assert 1 <= len(refused) <= 20 and not [o for o in refused if o.get("retryable")]
    emulator.state.configure({"grammar_max_complexity": None})  # (a fixed schema would change the keys)
    assert main(["--store", env, "resume", "grammar", "--no-prefect"]) in (0, 3)
    assert ManifestStore(open_store(env)).load("grammar").phase != "stopped"


def test_a_400_counts_once_per_document_and_a_different_one_starts_anew() -> None:
    b = CircuitBreaker(3)
    for doc in ("a", "a", "a", "b", "b"):  # one document's repeated 400 is not a second document
        b.invalid_request("HTTP 400 invalid_request_error: schema too large", doc)
    b.invalid_request("HTTP 400 invalid_request_error: prompt is too long: 250000 tokens", "c")
    b.invalid_request("HTTP 400 invalid_request_error: schema too large", "d")
    b.check()  # the document-specific 400 broke the streak
    b.invalid_request("HTTP 400 invalid_request_error: schema too large", "e")
    b.invalid_request("HTTP 400 invalid_request_error: schema too large", "f")
    with pytest.raises(SystemicFailure) as e:
        b.check()
    assert e.value.cause == "invalid_request" and "3 documents in a row" in e.value.message

"""A batch run's batches created before its Prefect flow run (flows.run.early): the flow run continues
the same run, holding the lease it was handed, and nothing is sent twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checkpoints.batches import BatchRecords
from checkpoints.lease import live_lease
from checkpoints.outcomes import OutcomeLog
from checkpoints.store import open_store
from docmill.settings import BatchSettings, Settings
from flows.entry import RunWiring, run_extract
from flows.run import early, guard
from flows.run.context import RunParams
from tasks.batch import lifecycle
from tests.fixtures.emulator import fast_batches
from tests.flows.helpers import make_corpus, settings_for


def test_batches_created_early_are_followed_by_the_flow_run_and_sent_once(
    tmp_path: Path, emulator: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fast_batches(emulator)
    corpus, truth = make_corpus(tmp_path, count=12, seed=5)
    settings = settings_for(emulator, str(tmp_path / "store")).model_copy(
        update={"batch": BatchSettings(poll_seconds=0.05, poll_max_seconds=0.2)}
    )
    store = open_store(settings.store)
    rid = run_extract(
        RunParams(str(corpus), "invoices", mode="batch", submit_only=True),
        settings=settings,
        wiring=RunWiring(progress=False),
    )["run_id"]
    records = BatchRecords(store, rid).load_all()
    assert [r.phase.value for r in records] in (["submitted"], ["ended"])  # created, not collected
    assert OutcomeLog(store, rid).chunks_done() == set()  # nothing collected before the flow run
    assert rid in guard._KEPT and live_lease(store, rid, 0.0) is not None  # still this process's
    created = sum(len(b.requests) for b in emulator.state.batches.batches.values())

    capsys.readouterr()
    summary = run_extract(
        RunParams(str(corpus), "invoices", mode="batch", run_id=rid),
        settings=settings,
        wiring=RunWiring(progress=False),
    )
    assert summary["run_id"] == rid and summary["phase"] == "done"
    assert "continuing run" not in capsys.readouterr().err  # the user started one run, not two
    billed = [r for r in emulator.state.accounting.billed if r.batch]
    assert sum(len(b.requests) for b in emulator.state.batches.batches.values()) == created  # none again
    assert len(billed) == created == len({r.custom_id for r in billed})  # one request per document
    assert [r.phase.value for r in BatchRecords(store, rid).load_all()] == ["collected"]
    docs = {t["doc_id"] for t in truth if t["record"] in ("document", "duplicate")}
    assert {o["doc_id"] for o in OutcomeLog(store, rid).all()} == docs
    assert rid not in guard._KEPT and live_lease(store, rid, 0.0) is None  # released at the end
    assert rid not in lifecycle.FIRST_LOOKS


def test_only_batch_runs_with_an_endpoint_of_their_own_start_early() -> None:
    own = Settings(api={"base_url": "http://127.0.0.1:9"})  # type: ignore[arg-type]
    assert early.eligible(own, "batch", finish_by=None, workers=None)
    assert early.eligible(own, "auto", finish_by=None, workers=None)
    assert not early.eligible(own, "realtime", finish_by=None, workers=None)
    assert not early.eligible(own, "batch", finish_by="+2h", workers=None)
    assert not early.eligible(own, "batch", finish_by=None, workers=2)
    assert not early.eligible(
        own.model_copy(update={"prefect_early_batches": False}), "batch", finish_by=None, workers=None
    )
    builtin = Settings(api={"base_url": None}, anthropic_api_key=None)  # type: ignore[arg-type]
    assert not early.eligible(builtin, "batch", finish_by=None, workers=None)  # its batches die with it


def test_a_prefect_server_that_does_not_start_names_the_batches_created_early() -> None:
    from docmill.errors import OrchestratorUnavailable

    with pytest.raises(OrchestratorUnavailable) as got, early.unfollowed("R1"):
        raise OrchestratorUnavailable(
            "server did not start", hint="nothing was sent", setting="S", seconds=1.0
        )
    assert "run R1 had created its batches" in got.value.message and got.value.setting == "S"
    assert "docmill resume R1 --no-prefect" in got.value.hint and "nothing was sent" not in got.value.hint
    with pytest.raises(OrchestratorUnavailable) as got, early.unfollowed(None):
        raise OrchestratorUnavailable("server did not start", hint="nothing was sent")
    assert got.value.hint == "nothing was sent"

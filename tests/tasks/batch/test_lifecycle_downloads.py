"""The batch lifecycle's bounded waits and results download, against the real emulator."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from docmill.settings import Settings
from tasks.batch import lifecycle
from tasks.per_file.outcome import DocState
from tests.fixtures.emulator import sdk_client
from tests.tasks.batch.test_engine import Rig, make_corpus

RESULTS = "/v1/messages/batches/*/results"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("lifecycle") / "corpus", 16)


@pytest.mark.parametrize("after_lines", [None, 0, 3, 7])
def test_a_reset_while_streaming_results_is_fetched_again_and_the_run_finishes(
    emulator: Any,
    tmp_path: Path,
    corpus: Path,
    after_lines: int | None,
) -> None:
    rig = Rig(emulator, tmp_path, corpus)
    emulator.state.faults.add(kind="connection_reset", path=RESULTS, count=1, after_lines=after_lines)
    outcomes = rig.run()
    ok = [d for d in rig.docs() if d.status == "ok"]
    assert len(outcomes) == len(rig.docs())
    assert sum(o.state is DocState.SUCCEEDED for o in outcomes) >= len(ok) - 2
    assert all(n == 1 for n in rig.billed().values()) and len(rig.billed()) == len(ok)
    assert emulator.state.faults.rules == []  # the reset happened
    fetched = sum(n for p, n in emulator.state.accounting.received_by_path.items() if p.endswith("/results"))
    assert fetched == 2


def test_results_resume_after_the_last_line_handed_on(emulator: Any) -> None:
    sdk = sdk_client(emulator)
    requests = [
        {
            "custom_id": f"r{i}",
            "params": {
                "model": "claude-sonnet-4-6",
                "max_tokens": 16,
                "messages": [{"role": "user", "content": f"hello {i}"}],
            },
        }
        for i in range(25)
    ]
    batch = sdk.messages.batches.create(requests=requests)  # type: ignore[arg-type]
    emulator.state.clock.advance(3600.0)
    emulator.state.faults.add(kind="connection_reset", path=RESULTS, count=2, after_lines=10)
    api = lifecycle.BatchApi(lambda: sdk, Settings(), sleep=lambda _s: None)
    lines = lifecycle.results(api, batch.id)
    assert lines is not None
    ids = [line["custom_id"] for line in lines]
    assert Counter(ids) == Counter(r["custom_id"] for r in requests)  # every line once, none twice


def test_retry_after_is_capped_and_logged(caplog: pytest.LogCaptureFixture, emulator: Any) -> None:
    from tasks.api.client import ModelClient
    from tests.fixtures.clock import FakeTime

    fake = FakeTime()
    settings = Settings(api={"retry_after_max_seconds": 60.0, "backoff_max_seconds": 0.0})  # type: ignore[arg-type]
    client = ModelClient(
        settings, base_url=emulator.base_url, api_key="k", clock=fake.clock, sleep=fake.sleep
    )
    emulator.state.faults.add(kind="rate_limit", retry_after=600.0, count=1)
    request = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "hi"}],
    }
    with caplog.at_level("WARNING", logger="docmill"):
        client.call(request, key="k1", doc_id="d", pass_name="file")
    assert fake.sleeps and max(fake.sleeps) <= 60.0  # waited the cap, not 600 s
    assert sum(fake.sleeps) <= 120.0
    assert any("asked to wait 600 s" in r.getMessage() for r in caplog.records)

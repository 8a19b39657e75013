"""Round trips of what the store keeps: manifests, cost entries, ledger and scratch files."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoints.costs import CostEntry, CostLedger
from checkpoints.ledger import ResponseLog, ResultsLedger
from checkpoints.manifest import ManifestStore, Phase, RunManifest, redact
from checkpoints.scratch import HistoryArchive, Scratchpad
from checkpoints.store import ObjectStore, open_store
from docmill.errors import AlreadyExists, NotFound
from docmill.prices import cost_usd

from .conftest import FakeClock

finite = st.floats(allow_nan=False, allow_infinity=False, min_value=0, max_value=1e6)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=10),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
    max_leaves=8,
)
manifests = st.builds(
    RunManifest,
    run_id=st.from_regex(r"[a-z0-9][a-z0-9-]{0,20}", fullmatch=True),
    created_at=st.datetimes(timezones=st.just(UTC)),
    source=st.text(max_size=20),
    recipe=st.text(max_size=10),
    mode=st.sampled_from(["realtime", "batch"]),
    phase=st.sampled_from(list(Phase)),
    counts=st.dictionaries(st.text(max_size=8), st.integers(0, 10**9), max_size=5),
    batches=st.lists(st.dictionaries(st.text(max_size=5), json_values, max_size=3), max_size=3),
    cost_usd=finite,
    budget_usd=st.none() | finite,
    extra=st.dictionaries(st.text(max_size=5), json_values, max_size=3),
)
entries = st.builds(
    CostEntry,
    run_id=st.text(max_size=10),
    pass_name=st.text(max_size=10),
    doc_id=st.text(max_size=20),
    key=st.text(max_size=64),
    attempt=st.integers(0, 100),
    model=st.text(max_size=20),
    request_id=st.none() | st.text(max_size=20),
    batch=st.booleans(),
    input_tokens=st.integers(0, 10**7),
    output_tokens=st.integers(0, 10**7),
    usd=finite,
)


@given(manifests)
@settings(max_examples=100, deadline=None)
def test_manifest_json_round_trip(m: RunManifest) -> None:
    assert RunManifest.model_validate_json(m.model_dump_json()) == m


@given(entries)
@settings(max_examples=100, deadline=None)
def test_cost_entry_json_round_trip(e: CostEntry) -> None:
    assert CostEntry.model_validate_json(e.model_dump_json()) == e


def test_manifest_store_round_trip_and_redaction(store: ObjectStore, clock: FakeClock) -> None:
    ms = ManifestStore(store, clock=clock)
    m = RunManifest(
        run_id="r-1",
        source="s3://in/docs",
        recipe="invoices",
        config={
            "api": {"model": "m", "anthropic_api_key": "sk-secret"},
            "aws_secret_access_key": "x",
            "Password": "p",
            "chunk_size": 50,
            "s3_credentials": {"a": 1},
            "nested": [{"token": "t"}],
        },
    )
    ms.create(m)
    loaded = ms.load("r-1")
    assert loaded.config == {"api": {"model": "m"}, "chunk_size": 50, "nested": [{}]}
    assert "secret" not in store.get("runs/r-1/manifest.json").decode()
    with pytest.raises(AlreadyExists):
        ms.create(m)
    clock.advance(10)
    updated = ms.update("r-1", lambda x: x.model_copy(update={"phase": Phase.DONE}))
    assert updated.phase == Phase.DONE == ms.load("r-1").phase
    assert str(updated.phase) == "done"
    assert updated.updated_at == datetime.fromtimestamp(clock.now, UTC)
    ms.create(RunManifest(run_id="r-0"))
    assert list(ms.list_runs()) == ["r-0", "r-1"]
    with pytest.raises(NotFound):
        ms.load("missing")


@pytest.mark.parametrize(
    "name",
    [
        "api_key",
        "ANTHROPIC_API_KEY",
        "aws_secret_access_key",
        "auth_token",
        "Password",
        "s3_credentials",
        "apiKey",
        "SECRETKEY",
        "x-api-key",
        "session.token",
        "db_passwd",
    ],
)
def test_redact_drops_secret_names(name: str) -> None:
    assert redact({name: "v", "model": "x"}) == {"model": "x"}


def test_redact_keeps_plain_settings() -> None:
    plain = {"model": "x", "max_tokens": 5, "keyword": 1, "budget_tokens": 9, "input_tokens_per_minute": 1}
    assert redact(plain) == plain


def test_response_log_never_overwrites(store: ObjectStore) -> None:
    log = ResponseLog(store)
    assert log.attempts("file", "k_1") == []
    assert log.put("file", "k_1", 0, {"id": "a"}) == 0
    assert log.put("file", "k_1", 2, {"id": "c"}) == 2
    assert log.put("file", "k_1", 1, {"id": "b"}) == 1
    assert log.put("file", "k_1", 2, {"id": "d"}) == 3  # attempt 2 was already billed: kept
    assert log.attempts("file", "k_1") == [0, 1, 2, 3]
    assert log.get("file", "k_1", 2) == {"id": "c"}
    assert store.exists("responses/file/k_1/000002.json")


def test_results_ledger_path_and_record(store: ObjectStore) -> None:
    ledger = ResultsLedger(store)
    rec, written = ledger.put("file", "k_2", {"output": {"total": 3}, "usage": {"input_tokens": 5}})
    assert written and store.exists("results/file/k_2.json")
    assert ledger.put("file", "k_2", {"output": "other"}) == (rec, False)
    assert ledger.get("file", "missing") is None


def test_scratchpad_and_history_archive(store: ObjectStore) -> None:
    pad = Scratchpad(store, "r", "integrate")
    assert pad.read() == ""
    pad.replace("pinned")
    assert pad.read() == "pinned"
    assert store.exists("runs/r/scratch/integrate.md")
    arch = HistoryArchive(store, "r", "integrate")
    assert arch.seqs() == []
    msgs = [{"role": "user", "content": "héllo"}]
    assert arch.archive(msgs, 0) == 0
    assert arch.archive(msgs, 0) == 0  # archived again after a kill: the same slot
    longer = [*msgs, {"role": "assistant", "content": "x"}]
    assert arch.archive(longer, 1) == 1
    assert arch.archive([*longer, *msgs], 1) == 2  # slot 1 holds another history: the next one
    assert arch.seqs() == [0, 1, 2]
    assert arch.load(1) == longer
    assert arch.load(0) == msgs
    assert store.get("runs/r/history/integrate/000000.json.gz")[:2] == b"\x1f\x8b"


def test_cost_ledger_totals_and_write_once(store: ObjectStore) -> None:
    usage = {
        "input_tokens": 1000,
        "output_tokens": 200,
        "cache_read_input_tokens": 500,
        "iterations": [{"type": "compaction", "input_tokens": 300, "output_tokens": 40}],
    }
    e1 = CostEntry.from_usage(
        run_id="r",
        pass_name="file",
        doc_id="a.pdf",
        key="k1",
        attempt=0,
        model="claude-sonnet-4-6",
        usage=usage,
        request_id="req_1",
    )
    e2 = CostEntry.from_usage(
        run_id="r",
        pass_name="integration",
        doc_id="*",
        key="k2",
        attempt=0,
        model="claude-haiku-4-5",
        usage={"input_tokens": 10, "output_tokens": 1},
        batch=True,
    )
    assert e1.compaction_input_tokens == 300 and e1.usd == pytest.approx(cost_usd("claude-sonnet-4-6", usage))
    ledger = CostLedger(store, "r")
    assert ledger.record("chunk-0001", [e1]) is True
    assert ledger.record("chunk-0001", [e1, e1]) is False  # a replayed group is not counted twice
    assert ledger.record("k2-0", [e2]) is True
    totals = ledger.totals()
    assert totals["usd"] == pytest.approx(e1.usd + e2.usd)
    assert totals["by_pass"] == {"file": pytest.approx(e1.usd), "integration": pytest.approx(e2.usd)}
    assert set(totals["by_model"]) == {"claude-sonnet-4-6", "claude-haiku-4-5"}
    assert totals["by_doc"]["a.pdf"] == pytest.approx(e1.usd)
    assert totals["tokens"]["input_tokens"] == 1010
    assert totals["tokens"]["compaction_output_tokens"] == 40
    assert totals["entries"] == 2


def test_open_store_uris(tmp_path) -> None:
    assert open_store(f"file://{tmp_path}").uri == str(tmp_path)
    from docmill.errors import ConfigError

    with pytest.raises(ConfigError):
        open_store("gs://bucket/x")
    with pytest.raises(ConfigError):
        open_store("")

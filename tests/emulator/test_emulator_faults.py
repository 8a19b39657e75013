"""Injected faults reach the real SDK as the right exception, status, request id and headers."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import anthropic
import httpx2
import pydantic
import pytest

from emulator.cli import build_parser
from emulator.faults import FaultKind
from emulator.server import EmulatorServer
from tests.fixtures.emulator import sdk_client

MODEL = "claude-sonnet-4-6"
DOC = "<document id='d1'>\nVendor: ACME Corp\nTotal: 12.50 EUR\n</document>"


class Invoice(pydantic.BaseModel):
    vendor: str
    total: str


def _ask(client: anthropic.Anthropic, text: str = "hello") -> anthropic.types.Message:
    return client.messages.create(model=MODEL, max_tokens=300, messages=[{"role": "user", "content": text}])


@pytest.mark.parametrize(
    "kind, error_class, status, error_type",
    [
        ("rate_limit", anthropic.RateLimitError, 429, "rate_limit_error"),
        ("overloaded", anthropic.OverloadedError, 529, "overloaded_error"),
        ("server_error", anthropic.InternalServerError, 500, "api_error"),
        ("invalid_request", anthropic.BadRequestError, 400, "invalid_request_error"),
    ],
)
def test_error_faults_reach_sdk(
    emulator: EmulatorServer,
    kind: str,
    error_class: type[anthropic.APIStatusError],
    status: int,
    error_type: str,
) -> None:
    emulator.state.faults.add(kind=kind, count=1, retry_after=2)
    client = sdk_client(emulator)
    with pytest.raises(error_class) as info:
        _ask(client)
    err = info.value
    assert err.status_code == status and err.type == error_type
    assert err.request_id and err.request_id.startswith("req_")
    assert err.body["request_id"] == err.request_id  # type: ignore[index]
    assert err.response.headers["retry-after"] == "2" and err.response.headers["retry-after-ms"] == "2000"
    if status == 429:
        assert err.response.headers["anthropic-ratelimit-requests-remaining"] == "0"
        assert err.response.headers["anthropic-ratelimit-requests-reset"].endswith("Z")
    assert _ask(client).stop_reason == "end_turn"  # count=1: the next request succeeds
    snap = emulator.state.accounting.snapshot()
    assert (
        snap["received"] == 2 and snap["billed_count"] == 1 and snap["errors_by_status"] == {str(status): 1}
    )


@pytest.mark.parametrize(
    "code, error_class",
    [
        (None, anthropic.EnforcedSpendLimitReachedError),
        ("contract_spend_limit_reached", anthropic.ContractSpendLimitReachedError),
    ],
)
def test_spend_limit_429_carries_its_error_code(
    emulator: EmulatorServer, code: str | None, error_class: type[anthropic.RateLimitError]
) -> None:
    emulator.state.faults.add(kind="spend_limit", count=1, error_code=code)
    with pytest.raises(error_class) as info:
        _ask(sdk_client(emulator))
    err = info.value
    assert isinstance(err, anthropic.RateLimitError) and err.status_code == 429
    assert err.error_code == (code or "enforced_spend_limit_reached")
    assert int(err.response.headers["retry-after"]) >= 3600  # waiting does not help


@pytest.mark.parametrize("failures", [0, 1, 2])
def test_next_n_fail_then_sdk_retry_succeeds(emulator: EmulatorServer, failures: int) -> None:
    emulator.state.faults.add(kind="overloaded", count=failures, retry_after=0.001) if failures else None
    client = sdk_client(emulator, max_retries=2)
    assert _ask(client).stop_reason == "end_turn"
    assert emulator.state.accounting.received == failures + 1
    assert len(emulator.state.accounting.billed) == 1


def test_should_retry_false_stops_sdk_retries(emulator: EmulatorServer) -> None:
    emulator.state.faults.add(kind="server_error", should_retry=False)
    with pytest.raises(anthropic.InternalServerError) as info:
        _ask(sdk_client(emulator, max_retries=2))
    assert info.value.response.headers["x-should-retry"] == "false"
    assert emulator.state.accounting.received == 1


def test_connection_reset_is_api_connection_error(emulator: EmulatorServer) -> None:
    emulator.state.faults.add(kind="connection_reset", count=1)
    client = sdk_client(emulator)
    with pytest.raises(anthropic.APIConnectionError):
        _ask(client)
    assert _ask(client).stop_reason == "end_turn"


def test_latency_fault_delays_only_marked_requests(emulator: EmulatorServer) -> None:
    emulator.state.faults.add(kind="latency", latency_ms=300, marker="SLOWDOC")
    client = sdk_client(emulator)
    t0 = time.perf_counter()
    _ask(client, "fast one")
    fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    _ask(client, "this is SLOWDOC")
    slow = time.perf_counter() - t0
    assert slow >= 0.3 > fast


def test_marker_targets_one_document(emulator: EmulatorServer) -> None:
    emulator.state.faults.add(kind="overloaded", marker="INV-0042")
    client = sdk_client(emulator)
    assert _ask(client, "invoice INV-0041").stop_reason == "end_turn"
    with pytest.raises(anthropic.OverloadedError):
        _ask(client, "invoice INV-0042")
    with pytest.raises(anthropic.OverloadedError):
        _ask(client, "again INV-0042")


def _parse(client: anthropic.Anthropic):  # type: ignore[no-untyped-def]
    return client.messages.parse(
        model=MODEL, max_tokens=500, messages=[{"role": "user", "content": DOC}], output_format=Invoice
    )


def test_truncation_fault(emulator: EmulatorServer) -> None:
    emulator.state.faults.add(kind="truncate", count=1)
    client = sdk_client(emulator)
    raw = _ask(client, DOC)
    assert raw.stop_reason == "max_tokens"
    emulator.state.faults.add(kind="truncate", count=1)
    with pytest.raises(pydantic.ValidationError):
        _parse(client)


def test_malformed_json_and_schema_invalid_faults(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    emulator.state.faults.add(kind="malformed_json", count=1)
    with pytest.raises(pydantic.ValidationError):
        _parse(client)
    emulator.state.faults.add(kind="schema_invalid", count=1)
    with pytest.raises(pydantic.ValidationError):
        _parse(client)
    good = _parse(client)
    assert isinstance(good.parsed_output, Invoice)


def test_refusal_fault(emulator: EmulatorServer) -> None:
    emulator.state.faults.add(kind="refusal", count=1)
    msg = _ask(sdk_client(emulator), DOC)
    assert msg.stop_reason == "refusal"
    assert msg.stop_details is not None and msg.stop_details.type == "refusal"


def test_probability_is_seeded(emulator: EmulatorServer) -> None:
    def run() -> list[bool]:
        emulator.state.reset()
        emulator.state.faults.add(kind="overloaded", probability=0.5)
        client = sdk_client(emulator)
        outcomes = []
        for _ in range(20):
            try:
                _ask(client)
                outcomes.append(True)
            except anthropic.OverloadedError:
                outcomes.append(False)
        return outcomes

    first = run()
    assert first == run() and 0 < sum(first) < 20


def test_control_endpoint_sets_and_clears_faults(emulator: EmulatorServer) -> None:
    rules = [{"kind": "overloaded", "count": 1}, {"kind": "rate_limit", "path": "/v1/messages/count_tokens"}]
    resp = httpx2.post(emulator.url("/_emulator/faults"), json=rules)
    assert resp.status_code == 200 and len(resp.json()["rules"]) == 2
    assert httpx2.post(emulator.url("/_emulator/faults"), json={"kind": "nope"}).status_code == 400
    client = sdk_client(emulator)
    with pytest.raises(anthropic.OverloadedError):
        _ask(client)
    with pytest.raises(anthropic.RateLimitError):
        client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "x"}])
    assert httpx2.delete(emulator.url("/_emulator/faults")).json() == {"rules": []}
    assert client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "x"}]).input_tokens
    acct = httpx2.get(emulator.url("/_emulator/accounting")).json()
    assert acct["received"] == 3 and acct["billed_count"] == 0


def test_rate_limit_buckets(emulator: EmulatorServer) -> None:
    emulator.state.configure({"requests_per_minute": 3, "frozen_clock": True})
    client = sdk_client(emulator)
    first = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=50, messages=[{"role": "user", "content": "a"}]
    )
    assert first.headers["anthropic-ratelimit-requests-limit"] == "3"
    assert first.headers["anthropic-ratelimit-requests-remaining"] == "2"
    _ask(client)
    _ask(client)
    with pytest.raises(anthropic.RateLimitError) as info:
        _ask(client)
    headers = info.value.response.headers
    assert headers["retry-after"] == "20" and headers["anthropic-ratelimit-requests-remaining"] == "0"
    emulator.state.clock.advance(20)
    assert _ask(client).stop_reason == "end_turn"


def test_input_token_bucket(emulator: EmulatorServer) -> None:
    emulator.state.configure({"input_tokens_per_minute": 600, "frozen_clock": True})
    client = sdk_client(emulator)
    _ask(client, "x" * 2000)  # ~510 tokens
    with pytest.raises(anthropic.RateLimitError) as info:
        _ask(client, "x" * 2000)
    assert 1 <= int(info.value.response.headers["retry-after"]) <= 60
    assert "input-tokens" in info.value.message


def test_faults_from_env_and_cli_process() -> None:
    env_rules = json.dumps([{"kind": "overloaded", "count": 1}])
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from emulator.cli import main; raise SystemExit(main())",
            "--port",
            "0",
            "--rpm",
            "100",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={"DOCMILL_EMULATOR_FAULTS": env_rules, "PATH": "/usr/bin:/bin", "PYTHONPATH": "."},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        base_url = line.split()[3]
        client = anthropic.Anthropic(
            api_key="k", base_url=base_url, max_retries=0, _strict_response_validation=True
        )
        with pytest.raises(anthropic.OverloadedError):
            _ask(client)
        assert _ask(client).stop_reason == "end_turn"
        assert httpx2.get(base_url + "/_emulator/config").json()["requests_per_minute"] == 100
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def test_mid_stream_error_event(emulator: EmulatorServer) -> None:
    emulator.state.faults.add(kind="stream_error", count=1)
    client = sdk_client(emulator, max_retries=2)
    assert _ask(client).stop_reason == "end_turn"  # non-streaming requests are not targeted
    with (
        pytest.raises(anthropic.APIStatusError) as info,
        client.messages.stream(model=MODEL, max_tokens=300, messages=[{"role": "user", "content": DOC}]) as s,
    ):
        s.get_final_message()
    assert info.value.status_code == 200 and info.value.type == "overloaded_error"
    assert emulator.state.accounting.received == 2  # the SDK does not retry a mid-stream error


def test_request_too_large_is_413(emulator: EmulatorServer) -> None:
    emulator.state.configure({"max_message_bytes": 1000})
    with pytest.raises(anthropic.APIStatusError) as info:
        _ask(sdk_client(emulator), "x" * 2000)
    assert info.value.status_code == 413 and info.value.type == "request_too_large"


def test_the_cli_help_names_every_fault_kind() -> None:
    text = build_parser().format_help()
    assert [k.value for k in FaultKind if k.value not in text] == []

"""/v1/messages and /v1/messages/count_tokens through the real SDK (strict validation)."""

from __future__ import annotations

import anthropic
import pytest

from emulator.server import EmulatorServer
from tests.fixtures.emulator import sdk_client

MODEL = "claude-sonnet-4-6"


def test_create_returns_strict_message_with_request_id(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    msg = client.messages.create(
        model=MODEL, max_tokens=200, messages=[{"role": "user", "content": "hello there"}]
    )
    assert msg.type == "message" and msg.role == "assistant" and msg.model == MODEL
    assert msg.stop_reason == "end_turn"
    assert msg.content and msg.content[0].type == "text"
    assert msg._request_id and msg._request_id.startswith("req_")
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens > 0
    assert msg.usage.service_tier == "standard"


def test_count_tokens_matches_usage(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    messages: list = [{"role": "user", "content": "count me " * 50}]
    counted = client.messages.count_tokens(model=MODEL, messages=messages, system="be brief")
    msg = client.messages.create(model=MODEL, max_tokens=200, messages=messages, system="be brief")
    assert counted.input_tokens == msg.usage.input_tokens
    assert counted.input_tokens > 100


def test_removed_sampling_params_are_rejected(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(
            model=MODEL,
            max_tokens=10,
            messages=[{"role": "user", "content": "x"}],
            extra_body={"temperature": 0.0},
        )
    assert info.value.status_code == 400
    assert "temperature: Extra inputs are not permitted" in info.value.api_message
    assert info.value.request_id and info.value.body["request_id"] == info.value.request_id  # type: ignore[index]


def test_unknown_model_is_404(emulator: EmulatorServer) -> None:
    with pytest.raises(anthropic.NotFoundError):
        sdk_client(emulator).messages.create(
            model="claude-nonexistent-1", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )


def test_missing_key_is_401(emulator: EmulatorServer) -> None:
    import httpx2

    resp = httpx2.post(emulator.url("/v1/messages"), json={"model": MODEL, "max_tokens": 5, "messages": []})
    assert resp.status_code == 401
    assert resp.json()["error"]["type"] == "authentication_error"
    assert resp.headers["request-id"] == resp.json()["request_id"]
    ok = httpx2.post(
        emulator.url("/v1/messages"),
        headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
        json={"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert ok.status_code == 200, ok.text

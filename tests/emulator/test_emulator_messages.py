"""/v1/messages and /v1/messages/count_tokens through the real SDK (strict validation)."""

from __future__ import annotations

import asyncio

import anthropic
import pytest
from pydantic import BaseModel

from emulator.server import EmulatorServer
from tests.fixtures.emulator import async_sdk_client, sdk_client

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


class Invoice(BaseModel):
    vendor: str
    total: str


DOC = "<document id='inv-1'>\nVendor: ACME Corp\nTotal: 12.50 EUR\n</document>"


def test_parse_with_pydantic_output_format(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    parsed = client.messages.parse(
        model=MODEL, max_tokens=500, messages=[{"role": "user", "content": DOC}], output_format=Invoice
    )
    assert parsed.stop_reason == "end_turn"
    assert isinstance(parsed.parsed_output, Invoice)


def test_forced_tool_use_then_tool_result_round_trip(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    tool = {
        "name": "record_invoice",
        "description": "record",
        "input_schema": {
            "type": "object",
            "properties": {"vendor": {"type": "string"}},
            "required": ["vendor"],
        },
    }
    msg = client.messages.create(
        model=MODEL,
        max_tokens=500,
        tools=[tool],  # type: ignore[list-item]
        tool_choice={"type": "tool", "name": "record_invoice"},
        messages=[{"role": "user", "content": DOC}],
    )
    assert msg.stop_reason == "tool_use"
    use = msg.content[-1]
    assert use.type == "tool_use" and use.name == "record_invoice"
    history: list = [
        {"role": "user", "content": DOC},
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
    ]
    with pytest.raises(anthropic.BadRequestError, match="tool_result"):
        client.messages.create(
            model=MODEL,
            max_tokens=50,
            tools=[tool],
            messages=[*history, {"role": "user", "content": "next"}],  # type: ignore[list-item]
        )
    stray = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_nope", "content": "ok"}],
    }
    with pytest.raises(anthropic.BadRequestError, match="unexpected `tool_use_id`"):
        client.messages.create(model=MODEL, max_tokens=50, tools=[tool], messages=[*history, stray])  # type: ignore[list-item]
    answered = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "ok"}]}
    follow = client.messages.create(model=MODEL, max_tokens=50, tools=[tool], messages=[*history, answered])  # type: ignore[list-item]
    assert follow.stop_reason in ("end_turn", "max_tokens")


def test_validation_errors(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    with pytest.raises(anthropic.BadRequestError, match="role"):
        client.messages.create(model=MODEL, max_tokens=5, messages=[{"role": "robot", "content": "x"}])  # type: ignore[typeddict-item]
    with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
        client.messages.create(model=MODEL, max_tokens=-1, messages=[{"role": "user", "content": "x"}])
    with pytest.raises(anthropic.BadRequestError, match="messages: Field required"):
        client.post("/v1/messages", body={"model": MODEL, "max_tokens": 5}, cast_to=object)
    with pytest.raises(anthropic.BadRequestError, match="budget_tokens"):
        client.messages.create(
            model=MODEL,
            max_tokens=2000,
            thinking={"type": "enabled", "budget_tokens": 4000},
            messages=[{"role": "user", "content": "x"}],
        )
    cc = {"type": "ephemeral"}
    blocks = [{"type": "text", "text": f"part {i}", "cache_control": cc} for i in range(5)]
    with pytest.raises(anthropic.BadRequestError, match="maximum of 4"):
        client.messages.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": blocks}])  # type: ignore[misc]


def test_max_tokens_cuts_output(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    msg = client.messages.create(model=MODEL, max_tokens=2, messages=[{"role": "user", "content": DOC}])
    assert msg.stop_reason == "max_tokens"
    assert msg.usage.output_tokens <= 2


def _long_system(n_chars: int) -> list:
    return [{"type": "text", "text": "Rules. " * (n_chars // 7), "cache_control": {"type": "ephemeral"}}]


def test_prompt_cache_write_then_read_then_expire(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    system = _long_system(12000)  # ~3000 tokens, above Sonnet 4.6's 2048 minimum
    ask: list = [{"role": "user", "content": "question one"}]
    first = client.messages.create(model=MODEL, max_tokens=50, system=system, messages=ask)
    assert first.usage.cache_creation_input_tokens and first.usage.cache_creation_input_tokens > 2048
    assert first.usage.cache_read_input_tokens == 0
    second = client.messages.create(model=MODEL, max_tokens=50, system=system, messages=ask)
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    assert second.usage.input_tokens == first.usage.input_tokens
    total = client.messages.count_tokens(model=MODEL, system=system, messages=ask).input_tokens
    assert second.usage.input_tokens + second.usage.cache_read_input_tokens == total
    emulator.state.clock.advance(301)
    third = client.messages.create(model=MODEL, max_tokens=50, system=system, messages=ask)
    assert third.usage.cache_read_input_tokens == 0 and third.usage.cache_creation_input_tokens
    billed = emulator.state.accounting.billed
    assert billed[1].usd < billed[0].usd  # a read costs less than a write


def test_prompt_cache_below_minimum_and_configurable(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    system = _long_system(1200)  # ~300 tokens
    ask: list = [{"role": "user", "content": "q"}]
    for _ in range(2):
        msg = client.messages.create(model=MODEL, max_tokens=20, system=system, messages=ask)
        assert msg.usage.cache_creation_input_tokens == 0 and msg.usage.cache_read_input_tokens == 0
    emulator.state.configure({"cache_min_tokens_by_model": {MODEL: 100}})
    msg = client.messages.create(model=MODEL, max_tokens=20, system=system, messages=ask)
    assert msg.usage.cache_creation_input_tokens


def test_one_hour_ttl_and_top_level_cache_control(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    ask: list = [{"role": "user", "content": "long context " * 1000}]
    first = client.messages.create(
        model=MODEL, max_tokens=20, messages=ask, cache_control={"type": "ephemeral", "ttl": "1h"}
    )
    assert first.usage.cache_creation is not None
    assert first.usage.cache_creation.ephemeral_1h_input_tokens == first.usage.cache_creation_input_tokens
    emulator.state.clock.advance(1800)
    again = client.messages.create(
        model=MODEL, max_tokens=20, messages=ask, cache_control={"type": "ephemeral", "ttl": "1h"}
    )
    assert again.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens


def test_async_client_and_streaming(emulator: EmulatorServer) -> None:
    asyncio.run(_async_client_and_streaming(emulator))


async def _async_client_and_streaming(emulator: EmulatorServer) -> None:
    client = async_sdk_client(emulator)
    msg = await client.messages.create(
        model=MODEL, max_tokens=300, messages=[{"role": "user", "content": DOC}]
    )
    async with client.messages.stream(
        model=MODEL, max_tokens=300, messages=[{"role": "user", "content": DOC}]
    ) as stream:
        texts = [t async for t in stream.text_stream]
        final = await stream.get_final_message()
    assert msg.stop_reason == final.stop_reason == "end_turn"
    assert "".join(texts) == final.content[0].text  # type: ignore[union-attr]
    assert final.usage.output_tokens == emulator.state.accounting.billed[-1].output_tokens > 0
    parsed = await client.messages.parse(
        model=MODEL, max_tokens=500, messages=[{"role": "user", "content": DOC}], output_format=Invoice
    )
    assert isinstance(parsed.parsed_output, Invoice)
    await client.close()


def test_sync_stream_of_tool_use(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    tool = {"name": "t", "input_schema": {"type": "object", "properties": {"vendor": {"type": "string"}}}}
    with client.messages.stream(
        model=MODEL,
        max_tokens=300,
        tools=[tool],  # type: ignore[list-item]
        tool_choice={"type": "tool", "name": "t"},
        messages=[{"role": "user", "content": DOC}],
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[-1].type == "tool_use"


def test_models_endpoint(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    ids = [m.id for m in client.models.list()]
    assert MODEL in ids
    assert client.models.retrieve(MODEL).id == MODEL


def test_unknown_route_and_method_answer_like_the_api(emulator: EmulatorServer) -> None:
    import httpx2

    missing = httpx2.get(emulator.url("/v1/nothing"), headers={"x-api-key": "k"})
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    assert missing.headers["request-id"] == missing.json()["request_id"]
    wrong = httpx2.get(emulator.url("/v1/messages"), headers={"x-api-key": "k"})
    assert wrong.status_code == 405 and wrong.json()["type"] == "error"

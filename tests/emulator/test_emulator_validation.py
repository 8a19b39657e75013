"""The emulator answers as the API does where it used to be kinder (issue 22 point 10): each request
below was accepted before; the API answers it 400 `invalid_request_error` in its error shape. Plus the
rate limiter: admission by max_tokens, cache reads not counted, the `anthropic-ratelimit-tokens-*`
headers. The real SDK against the real HTTP emulator; the body keys are the SDK's own TypedDicts."""

from __future__ import annotations

import typing
from typing import Any

import anthropic
import httpx2
import pytest

from docmill.models import model_info
from emulator import validation
from emulator.server import EmulatorServer
from tests.fixtures.emulator import sdk_client

MODEL = "claude-sonnet-4-6"
HI: list[Any] = [{"role": "user", "content": "hi"}]


def _refused(emulator: EmulatorServer, **kw: Any) -> str:
    """The 400's message, after checking the error shape the API answers with."""
    with pytest.raises(anthropic.BadRequestError) as info:
        sdk_client(emulator).messages.create(**{"model": MODEL, "max_tokens": 50, "messages": HI, **kw})
    body = info.value.body
    assert isinstance(body, dict) and body["type"] == "error" and body["request_id"]
    assert body["error"]["type"] == "invalid_request_error" and body["error"]["details"] is None
    assert info.value.response.headers["request-id"] == body["request_id"]
    return str(body["error"]["message"])


def test_unknown_top_level_keys_are_refused(emulator: EmulatorServer) -> None:
    assert _refused(emulator, extra_body={"temprature": 0.2}) == "temprature: Extra inputs are not permitted"
    with pytest.raises(anthropic.BadRequestError, match="foo: Extra inputs"):
        sdk_client(emulator).messages.count_tokens(model=MODEL, messages=HI, extra_body={"foo": 1})
    # a beta-only key needs the beta namespace (an anthropic-beta header)
    edits = {"edits": [{"type": "clear_thinking_20251015"}]}
    assert "context_management: Extra inputs" in _refused(emulator, extra_body={"context_management": edits})


def test_role_system_in_messages(emulator: EmulatorServer) -> None:
    first = [{"role": "system", "content": "Be terse."}, *HI]
    assert _refused(emulator, messages=first).startswith("messages.0: use the top-level 'system' parameter")
    later = [*HI, {"role": "assistant", "content": "Hello."}, {"role": "system", "content": "Be terse."}, *HI]
    assert 'messages.2.role: Unexpected role "system"' in _refused(emulator, messages=later)
    emulator.state.configure({"system_message_models": [MODEL]})  # a model that takes them mid-conversation
    assert sdk_client(emulator).messages.create(model=MODEL, max_tokens=50, messages=later).content


def test_empty_messages_are_refused(emulator: EmulatorServer) -> None:
    assert _refused(emulator, messages=[]) == "messages: at least one message is required"


def test_a_role_that_is_not_a_string_is_refused(emulator: EmulatorServer) -> None:
    for role in (["user"], {"user": 1}, None):
        message = _refused(emulator, messages=[{"role": role, "content": "hi"}])
        assert message == "messages.0.role: Input should be 'user', 'assistant' or 'system'"


def test_max_tokens_zero_and_above_the_models_limit_are_refused(emulator: EmulatorServer) -> None:
    assert _refused(emulator, max_tokens=0) == "max_tokens: Input should be greater than or equal to 1"
    limit = model_info(MODEL).max_output_tokens  # type: ignore[union-attr]
    message = _refused(emulator, max_tokens=limit + 1, timeout=30.0)  # (a timeout: the SDK sends it)
    assert message == (
        f"max_tokens: {limit + 1} > {limit}, which is the maximum allowed number of output tokens for {MODEL}"
    )
    assert sdk_client(emulator).messages.create(model=MODEL, max_tokens=limit, messages=HI, timeout=30.0)
    emulator.state.configure({"allow_max_tokens_zero": True})  # the SDK documents 0 for cache pre-warming
    assert (
        sdk_client(emulator).messages.create(model=MODEL, max_tokens=0, messages=HI).usage.output_tokens == 0
    )


def test_tool_choice_without_tools_is_refused(emulator: EmulatorServer) -> None:
    message = _refused(emulator, tool_choice={"type": "auto"})
    assert message == "tool_choice: tool_choice may only be specified while providing tools."


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ({"format": {"type": "json", "schema": {"type": "object"}}}, "output_config.format.type"),
        ({"format": {"type": "json_schema"}}, "output_config.format.schema"),
        ({"format": {"type": "json_schema", "schema": {"type": "object"}, "strict": True}}, "format.strict"),
        ({"effort": "extreme"}, "output_config.effort"),
        ({"schema": {"type": "object"}}, "output_config.schema: Extra inputs are not permitted"),
    ],
    ids=["format-type", "no-schema", "format-extra", "effort", "extra-key"],
)
def test_a_malformed_output_config_is_refused(emulator: EmulatorServer, config: Any, said: str) -> None:
    assert said in _refused(emulator, output_config=config)


def test_a_missing_anthropic_version_header_is_refused(emulator: EmulatorServer) -> None:
    body = {"model": MODEL, "max_tokens": 50, "messages": HI}
    resp = httpx2.post(emulator.url("/v1/messages"), headers={"x-api-key": "k"}, json=body)
    assert resp.status_code == 400, resp.text
    err = resp.json()
    assert err["type"] == "error" and err["request_id"] == resp.headers["request-id"]
    assert err["error"] == {
        "type": "invalid_request_error",
        "message": "anthropic-version: header is required",
        "details": None,
    }


def test_admission_reserves_max_tokens_of_the_output_limit(emulator: EmulatorServer) -> None:
    """The API admits a request by its max_tokens against the output-token limit (and gives back
    what the answer did not use), not by 1 token."""
    emulator.state.configure({"output_tokens_per_minute": 1000, "frozen_clock": True})
    client = sdk_client(emulator)
    used = client.messages.create(model=MODEL, max_tokens=900, messages=HI).usage.output_tokens
    assert used < 100  # 900 reserved, the unused part given back: 1000 - used left
    with pytest.raises(anthropic.RateLimitError) as info:
        client.messages.create(model=MODEL, max_tokens=1000 - used + 1, messages=HI)
    assert "output-tokens" in info.value.message
    assert client.messages.create(model=MODEL, max_tokens=1000 - used - 5, messages=HI)


def test_every_answer_has_the_tokens_headers_of_the_tightest_token_limit(emulator: EmulatorServer) -> None:
    emulator.state.configure({"input_tokens_per_minute": 50_000, "output_tokens_per_minute": 8_000})
    raw = sdk_client(emulator).messages.with_raw_response.create(model=MODEL, max_tokens=50, messages=HI)
    h = raw.headers
    assert h["anthropic-ratelimit-tokens-limit"] == "8000"  # fewer output tokens left than input ones
    assert h["anthropic-ratelimit-tokens-remaining"] == h["anthropic-ratelimit-output-tokens-remaining"]
    assert h["anthropic-ratelimit-tokens-reset"] == h["anthropic-ratelimit-output-tokens-reset"]
    emulator.state.configure({"input_tokens_per_minute": 2_000, "output_tokens_per_minute": 400_000})
    raw = sdk_client(emulator).messages.with_raw_response.create(model=MODEL, max_tokens=50, messages=HI)
    assert raw.headers["anthropic-ratelimit-tokens-limit"] == "2000"


@pytest.mark.parametrize("counts_reads", [False, True])
def test_cache_reads_do_not_count_against_the_input_limit(
    emulator: EmulatorServer, counts_reads: bool
) -> None:
    """Current models count uncached input and cache writes against the input-token limit, not cache
    reads (a knob for an endpoint that does count them)."""
    emulator.state.configure(
        {
            "input_tokens_per_minute": 9_000,
            "frozen_clock": True,
            "input_limit_counts_cache_reads": counts_reads,
        }
    )
    client = sdk_client(emulator)
    system = [{"type": "text", "text": "Rules. " * 1500, "cache_control": {"type": "ephemeral"}}]  # ~2.6k
    admitted = 0
    for _ in range(6):
        try:
            usage = client.messages.create(model=MODEL, max_tokens=20, system=system, messages=HI).usage
        except anthropic.RateLimitError:
            break
        admitted += 1
    assert admitted == (3 if counts_reads else 6)
    assert usage.cache_read_input_tokens > 2000  # (the last admitted one read the prefix)


def test_the_body_keys_are_the_sdks() -> None:
    from anthropic.types import message_count_tokens_params, message_create_params
    from anthropic.types.beta import message_count_tokens_params as beta_count
    from anthropic.types.beta import message_create_params as beta_create

    headers = {"betas", "workspace_id", "user_profile_id"}  # the SDK sends these as headers

    def keys(tp: Any) -> set[str]:
        return set(typing.get_type_hints(tp)) - headers

    create = keys(message_create_params.MessageCreateParamsStreaming)
    count = keys(message_count_tokens_params.MessageCountTokensParams)
    assert create == validation.CREATE_KEYS and count == validation.COUNT_KEYS
    assert keys(beta_create.MessageCreateParamsStreaming) - create == validation.BETA_CREATE_KEYS
    assert keys(beta_count.MessageCountTokensParams) - count == validation.BETA_COUNT_KEYS

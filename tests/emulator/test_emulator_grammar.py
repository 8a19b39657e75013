"""The optional "compiled grammar is too large" rule (emulator/grammar.py) through the real SDK."""

from __future__ import annotations

import anthropic
import pytest

from emulator import grammar
from emulator.server import EmulatorServer
from tests.fixtures.emulator import sdk_client

ASK: list = [{"role": "user", "content": "Vendor: ACME"}]


def _nullable_schema(leaves: int) -> dict:
    props = {f"f{i}": {"anyOf": [{"type": "string"}, {"type": "null"}]} for i in range(leaves)}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def test_complexity_grows_with_nullable_leaves_and_expanded_refs() -> None:
    small, large = grammar.complexity(_nullable_schema(2)), grammar.complexity(_nullable_schema(20))
    assert large - small == 18 * (grammar.UNION_WEIGHT + 3)
    with_refs = {
        "$defs": {"Leaf": _nullable_schema(3)},
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/Leaf"}, "b": {"$ref": "#/$defs/Leaf"}},
    }
    once = grammar.complexity(_nullable_schema(3))
    assert grammar.complexity(with_refs) >= 2 * once  # each use of a $def is compiled again
    loop = {
        "$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}}}},
        "$ref": "#/$defs/N",
    }
    assert grammar.complexity(loop) < 100  # recursive refs stop


def test_schema_over_the_limit_is_refused_with_the_api_message(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    big = {"format": {"type": "json_schema", "schema": _nullable_schema(20)}}
    small = {"format": {"type": "json_schema", "schema": _nullable_schema(2)}}
    client.messages.create(model="claude-sonnet-4-6", max_tokens=50, messages=ASK, output_config=big)
    emulator.state.configure({"grammar_max_complexity": 100})
    with pytest.raises(anthropic.BadRequestError, match="compiled grammar is too large") as info:
        client.messages.create(model="claude-sonnet-4-6", max_tokens=50, messages=ASK, output_config=big)
    assert "output_config.format.schema" in info.value.api_message
    client.messages.create(model="claude-sonnet-4-6", max_tokens=50, messages=ASK, output_config=small)
    assert client.messages.count_tokens(model="claude-sonnet-4-6", messages=ASK, output_config=big)
    tool = {"name": "t", "strict": True, "input_schema": _nullable_schema(20)}
    with pytest.raises(anthropic.BadRequestError, match=r"tools\.0\.input_schema"):
        client.messages.create(model="claude-sonnet-4-6", max_tokens=50, messages=ASK, tools=[tool])  # type: ignore[list-item]

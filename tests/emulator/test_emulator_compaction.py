"""On-demand compaction (beta compact-2026-09-04) through the real SDK's beta namespace."""

from __future__ import annotations

import anthropic
import pytest
from anthropic.types import CompactionUnavailableError

from emulator.server import EmulatorServer
from tests.fixtures.emulator import sdk_client

MODEL = "claude-sonnet-4-6"
BETA = "compact-2026-09-04"
HISTORY: list = [
    {"role": "user", "content": "FACT: invoice INV-1 total is 12.50 EUR\n" + "chatter line\n" * 400},
    {"role": "assistant", "content": "Noted the total."},
    {"role": "user", "content": "DECISION: use EUR everywhere\n" + "more chatter\n" * 400},
]


def _compact(client: anthropic.Anthropic, messages: list | None = None):  # type: ignore[no-untyped-def]
    return client.beta.messages.create(
        model=MODEL,
        max_tokens=1000,
        betas=[BETA],
        messages=messages or HISTORY,
        compaction={"type": "summarize", "instructions": "keep facts"},
    )


def test_compaction_round_trip(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    before = client.beta.messages.count_tokens(model=MODEL, messages=HISTORY).input_tokens
    msg = _compact(client)
    assert msg.stop_reason == "compaction"
    assert len(msg.content) == 1 and msg.content[0].type == "compaction"
    block = msg.content[0]
    assert block.content and "INV-1" in block.content and block.signature and block.encrypted_content is None
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (0, 0)
    assert msg.usage.iterations and msg.usage.iterations[0].type == "compaction"
    assert msg.usage.iterations[0].input_tokens == before
    billed = emulator.state.accounting.billed[-1]
    assert billed.usd > 0 and billed.usage["iterations"][0]["output_tokens"] > 0

    follow_up: list = [msg.to_param(), {"role": "user", "content": "What is the total of INV-1?"}]
    after = client.beta.messages.count_tokens(model=MODEL, messages=follow_up).input_tokens
    assert after < before / 4  # counts the summary, not the old history
    answer = client.beta.messages.create(model=MODEL, max_tokens=200, betas=[BETA], messages=follow_up)
    assert answer.stop_reason == "end_turn"
    assert answer.usage.input_tokens == after


def _tampered(block: dict, **changes: object) -> list:
    return [{"role": "assistant", "content": [{**block, **changes}]}, {"role": "user", "content": "go on"}]


@pytest.mark.parametrize(
    "change, error_class, code",
    [
        (
            {"content": "Summary: the total is 99 EUR"},
            anthropic.BadRequestError,
            "compaction_content_mismatch",
        ),
        ({"signature": "EmuCmp1.AAAA"}, anthropic.BadRequestError, "compaction_signature_invalid"),
        ({"signature": "forged"}, anthropic.BadRequestError, "compaction_signature_invalid"),
    ],
)
def test_tampered_block_is_rejected(
    emulator: EmulatorServer, change: dict, error_class: type[Exception], code: str
) -> None:
    client = sdk_client(emulator)
    block = _compact(client).content[0].model_dump()
    with pytest.raises(error_class) as info:
        client.beta.messages.create(
            model=MODEL, max_tokens=50, betas=[BETA], messages=_tampered(block, **change)
        )
    assert info.value.error_code == code  # type: ignore[attr-defined]
    assert info.value.status_code == 400  # type: ignore[attr-defined]


def test_misplaced_and_ambiguous_blocks(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    block = _compact(client).content[0].model_dump()
    misplaced: list = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": [block]},
        {"role": "user", "content": "next"},
    ]
    with pytest.raises(anthropic.BadRequestError) as info:
        client.beta.messages.create(model=MODEL, max_tokens=50, betas=[BETA], messages=misplaced)
    assert info.value.error_code == "compaction_block_misplaced"
    twice: list = [{"role": "assistant", "content": [block, block]}, {"role": "user", "content": "next"}]
    with pytest.raises(anthropic.BadRequestError) as info:
        client.beta.messages.create(model=MODEL, max_tokens=50, betas=[BETA], messages=twice)
    assert info.value.error_code == "compaction_block_ambiguous"
    failed_block = {**block, "content": None, "signature": None}
    ok: list = [{"role": "assistant", "content": [failed_block]}, {"role": "user", "content": "next"}]
    assert client.beta.messages.create(model=MODEL, max_tokens=50, betas=[BETA], messages=ok).stop_reason


def test_compaction_unavailable_fault_and_no_beta(emulator: EmulatorServer) -> None:
    emulator.state.faults.add(kind="compaction_unavailable", count=1)
    client = sdk_client(emulator)
    plain = client.beta.messages.create(model=MODEL, max_tokens=50, betas=[BETA], messages=HISTORY)
    assert plain.stop_reason == "end_turn"  # the rule only targets compaction requests
    with pytest.raises(CompactionUnavailableError) as info:
        _compact(client)
    assert info.value.status_code == 529 and isinstance(info.value, anthropic.OverloadedError)
    assert _compact(client).stop_reason == "compaction"
    with pytest.raises(anthropic.BadRequestError, match="compaction"):
        client.beta.messages.create(
            model=MODEL, max_tokens=50, messages=HISTORY, compaction={"type": "summarize"}
        )
    assert len(emulator.state.accounting.billed) == 2  # errors are not billed


@pytest.mark.parametrize(
    "extra",
    [
        {"output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
        {"stop_sequences": ["END"]},
        {
            "tools": [{"name": "t", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "tool", "name": "t"},
        },
    ],
)
def test_reply_shaping_params_are_rejected_in_compaction(emulator: EmulatorServer, extra: dict) -> None:
    client = sdk_client(emulator)
    with pytest.raises(anthropic.BadRequestError, match="compaction request"):
        client.beta.messages.create(
            model=MODEL,
            max_tokens=100,
            betas=[BETA],
            messages=HISTORY,
            compaction={"type": "summarize"},
            extra_body=extra,
        )

"""The emulator's model list is docmill's dated table (issue 22): every model not retired on its day is
served, retired and unknown ids answer 404 not_found_error; per-model rules for thinking, effort and
sampling answer 400 as the API does; adaptive thinking (on by default on 5.x) is modelled, billed as
output at docmill's dated prices. Through the real SDK."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from docmill.models import MODELS, THINKING_TOKENS_BY_EFFORT, Status
from docmill.prices import price_on, usd_at
from emulator.server import EmulatorServer
from tests.fixtures.emulator import sdk_client
from tests.fixtures.today import TODAY

ASK: list[Any] = [{"role": "user", "content": "Vendor: ACME\nTotal: 3 EUR"}]
SERVED = sorted(m.id for m in MODELS.values() if m.status_on(TODAY) is not Status.RETIRED)
RETIRED = sorted(m.id for m in MODELS.values() if m.status_on(TODAY) is Status.RETIRED)


@pytest.mark.parametrize("model", SERVED)
def test_every_model_not_retired_today_is_served_and_billed_at_docmills_price(
    emulator: EmulatorServer, model: str
) -> None:
    msg = sdk_client(emulator).messages.create(model=model, max_tokens=4000, messages=ASK)
    billed = emulator.state.accounting.billed[-1]
    price = price_on(model, TODAY)
    expected = usd_at(price, billed.usage) if price else usd_at(emulator.state.price_for(model), billed.usage)
    assert msg.stop_reason == "end_turn" and billed.usd == pytest.approx(expected, abs=1e-12)


def test_retired_and_unknown_models_answer_404_and_the_list_is_the_days(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    assert "claude-sonnet-4-5" in RETIRED  # retired 2026-11-30
    for model in ("claude-sonnet-4-5", "claude-sonnet-4-5-20250929", "claude-nonexistent-9"):
        with pytest.raises(anthropic.NotFoundError) as e:
            client.messages.create(model=model, max_tokens=10, messages=ASK)
        assert e.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    listed = {m.id for m in client.models.list()}
    assert set(SERVED) <= listed and not listed & set(RETIRED) and "claude-nonexistent-9" not in listed
    emulator.state.configure({"today": "2026-11-29"})  # the day before: still served
    assert client.messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=ASK).model


def test_a_served_model_without_a_published_price_is_billed_at_the_dearest_rates(
    emulator: EmulatorServer,
) -> None:
    sdk_client(emulator).messages.create(model="claude-fable-5-2", max_tokens=500, messages=ASK)
    billed = emulator.state.accounting.billed[-1]
    dearest = max(p.rates.output for p in (price_on(m, TODAY) for m in MODELS) if p is not None)
    assert billed.usd >= billed.output_tokens * dearest / 1e6 > 0


@pytest.mark.parametrize(
    ("model", "extra", "says"),
    [
        (
            "claude-sonnet-5",
            {"thinking": {"type": "enabled", "budget_tokens": 2000}},
            "thinking.type.enabled",
        ),
        ("claude-sonnet-5-5", {"thinking": {"type": "disabled"}}, "thinking.type.disabled"),
        ("claude-opus-5-5", {"thinking": {"type": "disabled"}}, "thinking.type.disabled"),
        (
            "claude-opus-5",
            {"thinking": {"type": "disabled"}, "output_config": {"effort": "max"}},
            "effort high",
        ),
        ("claude-haiku-4-5", {"output_config": {"effort": "low"}}, "effort is not supported"),
        ("claude-sonnet-5-5", {"output_config": {"effort": "extreme"}}, "output_config.effort"),
    ],
)
def test_per_model_thinking_and_effort_rules_answer_400(
    emulator: EmulatorServer, model: str, extra: dict[str, Any], says: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as e:
        sdk_client(emulator).messages.create(model=model, max_tokens=4000, messages=ASK, extra_body=extra)
    assert says in e.value.message
    assert not emulator.state.accounting.billed


def test_non_default_sampling_on_5x_is_400_even_under_the_old_api_version(emulator: EmulatorServer) -> None:
    old = sdk_client(emulator, default_headers={"anthropic-version": "2023-06-01"})
    assert old.messages.create(
        model="claude-sonnet-4-6", max_tokens=10, messages=ASK, extra_body={"temperature": 0}
    )
    for extra in ({"temperature": 0.2}, {"top_k": 5}, {"top_p": 0.5}):
        with pytest.raises(anthropic.BadRequestError, match="sampling"):
            old.messages.create(model="claude-sonnet-5-5", max_tokens=10, messages=ASK, extra_body=extra)
    assert old.messages.create(
        model="claude-sonnet-5-5", max_tokens=10, messages=ASK, extra_body={"temperature": 1}
    )


def test_adaptive_thinking_comes_first_and_is_billed_as_output(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator)
    plain = client.messages.create(model="claude-sonnet-4-6", max_tokens=4000, messages=ASK)
    assert [b.type for b in plain.content] == ["text"]  # 4.x: no thinking unless asked
    low = client.messages.create(
        model="claude-sonnet-5-5",
        max_tokens=4000,
        messages=ASK,
        extra_body={"output_config": {"effort": "low"}},
    )
    assert [b.type for b in low.content] == ["thinking", "text"]
    assert low.usage.output_tokens_details is not None
    assert low.usage.output_tokens_details.thinking_tokens == THINKING_TOKENS_BY_EFFORT["low"]
    text_tokens = plain.usage.output_tokens
    assert low.usage.output_tokens == text_tokens + THINKING_TOKENS_BY_EFFORT["low"]
    default = client.messages.create(model="claude-sonnet-5-5", max_tokens=4000, messages=ASK)  # effort high
    assert default.usage.output_tokens == text_tokens + THINKING_TOKENS_BY_EFFORT["high"]
    off = client.messages.create(
        model="claude-sonnet-5-5",
        max_tokens=4000,
        messages=ASK,
        extra_body={"thinking": {"type": "between_tools"}},
    )
    assert [b.type for b in off.content] == ["text"] and off.usage.output_tokens == text_tokens
    with client.messages.stream(model="claude-sonnet-5-5", max_tokens=4000, messages=ASK) as stream:
        streamed = stream.get_final_message()  # the SDK's accumulator takes the thinking block
    assert [b.type for b in streamed.content] == ["thinking", "text"]
    assert streamed.usage.output_tokens == default.usage.output_tokens
    tight = client.messages.create(model="claude-sonnet-5-5", max_tokens=1000, messages=ASK)
    assert (
        tight.stop_reason == "max_tokens" and tight.usage.output_tokens == 1000
    )  # thinking is in max_tokens
    emulator.state.configure({"thinking_tokens_by_effort": {"high": 7}})  # the knob
    assert client.messages.create(
        model="claude-sonnet-5-5", max_tokens=4000, messages=ASK
    ).usage.output_tokens == (text_tokens + 7)
    billed = emulator.state.accounting.billed
    assert all(b.usd == pytest.approx(usd_at(price_on(b.model, TODAY), b.usage)) for b in billed)  # type: ignore[arg-type]

"""Compaction mechanics and pinned facts: the range choice, the contract, stripped params, block
checks, the null-block fallback, and lossless id runs (property tests)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import pytest
from anthropic.types import Message
from anthropic.types.beta import BetaMessage
from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.conversation import compaction as cmp
from tasks.conversation.pinned import PinnedFacts, compress_ids


def test_reply_shaping_params_are_stripped() -> None:
    params = {
        "model": "m",
        "max_tokens": 10,
        "messages": [],
        "stop_sequences": ["END"],
        "output_config": {"format": {"type": "json_schema", "schema": {}}, "effort": "low"},
        "tool_choice": {"type": "tool", "name": "x"},
    }
    out = cmp.strip_reply_shaping(params)
    assert "stop_sequences" not in out and "tool_choice" not in out
    assert out["output_config"] == {"effort": "low"}
    assert cmp.strip_reply_shaping({"tool_choice": {"type": "auto"}, "output_config": {"format": {}}}) == {
        "tool_choice": {"type": "auto"}
    }


def test_contract_keeps_terms_and_forbids_tools() -> None:
    text = cmp.contract(["INV-1", "doc-7"])
    assert "Do not call tools" in text
    assert "KEEP LINES CONTAINING: INV-1 | doc-7" in text.splitlines()
    for part in ("decisions", "facts with their sources", "constraints", "open questions", "unfinished work"):
        assert part in text


@st.composite
def conversations(draw: Any) -> list[dict[str, Any]]:
    """user/assistant turns; some assistant turns call tools, answered in the next user turn."""
    messages: list[dict[str, Any]] = []
    pending: list[str] = []
    for n in range(draw(st.integers(2, 12))):
        user = [{"type": "tool_result", "tool_use_id": t, "content": "ok"} for t in pending]
        messages.append(
            {"role": "user", "content": [*user, {"type": "text", "text": "u" * draw(st.integers(1, 50))}]}
        )
        pending = [f"toolu_{n}_{k}" for k in range(draw(st.integers(0, 2)))]
        uses = [{"type": "tool_use", "id": t, "name": "f", "input": {}} for t in pending]
        messages.append({"role": "assistant", "content": [{"type": "text", "text": "a"}, *uses]})
    return messages


@settings(max_examples=200, deadline=None)
@given(conversations(), st.integers(0, 200))
def test_a_cut_never_separates_tool_use_from_tool_result(messages: list[dict[str, Any]], keep: int) -> None:
    sizes = [cmp.estimate_tokens(m) for m in messages]
    for cut in cmp.choose_cut(messages, sizes, keep):
        assert messages[cut]["role"] == "user" and cut < len(messages) - 1
        inside, after = messages[: cut + 1], messages[cut + 1 :]
        used_inside = {b["id"] for m in inside for b in m["content"] if b["type"] == "tool_use"}
        answered_after = {b["tool_use_id"] for m in after for b in m["content"] if b["type"] == "tool_result"}
        assert not used_inside & answered_after
        assert after[0]["role"] == "assistant"


def test_the_best_cut_keeps_the_largest_recent_tail_that_fits() -> None:
    messages = [
        {"role": r, "content": [{"type": "text", "text": "x" * 400}]} for r in ["user", "assistant"] * 5
    ]
    sizes = [100] * 10
    assert cmp.choose_cut(messages, sizes, keep_tokens=300)[0] == 6  # tail: 7, 8, 9
    assert cmp.choose_cut(messages, sizes, keep_tokens=0)[0] == 8  # tail: the last reply only


BLOCK = {"type": "compaction", "content": "Summary", "signature": "sig", "encrypted_content": None}


def test_block_checks() -> None:
    digest = cmp.block_digest(BLOCK)
    good: list[dict[str, Any]] = [
        {"role": "assistant", "content": [dict(BLOCK)]},
        {"role": "user", "content": "next"},
    ]
    cmp.check_block(good, digest)
    with pytest.raises(cmp.BlockTampered):
        cmp.check_block([{"role": "assistant", "content": [{**BLOCK, "content": "Summary!"}]}], digest)
    with pytest.raises(cmp.BlockTampered):
        cmp.check_block([{"role": "assistant", "content": [{**BLOCK, "signature": "forged"}]}], digest)
    with pytest.raises(cmp.BlockMisplaced):
        cmp.check_block([{"role": "user", "content": "first"}, *good], digest)
    with pytest.raises(cmp.BlockMisplaced):
        cmp.check_block(
            [{"role": "assistant", "content": [{"type": "text", "text": "x"}, dict(BLOCK)]}], digest
        )
    with pytest.raises(cmp.BlockMisplaced):
        cmp.check_block(good, None)  # a block this task never received


def _beta(content: list[dict[str, Any]], stop_reason: str) -> BetaMessage:
    return BetaMessage.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-6",
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {
                "input_tokens": 0,
                "output_tokens": 0,
                "iterations": [
                    {
                        "type": "compaction",
                        "input_tokens": 50,
                        "output_tokens": 5,
                        "cache_creation_input_tokens": 0,
                        "cache_read_input_tokens": 0,
                    }
                ],
            },
        }
    )


@pytest.mark.parametrize(
    ("content", "stop_reason"),
    [([{**BLOCK, "content": None}], "compaction"), ([dict(BLOCK)], "end_turn"), ([], "compaction")],
)
def test_a_null_or_unexpected_block_falls_back_to_a_client_summary(
    content: list[dict[str, Any]], stop_reason: str
) -> None:
    calls: list[dict[str, Any]] = []

    def create(betas: list[str] | None, **body: Any) -> Any:
        calls.append({"betas": betas, **body})
        if "compaction" in body:
            return _beta(content, stop_reason)
        return Message.model_validate(
            {
                "id": "msg_2",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-6",
                "content": [{"type": "text", "text": "FACT: kept"}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 9, "output_tokens": 3},
            }
        )

    params = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any"},
    }
    done = cmp.compact(create, params, cmp.contract(["x"]))
    assert done.strategy is cmp.Strategy.CLIENT and done.digest is None
    assert [u["iterations"][0]["input_tokens"] for _m, u, _r in done.billed_before] == [50]
    assert done.head["content"][0]["text"] == f"{cmp.CLIENT_SUMMARY_MARK}\nFACT: kept"
    assert calls[0]["betas"] == [cmp.COMPACTION_BETA] and "tool_choice" not in calls[0]
    assert calls[1]["betas"] is None and calls[1]["tool_choice"] == {"type": "none"}
    assert "KEEP LINES CONTAINING: x" in calls[1]["messages"][-1]["content"][0]["text"]


def test_an_api_block_is_kept_exactly() -> None:
    def create(betas: list[str] | None, **body: Any) -> Any:
        return _beta([dict(BLOCK)], "compaction")

    done = cmp.compact(create, {"model": "m", "max_tokens": 5, "messages": []}, "c")
    assert done.head == {"role": "assistant", "content": [BLOCK]}
    assert done.digest == cmp.block_digest(BLOCK)
    assert done.usage["iterations"][0]["input_tokens"] == 50


def expand_ids(runs: Iterable[str]) -> list[str]:
    """`compress_ids` undone: every id a run `doc-0001..doc-0042` stands for."""
    numbered = re.compile(r"^(.*?)(\d+)$")
    out: list[str] = []
    for run in runs:
        first, sep, last = run.partition("..")
        a, b = numbered.match(first), numbered.match(last) if sep else None
        if not sep or not a or not b:
            out.append(run)
            continue
        width = len(a.group(2))
        out.extend(f"{a.group(1)}{n:0{width}d}" for n in range(int(a.group(2)), int(b.group(2)) + 1))
    return out


@given(
    st.sets(
        st.one_of(
            st.integers(0, 3000).map(lambda n: f"doc-{n:04d}"),
            st.integers(0, 50).map(lambda n: f"x{n}"),
            st.text("abc-", min_size=1, max_size=5),
        )
    )
)
def test_id_runs_are_lossless(ids: set[str]) -> None:
    assert sorted(expand_ids(compress_ids(ids))) == sorted(ids)


def test_id_runs_compress_consecutive_ids() -> None:
    ids = [f"doc-{n:05d}" for n in range(1, 5001) if n != 997]
    assert compress_ids(ids) == ["doc-00001..doc-00996", "doc-00998..doc-05000"]


def test_pinned_facts_render_verify_and_round_trip() -> None:
    p = PinnedFacts()
    p.set("a", "CONFLICT INV-1 field=total: 1 (doc-1) | 2 (doc-2)", terms=["INV-1"])
    p.set("b", "ENTITY vendor=ACME: 2 documents")
    p.set("a", "CONFLICT INV-1 field=total: 1 (doc-1) | 2 (doc-2) | 3 (doc-3)", terms=["INV-1"])
    text = p.render()
    assert p.missing_from(text) == []
    assert p.missing_from(text.replace("| 3 (doc-3)", "")) == [p.lines()[0]]
    assert PinnedFacts.from_json(p.to_json()).render() == text
    assert p.keep_terms() == ["INV-1"]
    with pytest.raises(ValueError):
        p.set("c", "two\nlines")

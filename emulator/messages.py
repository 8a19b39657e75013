"""One Messages request, start to finish: validate, answer (model or compaction), shape faults,
cut at max_tokens / stop sequences, price usage (tokens + cache), bill. Shared by
`POST /v1/messages` and every batch item, so both behave and bill the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from emulator import compaction, model, model_rules, tokens
from emulator.caching import CacheUsage
from emulator.faults import SHAPERS, FaultRule

if TYPE_CHECKING:
    from emulator.state import EmulatorState


@dataclass
class Answer:
    message: dict[str, Any]
    output_tokens: int  # generated (a compaction's summary included), for rate limits and pacing


def cut_to_max_tokens(content: list[dict[str, Any]], max_tokens: int) -> tuple[list[dict[str, Any]], bool]:
    """Content that fits in `max_tokens` output tokens, and whether anything was cut."""
    if tokens.output_tokens(content) <= max_tokens:
        return content, False
    budget_chars = max_tokens * 4
    out: list[dict[str, Any]] = []
    for block in content:
        if budget_chars <= 0:
            break
        if block.get("type") == "text":
            text = block["text"][:budget_chars]
            budget_chars -= len(text)
            out.append({**block, "text": text})
        elif block.get("type") == "tool_use":
            out.append({**block, "input": {}})
            budget_chars = 0
        else:
            out.append(block)
            budget_chars -= tokens.block_tokens(block) * 4
    return out, True


def apply_stop_sequences(
    content: list[dict[str, Any]], stops: Any
) -> tuple[list[dict[str, Any]], str | None]:
    if not stops:
        return content, None
    out: list[dict[str, Any]] = []
    for block in content:
        if block.get("type") == "text":
            hits = [
                (block["text"].find(s), s) for s in stops if isinstance(s, str) and s and s in block["text"]
            ]
            if hits:
                pos, seq = min(hits)
                out.append({**block, "text": block["text"][:pos]})
                return out, seq
        out.append(block)
    return content, None


def cache_read_tokens(state: EmulatorState, body: Mapping[str, Any], api_key: str) -> int:
    """The tokens a request would read from the prompt cache now (nothing recorded or refreshed)."""
    if "compaction" in body:
        return 0
    return _cache(state, body, api_key, tokens.segments(body), dry_run=True).read


def _cache(
    state: EmulatorState,
    body: Mapping[str, Any],
    api_key: str,
    segs: list[tokens.Segment],
    *,
    dry_run: bool = False,
) -> CacheUsage:
    """The prompt cache's answer for a request's segments (`dry_run`: nothing recorded or refreshed)."""
    model_name = str(body["model"])
    return state.cache.apply(
        scope=api_key,
        model=model_name,
        segments=segs,
        total_tokens=tokens.total(segs),
        top_level=body.get("cache_control"),
        now=state.clock.now(),
        min_tokens=state.config.min_cache_tokens(model_name),
        counts_schema=state.config.cache_counts_output_schema,
        dry_run=dry_run,
    )


def answer(
    state: EmulatorState,
    body: Mapping[str, Any],
    *,
    request_id: str | None,
    api_key: str,
    batch: bool = False,
    shape: FaultRule | None = None,
    path: str = "/v1/messages",
    custom_id: str | None = None,
    batch_id: str | None = None,
) -> Answer:
    """Build the Message for a body the caller has validated (`EmulatorState.validate`) and bill it.
    Raises `ApiError` on a compaction block or request the API refuses."""
    secret = state.config.compaction_secret
    compaction.check_blocks(secret, body)
    model_name = str(body["model"])
    segs = tokens.segments(body)
    input_total = tokens.total(segs)
    stop_details: dict[str, Any] | None = None
    stop_sequence: str | None = None
    if "compaction" in body:
        content, summary = compaction.compaction_content(secret, body)
        stop_reason = "compaction"
        out_tokens = tokens.text_tokens(summary)
        iteration = {
            "type": "compaction",
            "input_tokens": input_total,
            "output_tokens": out_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        usage: dict[str, Any] = {**CacheUsage().usage_fields(), "output_tokens": 0, "iterations": [iteration]}
    else:
        result = model.respond(compaction.expand_for_model(body))
        content = [dict(b) for b in result["content"]]
        stop_reason = str(result.get("stop_reason") or "end_turn")
        if shape is not None:
            content, stop_reason, stop_details = SHAPERS[shape.kind](content, stop_reason)
        content, stop_sequence = apply_stop_sequences(content, body.get("stop_sequences"))
        if stop_sequence is not None:
            stop_reason = "stop_sequence"
        cfg = state.config
        thought = (
            model_rules.thinking_tokens(body, cfg.thinking_tokens_by_effort) if cfg.model_thinking else 0
        )
        thought = min(thought, int(body["max_tokens"]))  # before the text, in max_tokens
        content, cut = cut_to_max_tokens(content, int(body["max_tokens"]) - thought)
        if cut:
            stop_reason = "max_tokens"
        out_tokens = tokens.output_tokens(content) + thought
        if thought:
            content = [model_rules.thinking_block(body), *content]
        usage = {**_cache(state, body, api_key, segs).usage_fields(), "output_tokens": out_tokens}
        if thought:
            usage["output_tokens_details"] = {"thinking_tokens": thought}
    tier = "batch" if batch else "standard"
    usage |= {"server_tool_use": None, "service_tier": tier, "inference_geo": None, "speed": None}
    usage["output_tokens_details"] = usage.get("output_tokens_details")  # last unless thinking set it
    message = {
        "id": state.new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": state.answer_model(model_name),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "stop_details": stop_details,
        "container": None,
        "usage": usage,
    }
    state.accounting.bill(
        path=path,
        body=body,
        model=model_name,
        usage=usage,
        request_id=request_id,
        batch=batch,
        custom_id=custom_id,
        batch_id=batch_id,
        at=state.clock.now(),
        price=state.price_for(model_name),
    )
    return Answer(message, out_tokens)


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def sse_events(message: Mapping[str, Any], *, fail: bool = False) -> Iterator[bytes]:
    """A finished Message as the SSE event sequence the SDK's stream accumulator expects.

    `fail` sends an `overloaded_error` event after the first content block starts (the SDK
    raises `APIStatusError` with status 200 and does not retry).
    """
    usage = dict(message["usage"])
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None, "stop_details": None}
    start["usage"] = {**usage, "output_tokens": 1 if usage.get("output_tokens") else 0}
    yield _sse("message_start", {"type": "message_start", "message": start})
    for i, block in enumerate(message["content"]):
        kind = block.get("type")
        head, deltas = block, []  # the block as it starts, then its deltas
        if kind == "text":
            head, text = {"type": "text", "text": ""}, block["text"]
            deltas = [
                {"type": "text_delta", "text": text[k : k + 64]} for k in range(0, max(len(text), 1), 64)
            ]
        elif kind == "tool_use":
            head = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block.get("input", {}))}]
        elif kind == "thinking":
            head = {**block, "thinking": "", "signature": ""}
            deltas = [{"type": "signature_delta", "signature": block.get("signature", "")}]
        elif kind == "compaction":
            head = {**block, "content": None}
            deltas = [
                {"type": "compaction_delta", "content": block.get("content"), "encrypted_content": None}
            ]
        yield _sse("content_block_start", {"type": "content_block_start", "index": i, "content_block": head})
        if i == 0 and kind == "text":
            yield _sse("ping", {"type": "ping"})
        for delta in deltas:
            yield _sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta})
        if fail:
            break
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": i})
    if fail:
        error = {"type": "overloaded_error", "message": "Overloaded", "details": None}
        yield _sse("error", {"type": "error", "error": error})
        return
    delta = {
        "stop_reason": message["stop_reason"],
        "stop_sequence": message["stop_sequence"],
        "stop_details": message.get("stop_details"),
    }
    final_usage = {
        k: usage.get(k)
        for k in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    }
    if usage.get("iterations"):
        final_usage["iterations"] = usage["iterations"]
    yield _sse("message_delta", {"type": "message_delta", "delta": delta, "usage": final_usage})
    yield _sse("message_stop", {"type": "message_stop"})

"""Compaction of a long task's history: which range, which contract, which call, which checks.

Two ways to shrink a history, tried in order (`compact`):

- `api`: on-demand compaction (beta `compact-2026-09-04`). The API answers with one signed
  `compaction` block and `stop_reason: "compaction"`; the block goes first in later requests,
  unaltered, as `{"role": "assistant", "content": [block]}`.
- `client`: when compaction is unavailable (529 `compaction_unavailable` after the transport
  retries, or a block with null content), a plain Messages call with the same contract; its text
  goes first as a user block clearly marked `[docmill client-side summary]`.

The summarized range always ends on a user turn, so it never separates a `tool_use` from its
`tool_result` (both sit inside the range or both after it) and the compaction request never ends
on an unfinished assistant turn. Reply-shaping parameters are stripped from compaction calls.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from checkpoints.store import dumps_json
from docmill.errors import ContextError
from docmill.sdk import anthropic
from tasks.api.answers import message_text
from tasks.api.usage import as_json

COMPACTION_BETA = "compact-2026-09-04"
CLIENT_SUMMARY_MARK = "[docmill client-side summary]"
KEEP_DIRECTIVE = "KEEP LINES CONTAINING:"
BLOCK_FIELDS = ("type", "content", "signature", "encrypted_content")

CONTRACT = """\
You are compacting the history of a long document-processing task. Write a summary that a
continuation of this task can rely on. Preserve, exactly as written:
- decisions taken and the reason for each (write them as lines starting with "DECISION:");
- facts with their sources: ids, amounts, dates, names, each with the document id it came from
  (write them as lines starting with "FACT:");
- constraints that are still binding (formats, rules, limits the user set);
- open questions that are not answered yet;
- unfinished work: what was in progress and what remains to do.
Drop pleasantries, repeated raw data already reflected in facts, and superseded drafts.
Do not call tools. Do not invent facts. Quote numbers and ids verbatim."""


class Strategy(StrEnum):
    API = "api"
    CLIENT = "client"


class CompactionUnavailable(ContextError):
    """The API could not compact (529 compaction_unavailable after retries, or a null block)."""

    billed: tuple[str, dict[str, Any], str | None] | None = None  # (model, usage, request id) if paid


class BlockTampered(ContextError):
    """A compaction block differs from the one the API returned; it is never sent."""


class BlockMisplaced(ContextError):
    """A compaction block is not the first block of the conversation; it is never sent."""


def contract(terms: list[str]) -> str:
    """The preservation contract, plus the exact terms whose lines must survive verbatim."""
    text = CONTRACT
    if terms:
        text += "\nKeep verbatim every line that mentions one of the terms below.\n"
        text += KEEP_DIRECTIVE + " " + " | ".join(terms)
    return text


def strip_reply_shaping(params: Mapping[str, Any]) -> dict[str, Any]:
    """Params without what shapes a reply: output_config.format, forced tool_choice, stop_sequences."""
    out = {k: v for k, v in params.items() if k not in ("stop_sequences", "context_management", "stream")}
    config = out.get("output_config")
    if isinstance(config, Mapping):
        rest = {k: v for k, v in config.items() if k != "format"}
        if rest:
            out["output_config"] = rest
        else:
            out.pop("output_config")
    choice = out.get("tool_choice")
    if isinstance(choice, Mapping) and choice.get("type") in ("any", "tool"):
        out.pop("tool_choice")
    return out


canonical = dumps_json  # sorted keys, no spaces, UTF-8


def block_digest(block: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical(dict(block))).hexdigest()


def compaction_blocks(messages: list[dict[str, Any]]) -> list[tuple[int, int, Mapping[str, Any]]]:
    found = []
    for i, msg in enumerate(messages):
        content = msg.get("content")
        if isinstance(content, list):
            for j, block in enumerate(content):
                if isinstance(block, Mapping) and block.get("type") == "compaction":
                    found.append((i, j, block))
    return found


def check_block(messages: list[dict[str, Any]], expected_digest: str | None) -> None:
    """Refuse to send a conversation whose compaction block is altered, duplicated or moved."""
    found = compaction_blocks(messages)
    if expected_digest is None:
        if found:
            raise BlockMisplaced(
                "a compaction block appears in a conversation that was never compacted by the API",
                hint="only send blocks the API returned for this task",
            )
        return
    if len(found) != 1:
        raise BlockMisplaced(
            f"expected exactly one compaction block, found {len(found)}",
            hint="send only the most recent compaction block, first in the conversation",
        )
    i, j, block = found[0]
    if (i, j) != (0, 0) or messages[0].get("role") != "assistant":
        raise BlockMisplaced(
            f"the compaction block sits at messages[{i}].content[{j}], not first",
            hint="the block goes first: messages[0] = {'role': 'assistant', 'content': [block]}",
        )
    if block_digest(block) != expected_digest:
        raise BlockTampered(
            "the compaction block was modified after the API returned it",
            hint="resume from the last checkpoint; never edit a compaction block",
        )


def choose_cut(messages: list[dict[str, Any]], sizes: list[int], keep_tokens: int) -> list[int]:
    """Candidate last indexes of the summarized range, best first.

    A candidate is a user turn that is not the first message and leaves at least one message
    after it. The best one keeps the largest recent tail that fits in `keep_tokens`; earlier
    candidates (bigger tails, smaller ranges) follow in case the range itself is too large.
    """
    users = [i for i, m in enumerate(messages) if m.get("role") == "user" and 0 < i < len(messages) - 1]
    if messages and messages[0].get("role") == "user" and len(messages) > 1:
        users.insert(0, 0)
    if not users:
        return []
    tails = {i: sum(sizes[i + 1 :]) for i in users}
    fitting = [i for i in users if tails[i] <= keep_tokens]
    best = fitting[0] if fitting else users[-1]
    return [best] + [i for i in reversed(users) if i < best]


def estimate_tokens(message: Mapping[str, Any]) -> int:
    """Cheap local size of one message, only used to pick a cut (the budget uses count_tokens)."""
    return len(canonical(dict(message))) // 4 + 8


@dataclass
class Compacted:
    """What a compaction produced: the new head message and what it cost."""

    strategy: Strategy
    head: dict[str, Any]
    digest: str | None
    model: str
    usage: dict[str, Any]
    request_id: str | None
    notes: list[str] = field(default_factory=list)
    billed_before: list[tuple[str, dict[str, Any], str | None]] = field(default_factory=list)
    """(model, usage, request_id) of billed calls that gave no usable result (a null block)."""


def _billed(
    body: Mapping[str, Any], data: dict[str, Any], message: Any
) -> tuple[str, dict[str, Any], str | None]:
    """(model, usage, request id) of an answer, priced by the model asked for."""
    return (
        str(body.get("model") or data.get("model")),
        data.get("usage") or {},
        getattr(message, "_request_id", None),
    )


Create = Callable[..., Any]
"""`create(betas, **body)`: one Messages call (beta namespace when `betas`), transport retries inside."""


def compact_api(create: Create, params: Mapping[str, Any], instructions: str) -> Compacted:
    """On-demand compaction of `params["messages"]`; raises `CompactionUnavailable` to fall back."""
    body = strip_reply_shaping(params)
    try:
        message = create(
            [COMPACTION_BETA], compaction={"type": "summarize", "instructions": instructions}, **body
        )
    except anthropic.APIStatusError as e:
        if e.status_code == 529 and getattr(e, "error_code", None) == "compaction_unavailable":
            raise CompactionUnavailable("compaction_unavailable after the transport retries") from e
        raise
    data = as_json(message)
    blocks = [b for b in data.get("content") or [] if b.get("type") == "compaction"]
    if data.get("stop_reason") != "compaction" or len(blocks) != 1 or not blocks[0].get("content"):
        raise CompactionUnavailable(
            f"no usable compaction block (stop_reason={data.get('stop_reason')!r}, blocks={len(blocks)})",
            billed=_billed(body, data, message),
        )
    raw = blocks[0]
    block = {k: raw.get(k) for k in BLOCK_FIELDS}
    if raw.get("tool_changes") is not None:
        block["tool_changes"] = raw["tool_changes"]
    head = {"role": "assistant", "content": [block]}
    return Compacted(Strategy.API, head, block_digest(block), *_billed(body, data, message))


def compact_client(create: Create, params: Mapping[str, Any], instructions: str) -> Compacted:
    """Fallback: a plain Messages call summarizes the range; the text is marked as ours."""
    body = strip_reply_shaping(params)
    if body.get("tools"):
        body["tool_choice"] = {"type": "none"}
    summarize = "Summarize the conversation above for its continuation.\n" + instructions
    ask = {"role": "user", "content": [{"type": "text", "text": summarize}]}
    body["messages"] = [*body["messages"], ask]
    message = create([COMPACTION_BETA] if compaction_blocks(body["messages"]) else None, **body)
    data = as_json(message)
    text = message_text(data).strip()
    if not text:
        raise ContextError(
            "the client-side summary came back empty", hint="raise budget_tokens or retry later"
        )
    head = {"role": "user", "content": [{"type": "text", "text": f"{CLIENT_SUMMARY_MARK}\n{text}"}]}
    return Compacted(Strategy.CLIENT, head, None, *_billed(body, data, message))


def compact(create: Create, params: Mapping[str, Any], instructions: str) -> Compacted:
    """Compact with the API; on `CompactionUnavailable`, with a client-side summary (its notes say
    why, its `billed_before` what the API's attempt cost)."""
    try:
        return compact_api(create, params, instructions)
    except CompactionUnavailable as e:
        done = compact_client(create, params, instructions)
        done.notes = [f"{Strategy.API}: {e.message}"]
        done.billed_before = [e.billed] if e.billed else []
        return done

"""On-demand compaction (beta `compact-2026-09-04`, reference §6).

A compaction request (body field `compaction`) answers with one `compaction` block whose
`signature` = base64(content digest || HMAC(secret, content digest || encrypted_content ||
tool_changes)). Later requests must send that block back first and unaltered; `check_blocks`
tells a forged signature (`compaction_signature_invalid`) from edited content
(`compaction_content_mismatch`), and checks placement (`compaction_block_misplaced`,
`compaction_block_ambiguous`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable, Mapping
from typing import Any

from emulator.summary import summarize
from emulator.validation import invalid

SIG_PREFIX = "EmuCmp1."


def _digest(content: str) -> bytes:
    return hashlib.sha256(content.encode()).digest()


def _mac(secret: str, digest: bytes, encrypted: Any, tool_changes: Any) -> bytes:
    extra = json.dumps([encrypted, tool_changes], sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(secret.encode(), digest + b"\x00" + extra, hashlib.sha256).digest()


def sign(secret: str, content: str, encrypted_content: Any = None, tool_changes: Any = None) -> str:
    digest = _digest(content)
    raw = digest + _mac(secret, digest, encrypted_content, tool_changes)
    return SIG_PREFIX + base64.urlsafe_b64encode(raw).decode()


def verify(secret: str, block: Mapping[str, Any], where: str) -> None:
    content = block.get("content")
    if content is None:
        return  # a failed compaction round-trips as a no-op
    if content == "":
        raise invalid(f"{where}.content: String should have at least 1 character")
    signature = block.get("signature")
    forged = invalid(
        f"{where}.signature: the compaction signature does not verify",
        error_code="compaction_signature_invalid",
    )
    try:
        if not isinstance(signature, str) or not signature.startswith(SIG_PREFIX):
            raise ValueError
        raw = base64.urlsafe_b64decode(signature[len(SIG_PREFIX) :].encode())
        if len(raw) != 64:
            raise ValueError
    except ValueError:  # binascii.Error included
        raise forged from None
    digest, mac = raw[:32], raw[32:]
    expected = _mac(secret, digest, block.get("encrypted_content"), block.get("tool_changes"))
    if not hmac.compare_digest(mac, expected):
        if hmac.compare_digest(mac, _mac(secret, digest, block.get("encrypted_content"), None)):
            raise invalid(
                f"{where}.tool_changes: tool_changes differ from the compacted range",
                error_code="compaction_tool_changes_mismatch",
            )
        raise forged
    if not hmac.compare_digest(digest, _digest(str(content))):
        raise invalid(
            f"{where}.content: the compaction content was modified; send the block back unchanged",
            error_code="compaction_content_mismatch",
        )


def _is_compaction(block: Any) -> bool:
    return isinstance(block, Mapping) and block.get("type") == "compaction"


def check_blocks(secret: str, body: Mapping[str, Any]) -> None:
    """Placement and integrity of compaction blocks in a request's messages."""
    found: list[tuple[int, int, Mapping[str, Any], str]] = []
    for i, msg in enumerate(body.get("messages") or []):
        content = msg.get("content")
        if not isinstance(content, list):
            continue
        for j, block in enumerate(content):
            if _is_compaction(block):
                found.append((i, j, block, str(msg.get("role"))))
    if not found:
        return
    with_content = [f for f in found if f[2].get("content") is not None]
    if len(with_content) > 1:
        raise invalid(
            "messages: more than one compaction block with content; send only the most recent one",
            error_code="compaction_block_ambiguous",
        )
    for i, j, block, role in found:
        where = f"messages.{i}.content.{j}"
        if (block.get("content") is not None and (i, j) != (0, 0)) or role == "system":
            raise invalid(
                f"{where}: a compaction block must be the first block of the conversation",
                error_code="compaction_block_misplaced",
            )
        verify(secret, block, where)


def expand_for_model(body: Mapping[str, Any]) -> dict[str, Any]:
    """The body with compaction blocks turned into plain text (dropped if empty), for the model."""
    messages = []
    for msg in body.get("messages") or []:
        content = msg.get("content")
        if isinstance(content, list) and any(_is_compaction(b) for b in content):
            kept = [b for b in content if not _is_compaction(b) or b.get("content")]
            blocks = [{"type": "text", "text": str(b["content"])} if _is_compaction(b) else b for b in kept]
            if not blocks:
                continue
            msg = {**msg, "content": blocks}
        messages.append(msg)
    return {**body, "messages": messages}


REPLY_SHAPING: dict[str, Callable[[Mapping[str, Any]], bool]] = {
    "output_config.format": lambda b: bool((b.get("output_config") or {}).get("format")),
    "tool_choice": lambda b: (b.get("tool_choice") or {}).get("type") in ("any", "tool"),
    "stop_sequences": lambda b: bool(b.get("stop_sequences")),
}


def check_compaction_request(body: Mapping[str, Any]) -> None:
    messages = body.get("messages") or []
    if not any(m.get("content") for m in messages if m.get("role") in ("user", "assistant")):
        raise invalid("messages: there is nothing to summarize", error_code="compaction_nothing_to_summarize")
    if "context_management" in body:
        raise invalid("compaction: cannot be combined with context_management")
    for name, shaped in REPLY_SHAPING.items():
        if shaped(body):
            raise invalid(
                f"{name}: not allowed in a compaction request (nothing is sampled after the summary)"
            )
    last = messages[-1]
    if last.get("role") == "assistant":
        content = last.get("content")
        if not (isinstance(content, list) and all(_is_compaction(b) for b in content)):
            raise invalid(
                "messages: the conversation ends on an unfinished assistant turn",
                error_code="compaction_incomplete_turn",
            )


def compaction_content(secret: str, body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """(content blocks, summary) for a compaction request."""
    check_compaction_request(body)
    instructions = (body.get("compaction") or {}).get("instructions")
    if isinstance(instructions, str) and not instructions.strip():
        instructions = None
    expanded = expand_for_model(body)
    summary = summarize(list(expanded.get("messages") or []), instructions) or "(empty conversation)"
    block = {
        "type": "compaction",
        "content": summary,
        "signature": sign(secret, summary),
        "encrypted_content": None,
    }
    return [block], summary

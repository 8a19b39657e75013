"""The emulator's deterministic, grounded "model": its two public entry points.

`respond(body)` answers a Messages API request body with content blocks and a stop reason:
schema-valid JSON for `output_config.format` (filled by `emulator.schema_fill`), a `tool_use`
block for a forced tool, else a short text. Values come from the documents in the request (read
by `emulator.grounding`); evidence strings are always verbatim lines of a document.
`summarize(messages, instructions)` is the compaction summary (`emulator.summary`). Both are pure:
the same input gives the same output.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from emulator.grounding import Prompt, block_text, read_prompt
from emulator.schema_fill import Filler
from emulator.summary import summarize

__all__ = ["respond", "summarize"]


def respond(body: dict[str, Any]) -> dict[str, Any]:
    """Content blocks and stop_reason for a Messages API request body (a dict as sent on the wire)."""
    prompt = read_prompt(body)
    fmt = (body.get("output_config") or {}).get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"), dict):
        value = Filler(prompt, fmt["schema"]).fill()
        text = json.dumps(value, ensure_ascii=False)
        return {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}
    tool = _forced_tool(body)
    if tool is not None:
        schema = tool.get("input_schema") or {"type": "object", "properties": {}}
        tool_input = Filler(prompt, schema).fill()
        block = {
            "type": "tool_use",
            "id": "toolu_" + _digest(body)[:24],
            "name": tool["name"],
            "input": tool_input,
        }
        return {"content": [block], "stop_reason": "tool_use"}
    return {"content": [{"type": "text", "text": _text_answer(body, prompt)}], "stop_reason": "end_turn"}


def _forced_tool(body: dict[str, Any]) -> dict[str, Any] | None:
    choice = body.get("tool_choice") or {}
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("name")]
    if not tools or not isinstance(choice, dict):
        return None
    if choice.get("type") == "tool":
        return next((t for t in tools if t["name"] == choice.get("name")), None)
    if choice.get("type") == "any":
        return tools[0]
    return None


def _digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def _text_answer(body: dict[str, Any], prompt: Prompt) -> str:
    last = ""
    for message in body.get("messages") or []:
        if message.get("role") == "user":
            last = " ".join(block_text(message.get("content", "")))
    words = last.split()
    head = " ".join(words[:12]) + (" ..." if len(words) > 12 else "")
    docs = ", ".join(d.doc_id for d in prompt.docs if d.doc_id) or "none"
    return f"Emulated answer ({_digest(body)[:8]}): read {len(words)} words; documents: {docs}. Re: {head}"

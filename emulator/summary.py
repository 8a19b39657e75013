"""The compaction summary the emulator writes when a conversation is compacted."""

from __future__ import annotations

from typing import Any

from emulator.grounding import block_text

SUMMARY_HEADER = "Summary of earlier conversation"
KEEP_DIRECTIVE = "KEEP LINES CONTAINING:"
ALWAYS_KEEP = ("FACT:", "DECISION:")
MAX_LINES = 400
MAX_CHARS = 40_000


def summarize(messages: list[dict[str, Any]], instructions: str | None) -> str:
    """A compaction summary that honours `instructions` in a checkable way.

    Rule: if `instructions` contains a line `KEEP LINES CONTAINING: term1 | term2 | ...`, every line
    of the conversation text containing one of those terms (case-sensitive substring) is kept
    verbatim, in order. Lines starting with `FACT:` or `DECISION:` (after leading spaces) are always
    kept. Without that directive, the first non-empty line of each message is kept instead. All other
    lines are dropped and counted in one line `[dropped N other lines]`. The result starts with
    `Summary of earlier conversation`, and is capped at 400 kept lines / 40,000 characters, keeping
    the newest lines when capping (the count of lines cut is reported as well).
    """
    terms = _keep_terms(instructions)
    kept: list[str] = []
    dropped = 0
    for message in messages:
        first = True
        for raw in "\n".join(block_text(message.get("content", ""))).split("\n"):
            line = raw.rstrip()
            if not line.strip():
                continue
            keep = line.lstrip().startswith(ALWAYS_KEEP)
            keep = keep or any(term in line for term in terms) if terms is not None else keep or first
            first = False
            if keep:
                kept.append(line)
            else:
                dropped += 1
    cut = 0
    while kept and (len(kept) > MAX_LINES or sum(len(x) + 1 for x in kept) > MAX_CHARS):
        kept.pop(0)
        cut += 1
    tail = [f"[dropped {dropped} other lines]"]
    if cut:
        tail.append(f"[cut {cut} older kept lines to fit]")
    return "\n".join([f"{SUMMARY_HEADER} ({len(messages)} messages):", *kept, *tail])


def _keep_terms(instructions: str | None) -> list[str] | None:
    if not instructions or not instructions.strip():
        return None
    for line in instructions.splitlines():
        _head, sep, tail = line.partition(KEEP_DIRECTIVE)
        if sep:
            return [t.strip() for t in tail.split("|") if t.strip()]
    return None

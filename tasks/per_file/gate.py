"""The code gate after every model answer, and the repair policy that follows it.

`check()` turns one Message (as a dict) into a `Verdict`: parsed JSON, pydantic validation
against the recipe's file schema, and evidence: every excerpt must occur in the document after
whitespace normalization (it was not invented), and every `{value, evidence}` excerpt must contain
its value in a normalised form (it is about the field: tasks.per_file.support); an accepted answer
keeps each excerpt's character offsets. `decide()` is the one repair policy, shared by the realtime and
the batch pass: given a verdict and what was tried so far, accept, repair (re-ask with the errors,
own attempt and token budget — the validation retry layer of invariant 6), retry once with a larger
`max_tokens` after truncation, or send the document to review with a reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from tasks.per_file.requests import neutralize, repair_request, with_max_tokens
from tasks.per_file.support import support_flags

if TYPE_CHECKING:
    from docmill.settings import Settings
    from tasks.recipes import Recipe


class Problem(StrEnum):
    """What is wrong with an answer; the value is the review reason."""

    NONE = "none"
    REFUSAL = "refusal"
    TRUNCATED = "truncated"
    CONTEXT_EXCEEDED = "context_window_exceeded"
    INVALID = "validation_failed"
    EVIDENCE = "evidence_not_found"
    UNSUPPORTED = "evidence_unsupported"  # the excerpt occurs, but does not contain the value


@dataclass
class Verdict:
    ok: bool
    problem: Problem
    output: dict[str, Any] | None = None
    errors: list[str] = field(default_factory=list)
    flags: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None
    raw_text: str = ""
    offsets: dict[str, dict[str, int]] = field(default_factory=dict)  # evidence path -> {start, end}


_WS = re.compile(r"\s+")


def normalize_ws(text: str) -> str:
    """Collapse every run of whitespace to one space and strip the ends."""
    return _WS.sub(" ", text).strip()


def message_text(message: dict[str, Any]) -> str:
    """The concatenated text blocks of a Message dict."""
    parts = [b.get("text") or "" for b in message.get("content") or [] if b.get("type") == "text"]
    return "".join(parts)


def _parse(raw: str) -> tuple[dict[str, Any] | None, str | None]:
    text = raw.strip()
    if not text:
        return None, "the answer contains no JSON text"
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:  # an answer nested past the recursion limit too
        return None, f"the answer is not valid JSON: {str(e)[:200]}"
    if not isinstance(data, dict):
        return None, f"the answer is JSON {type(data).__name__}, expected an object"
    return data, None


def _validation_errors(e: ValidationError) -> list[str]:
    out = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err.get("loc", ())) or "<root>"
        out.append(f"{loc}: {err.get('msg')}")
    return out


def evidence_flags(recipe: Recipe, output: dict[str, Any], document_text: str) -> list[dict[str, Any]]:
    """A flag for every evidence excerpt that does not occur verbatim (whitespace-normalized), and
    for every `{value, evidence}` pair whose excerpt does not contain its value (tasks.per_file.support:
    an excerpt must be in the document, and about the field)."""
    haystacks = (normalize_ws(document_text), normalize_ws(neutralize(document_text)))
    flags = []
    for path, excerpt in recipe.evidence(output):
        needle = normalize_ws(str(excerpt or ""))
        if not needle or not any(needle in h for h in haystacks):
            flags.append({"path": str(path), "excerpt": excerpt, "problem": Problem.EVIDENCE.value})
    missing = {f["path"] for f in flags}
    flags += [f for f in support_flags(output, recipe.evidence_fields or ()) if f["path"] not in missing]
    return flags


def _flag_error(f: dict[str, Any]) -> str:
    if f["problem"] == Problem.UNSUPPORTED.value:
        return (
            f"{f['path']}: evidence excerpt {f['excerpt']!r} does not contain the value {f['value']!r}: "
            "quote the text that states the value"
        )
    return f"{f['path']}: evidence excerpt {f['excerpt']!r} does not occur verbatim in the document"


def evidence_offsets(recipe: Any, output: dict[str, Any], document_text: str) -> dict[str, dict[str, int]]:
    """Where each evidence excerpt sits in the document text: `{path: {"start", "end"}}` (character
    offsets, whitespace runs matched loosely as the gate does); excerpts not found are left out."""
    found: dict[str, dict[str, int]] = {}
    for path, excerpt in recipe.evidence(output):
        words = str(excerpt or "").split()
        if not words:
            continue
        m = re.search(r"\s+".join(map(re.escape, words)), document_text)
        if m:
            found[str(path)] = {"start": m.start(), "end": m.end()}
    return found


_STOP_PROBLEMS = {
    "refusal": Problem.REFUSAL,
    "max_tokens": Problem.TRUNCATED,
    "model_context_window_exceeded": Problem.CONTEXT_EXCEEDED,
}


def check(recipe: Recipe, text: str, message: dict[str, Any]) -> Verdict:
    """Gate one answer for the document `text`."""
    raw = message_text(message)
    stop = message.get("stop_reason")
    data, parse_error = _parse(raw)
    stop_problem = _STOP_PROBLEMS.get(stop or "")
    if stop_problem is not None:
        why = f"stop_reason {stop}" + (f"; {parse_error}" if parse_error else "")
        return Verdict(False, stop_problem, output=data, errors=[why], stop_reason=stop, raw_text=raw)
    if data is None:
        return Verdict(
            False, Problem.INVALID, errors=[parse_error or "no output"], stop_reason=stop, raw_text=raw
        )
    try:
        model = recipe.file_schema.model_validate(data)
    except ValidationError as e:
        errors = _validation_errors(e)
        return Verdict(False, Problem.INVALID, output=data, errors=errors, stop_reason=stop, raw_text=raw)
    output = model.model_dump(mode="json")
    flags = evidence_flags(recipe, output, text)
    if flags:
        errors = [_flag_error(f) for f in flags]
        verbatim = any(f["problem"] == Problem.EVIDENCE.value for f in flags)
        return Verdict(
            False, Problem.EVIDENCE if verbatim else Problem.UNSUPPORTED, output, errors, flags, stop, raw
        )
    offsets = evidence_offsets(recipe, output, text)
    return Verdict(True, Problem.NONE, output, [], [], stop, raw, offsets)


# ---- repair policy -----------------------------------------------------------------------------


class Action(StrEnum):
    ACCEPT = "accept"
    REPAIR = "repair"
    RETRY_LARGER = "retry_larger"
    REVIEW = "needs_review"


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str | None = None
    max_tokens: int | None = None


@dataclass
class Progress:
    """What was tried so far for one document (all attempts, including the first). `note` is the
    one repair-token counter: the realtime pass, its crash recovery (`Attempts.recovered`) and the
    batch results all count through it, so a resumed document spends its repair budget as an
    uninterrupted one does."""

    max_tokens: int
    attempts: int = 0
    repairs: int = 0
    repair_tokens: int = 0
    truncation_retries: int = 0

    def note(self, action: Action | None, usage: dict[str, Any] | None) -> None:
        """Record one answered attempt; `action` is what produced it (None for the first call)."""
        self.attempts += 1
        if action is Action.REPAIR:
            self.repairs += 1
            u = usage or {}
            self.repair_tokens += int(u.get("input_tokens") or 0) + int(u.get("output_tokens") or 0)
            self.repair_tokens += int(u.get("cache_creation_input_tokens") or 0)
            self.repair_tokens += int(u.get("cache_read_input_tokens") or 0)
        elif action is Action.RETRY_LARGER:
            self.truncation_retries += 1


def action_of(purpose: str | None) -> Action | None:
    """The gate action a persisted answer's purpose names (None for a first call)."""
    return Action(purpose) if purpose in (Action.REPAIR.value, Action.RETRY_LARGER.value) else None


def _can_repair(progress: Progress, settings: Settings, next_tokens: int) -> bool:
    gate = settings.gate
    return progress.repairs < gate.repair_attempts and (
        progress.repair_tokens + next_tokens <= gate.repair_token_budget
    )


def _on_none(v: Verdict, p: Progress, s: Any, n: int) -> Decision:
    return Decision(Action.ACCEPT)


def _on_review(v: Verdict, p: Progress, s: Any, n: int) -> Decision:
    return Decision(Action.REVIEW, v.problem.value)


def _on_truncated(v: Verdict, p: Progress, s: Any, n: int) -> Decision:
    larger = s.gate.truncation_max_tokens
    if p.truncation_retries == 0 and larger > p.max_tokens:
        return Decision(Action.RETRY_LARGER, v.problem.value, max_tokens=larger)
    return Decision(Action.REVIEW, v.problem.value)


def _on_repairable(v: Verdict, p: Progress, s: Any, n: int) -> Decision:
    if _can_repair(p, s, n):
        return Decision(Action.REPAIR, v.problem.value)
    return Decision(Action.REVIEW, v.problem.value)


POLICY: dict[Problem, Callable[[Verdict, Progress, Any, int], Decision]] = {
    Problem.NONE: _on_none,
    Problem.REFUSAL: _on_review,
    Problem.CONTEXT_EXCEEDED: _on_review,
    Problem.TRUNCATED: _on_truncated,
    Problem.INVALID: _on_repairable,
    Problem.EVIDENCE: _on_repairable,
    Problem.UNSUPPORTED: _on_repairable,
}


def decide(
    verdict: Verdict, progress: Progress, settings: Settings, *, next_input_tokens: int = 0
) -> Decision:
    """What to do next. `next_input_tokens` estimates a repair request's size against the budget."""
    return POLICY[verdict.problem](verdict, progress, settings, next_input_tokens)


def next_request(decision: Decision, request: dict[str, Any], verdict: Verdict) -> dict[str, Any]:
    """The request that carries out a REPAIR or RETRY_LARGER decision."""
    if decision.action is Action.REPAIR:
        return repair_request(request, verdict.raw_text, verdict.errors)
    if decision.action is Action.RETRY_LARGER and decision.max_tokens:
        return with_max_tokens(request, decision.max_tokens)
    raise ValueError(f"decision {decision.action.value} needs no new request")

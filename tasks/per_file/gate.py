"""The code gate after every model answer, and the repair policy that follows it (invariant 18: the
gate proves what documents state; its accept and refuse rates are measured in bench/gate.py).

`check()` turns one Message (as a dict) into a `Verdict`: parsed JSON, pydantic validation against
the recipe's file schema, and evidence: every excerpt must occur in the document after whitespace
normalization (it was not invented; an accepted answer keeps each excerpt's offsets and page), and
every `{value, evidence}` excerpt must state its value (tasks.per_file.support).

Documents sent as a PDF or an image name the page of each excerpt (`[page N] ...`, stripped from the
stored output). An excerpt found in the text layer is verified, its page taken from where it was
found; one not found is an error, unless the page it names has no text layer (a scan), where no code
can check it: kept `verified: false` with the page the model named (a page that does not exist is an
error). The API's citations would not help: they cannot be combined with structured outputs and
quote only a text layer. settings.gate.unverified_evidence = "review" sends such documents to review.

`decide()` is the one repair policy, realtime and batch: accept, repair (re-ask with the errors, own
attempt and token budget: the validation retry layer of invariant 6), retry once with a larger
`max_tokens` after truncation, or send the document to review with a reason.
"""

from __future__ import annotations

import bisect
import functools
import json
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from tasks.api.answers import message_text
from tasks.api.usage import add_usage
from tasks.per_file.boxes import with_boxes
from tasks.per_file.support import date_paths, support_flags
from tasks.request import Payload, SendAs, neutralize, repair_request, text_payload

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


UNVERIFIED = "evidence_unverified"  # the review reason under settings.gate.unverified_evidence = "review"
PAGE_MARK = re.compile(r"^\s*\[\s*(?:page|p\.?)\s*(\d{1,6})\s*\]\s*", re.IGNORECASE)


@dataclass
class Verdict:
    ok: bool
    problem: Problem
    output: dict[str, Any] | None = None
    errors: list[str] = field(default_factory=list)
    flags: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None
    raw_text: str = ""
    offsets: dict[str, dict[str, Any]] = field(default_factory=dict)  # path -> {start, end, page, verified}
    sent_as: str = "text"
    encoding: str | None = None  # the text was read in this guessed encoding (charset-normalizer)

    @property
    def unverified(self) -> int:
        """Evidence excerpts no code could check (pages without a text layer)."""
        return sum(1 for w in self.offsets.values() if w.get("verified") is False)


_WS = re.compile(r"\s+")
_NON_WS = re.compile(r"\S+")


def normalize_ws(text: str) -> str:
    return _WS.sub(" ", text).strip()


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


def validation_errors(e: ValidationError) -> list[str]:
    """`<path>: <message>` for each error of a schema validation."""
    return [f"{'.'.join(map(str, err.get('loc', ()))) or '<root>'}: {err.get('msg')}" for err in e.errors()]


def split_page(excerpt: str) -> tuple[int | None, str]:
    """(the page a `[page N]` prefix names, the excerpt without it)."""
    m = PAGE_MARK.match(excerpt)
    return (int(m.group(1)), excerpt[m.end() :]) if m else (None, excerpt)


def _judge(payload: Payload, excerpt: str, loose: LooseText) -> dict[str, Any] | str:
    """Where one excerpt sits (`{start, end, page, verified}`), or why it fails the rule."""
    claimed, body = split_page(excerpt)
    needle = normalize_ws(body)
    if not needle:
        return "is empty"
    span = loose.find(needle)
    if span is not None:
        return {"start": span[0], "end": span[1], "page": payload.page_of(span[0]), "verified": True}
    if needle in loose.neutral:  # found only around a neutralized tag: verbatim, no offsets
        return {"start": None, "end": None, "page": None, "verified": True}
    if payload.send is SendAs.TEXT:
        return "does not occur verbatim in the document"
    if claimed is not None and not 1 <= claimed <= max(1, payload.page_count):
        return f"names page {claimed}, but the document sent has {payload.page_count} page(s)"
    if (claimed is None and payload.textless) or claimed in payload.textless:
        page = None if claimed is None else claimed + payload.first_page - 1
        return {"start": None, "end": None, "page": page, "verified": False}
    if claimed:
        return f"does not occur verbatim on page {claimed} (it has a text layer)"
    return "does not occur verbatim in the document's text layer"


def evidence_report(
    recipe: Recipe, output: dict[str, Any], source: str | Payload
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """(flags for excerpts that fail the verbatim rule or do not contain their value, where each other
    excerpt sits by path)."""
    payload = source if isinstance(source, Payload) else text_payload(source)
    loose = LooseText(payload.text)  # the text's whitespace read once for every excerpt
    flags: list[dict[str, Any]] = []
    found: dict[str, dict[str, Any]] = {}
    excerpts = recipe.evidence(output)
    for path, excerpt in excerpts:
        verdict = _judge(payload, str(excerpt or ""), loose)
        if isinstance(verdict, str):
            flags.append(
                {"path": str(path), "excerpt": excerpt, "problem": Problem.EVIDENCE.value, "why": verdict}
            )
        elif verdict["start"] is not None or verdict["verified"] is False:
            found[str(path)] = verdict
    missing = {f["path"] for f in flags}
    marked = any(PAGE_MARK.match(str(excerpt)) for _, excerpt in excerpts)  # else nothing to strip
    dates = date_fields(recipe.file_schema)
    unsupported = support_flags(
        strip_page_marks(recipe, output) if marked else output, recipe.evidence_fields or (), dates
    )
    flags += [f for f in unsupported if f["path"] not in missing]  # in the document, not stating its value
    return flags, found


@functools.lru_cache(maxsize=64)
def date_fields(schema: type[BaseModel]) -> frozenset[str]:
    """The `{value, evidence}` pairs of a file schema that hold a date (support.date_paths), read once
    per schema."""
    return date_paths(schema.model_json_schema())


def strip_page_marks(recipe: Recipe, output: Any) -> Any:
    """The output with `[page N]` prefixes removed from evidence strings (the page is kept in the
    provenance)."""
    names = frozenset(recipe.evidence_fields or ())

    def walk(node: Any, under: bool) -> Any:
        if isinstance(node, dict):
            return {k: walk(v, k in names) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, under) for v in node]
        if under and isinstance(node, str):
            return split_page(node)[1]
        return node

    return walk(output, False)


class LooseText:
    """A text with every whitespace run read as one space: `find` gives the first place in the
    original text where words occur separated by any whitespace (what the pattern
    `word1\\s+word2...` finds first), without compiling a pattern per excerpt (that cost ~0.1 ms
    each, most of the gate's time)."""

    def __init__(self, text: str) -> None:
        self.text = text
        words = [(m.start(), m.end()) for m in _NON_WS.finditer(text)]
        self.orig = [start for start, _ in words]  # where each word starts in the text
        self.at: list[int] = []  # where each word starts in `loose`
        pos = 0
        for start, end in words:
            self.at.append(pos)
            pos += end - start + 1
        self.loose = " ".join(text[start:end] for start, end in words)

    @functools.cached_property
    def neutral(self) -> str:
        """The single-spaced text as the request carried it (tasks.request.neutralize), made only for
        an excerpt `find` does not find: no whitespace is part of a tag, so the order does not matter."""
        return neutralize(self.loose)

    def find(self, needle: str) -> tuple[int, int] | None:
        """(start, end) in the text of the first loose occurrence of `needle` (single-spaced words)."""
        i = self.loose.find(needle)
        if i < 0:
            return None
        first = bisect.bisect_right(self.at, i) - 1
        last_char = i + len(needle) - 1
        last = bisect.bisect_right(self.at, last_char) - 1
        return self.orig[first] + i - self.at[first], self.orig[last] + last_char - self.at[last] + 1


_STOP_PROBLEMS = {
    "refusal": Problem.REFUSAL,
    "max_tokens": Problem.TRUNCATED,
    "model_context_window_exceeded": Problem.CONTEXT_EXCEEDED,
}


def check(recipe: Recipe, text: str | Payload, message: dict[str, Any]) -> Verdict:
    """Gate one answer for the document (`text`: its text, or the payload that was sent)."""
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
        errors = validation_errors(e)
        return Verdict(False, Problem.INVALID, output=data, errors=errors, stop_reason=stop, raw_text=raw)
    output = model.model_dump(mode="json")
    flags, offsets = evidence_report(recipe, output, text)
    sent = text.send.value if isinstance(text, Payload) else SendAs.TEXT.value
    if flags:
        errors = [f"{f['path']}: evidence excerpt {f['excerpt']!r} {f['why']}" for f in flags]
        verbatim = any(f["problem"] == Problem.EVIDENCE.value for f in flags)
        problem = Problem.EVIDENCE if verbatim else Problem.UNSUPPORTED
        bare = [{k: v for k, v in f.items() if k != "why"} for f in flags]  # `why` is in the errors
        return Verdict(False, problem, output, errors, bare, stop, raw, sent_as=sent)
    if sent != SendAs.TEXT.value:
        output = strip_page_marks(recipe, output)
    guess = text.content.encoding if isinstance(text, Payload) and text.content.guessed else None
    offsets = with_boxes(text, offsets) if isinstance(text, Payload) else offsets
    return Verdict(True, Problem.NONE, output, [], [], stop, raw, offsets, sent, guess)


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
            self.repair_tokens += sum(add_usage({}, usage).values())
        elif action is Action.RETRY_LARGER:
            self.truncation_retries += 1


def action_of(purpose: str | None) -> Action | None:
    """The gate action a persisted answer's purpose names (None for a first call)."""
    return Action(purpose) if purpose in (Action.REPAIR.value, Action.RETRY_LARGER.value) else None


def decide(
    verdict: Verdict, progress: Progress, settings: Settings, *, next_input_tokens: int = 0
) -> Decision:
    """What to do next. `next_input_tokens` estimates a repair request's size against the budget."""
    gate, why = settings.gate, verdict.problem.value
    if verdict.problem is Problem.NONE:
        if getattr(verdict, "unverified", 0) and gate.unverified_evidence == "review":
            return Decision(Action.REVIEW, UNVERIFIED)
        return Decision(Action.ACCEPT)
    if verdict.problem is Problem.TRUNCATED:
        larger = gate.truncation_max_tokens
        if progress.truncation_retries == 0 and larger > progress.max_tokens:
            return Decision(Action.RETRY_LARGER, why, max_tokens=larger)
    elif verdict.problem in (Problem.INVALID, Problem.EVIDENCE, Problem.UNSUPPORTED):
        spent = progress.repair_tokens + next_input_tokens
        if progress.repairs < gate.repair_attempts and spent <= gate.repair_token_budget:
            return Decision(Action.REPAIR, why)
    return Decision(Action.REVIEW, why)


def next_request(decision: Decision, request: dict[str, Any], verdict: Verdict) -> dict[str, Any]:
    """The request that carries out a REPAIR or RETRY_LARGER decision."""
    if decision.action is Action.REPAIR:
        return repair_request(request, verdict.raw_text, verdict.errors)
    if decision.action is Action.RETRY_LARGER and decision.max_tokens:
        return {**request, "max_tokens": decision.max_tokens}
    raise ValueError(f"decision {decision.action.value} needs no new request")

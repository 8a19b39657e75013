"""How long a recipe's answers are, learned from a store's own past runs (for `tasks.cost.estimate`).

A request's input is known before it is sent; its answer is not. The cost ledgers of past runs
(`runs/<run_id>/costs/`) hold, per document and attempt, the input, output and thinking tokens billed.
`learn` reads those of the same recipe and model, newest runs first, and fits per document format
(`format_key`: type and how it is sent) on first answers

    answer text tokens = a + b x document tokens   (least squares, b >= 0)

where document tokens are the document's own (`document_tokens`), not the whole prompt: the prompt is
the same for every document, and an estimate's count of it differs from a bill's by a few tokens that
a steep slope would multiply. Per format it also keeps the mean thinking and the repair rate (leaned
towards every format's: `per_doc`); over every format, what one repair costs relative to its first
attempt (`repair_size`) and what the integration pass read and wrote per document. A format with
fewer than FORMAT_MIN documents gets the mean answer over all formats (another format's slope is not
extrapolated to it); fewer than LEARN_MIN documents in all: nothing is learned and the estimate
falls back to its prior (tasks.cost.sizing.answer_chars).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from checkpoints.costs import CostLedger
from checkpoints.manifest import ManifestStore

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore

LEARN_SAMPLE = 500  # documents read at most (the newest runs first)
LEARN_MIN = 10  # fewer documents of the recipe: the schema prior
FORMAT_MIN = 5  # fewer documents of a format: the fit over every format
REPAIR_WEIGHT = 10  # a format's repair rate leans on every format's as if this many documents had it


@dataclass(frozen=True)
class PastAnswer:
    """One document of an earlier run: its size, what its first attempt answered, and its repairs
    (the attempts after the first: repairs with the errors, a retry after truncation)."""

    doc_format: str  # format_key: the document type and how it was sent
    input_tokens: int  # document_tokens of the document (its inventory record)
    text_tokens: int  # output tokens less thinking, first attempt
    thinking_tokens: int  # first attempt
    repair_input_tokens: int = 0  # the prompts of attempts after the first
    first_input_tokens: int = 0  # the prompt of the first attempt (the whole request, as billed)
    repairs: int = 0  # attempts after the first
    repair_text_tokens: int = 0
    repair_thinking_tokens: int = 0


@dataclass(frozen=True)
class Fit:
    """answer text tokens = intercept + slope x document tokens, over `documents` past documents."""

    intercept: float
    slope: float
    documents: int

    def predict(self, doc_tokens: int) -> int:
        return max(1, round(self.intercept + self.slope * doc_tokens))


def fit(samples: list[PastAnswer]) -> Fit:
    """Least squares of text tokens on document tokens, the slope kept >= 0 (a longer document never
    predicts a shorter answer); the sum of the predictions over the samples equals their sum."""
    n = len(samples)
    mx = sum(s.input_tokens for s in samples) / n
    my = sum(s.text_tokens for s in samples) / n
    sxx = sum((s.input_tokens - mx) ** 2 for s in samples)
    sxy = sum((s.input_tokens - mx) * (s.text_tokens - my) for s in samples)
    slope = max(0.0, sxy / sxx) if sxx else 0.0
    return Fit(intercept=my - slope * mx, slope=slope, documents=n)


@dataclass(frozen=True)
class PerDoc:
    """What a format's documents cost besides the first answer's text, per document: the first
    attempt's thinking tokens, and how many repair attempts a document takes (the rate; what one
    costs is `RepairSize`, over every format)."""

    thinking: float
    repair_rate: float


def per_doc(samples: list[PastAnswer], overall: PerDoc | None = None) -> PerDoc:
    """Thinking and the repair rate of `samples`; with `overall` (every format's), the rate is their
    mean weighted by documents against REPAIR_WEIGHT documents at the overall rate: repairs are rare,
    and two of them among six documents of a format say little about the next six."""
    n = len(samples)
    rate = sum(s.repairs for s in samples) / n
    if overall is not None:
        rate = (n * rate + REPAIR_WEIGHT * overall.repair_rate) / (n + REPAIR_WEIGHT)
    return PerDoc(thinking=sum(s.thinking_tokens for s in samples) / n, repair_rate=rate)


@dataclass(frozen=True)
class RepairSize:
    """What one repair attempt costs, relative to its document's first attempt, over every format: a
    repair re-sends the prompt with the answer and its errors (input per token of first prompt) and
    answers again (text per token of first answer), with its thinking. Sizes vary little between
    formats; how often repairs happen does (`PerDoc.repair_rate`)."""

    input_ratio: float = 1.0
    text_ratio: float = 1.0
    thinking: float = 0.0


def repair_size(samples: list[PastAnswer]) -> RepairSize:
    repaired = [s for s in samples if s.repairs]
    if not repaired:
        return RepairSize()
    first_in = sum(s.first_input_tokens * s.repairs for s in repaired)
    first_text = sum(s.text_tokens * s.repairs for s in repaired)
    return RepairSize(
        input_ratio=sum(s.repair_input_tokens for s in repaired) / first_in if first_in else 1.0,
        text_ratio=sum(s.repair_text_tokens for s in repaired) / first_text if first_text else 1.0,
        thinking=sum(s.repair_thinking_tokens for s in repaired) / sum(s.repairs for s in repaired),
    )


@dataclass
class AnswerSizes:
    """What a recipe's answers cost in a store's past runs: fits per format and over all of them."""

    overall: Fit  # every format: the mean answer (slope 0), for a format with too few documents
    by_type: dict[str, Fit] = field(default_factory=dict)
    thinking_per_doc: float = 0.0
    runs: int = 0
    note_tokens_per_result: float | None = None  # integration pass: text tokens written per document
    overall_per_doc: PerDoc = field(default_factory=lambda: PerDoc(0.0, 0.0))
    repair: RepairSize = field(default_factory=RepairSize)
    per_doc_by_type: dict[str, PerDoc] = field(default_factory=dict)  # formats with FORMAT_MIN documents
    integration_input_tokens: int = 0  # the integration passes' input, as billed
    integration_calls: int = 0  # their calls
    integration_documents: int = 0  # the results they read

    @property
    def documents(self) -> int:
        return self.overall.documents

    def text_tokens(self, doc_format: str, doc_tokens: int) -> int:
        """First-answer text tokens of a document of `doc_format` (format_key) with `doc_tokens`."""
        return (self.by_type.get(doc_format) or self.overall).predict(doc_tokens)

    def costs(self, doc_format: str) -> PerDoc:
        """Thinking and the repair rate of a document of `doc_format` (the mean over every format for
        a format with fewer than FORMAT_MIN past documents)."""
        return self.per_doc_by_type.get(doc_format) or self.overall_per_doc

    def expected(self, doc_format: str, doc_tokens: int, prompt_tokens: int) -> tuple[int, int, int]:
        """(text, thinking, repair input) tokens expected of a document of `doc_format` with
        `doc_tokens` of its own and a first prompt of `prompt_tokens`: its first answer and the
        repairs its format's rate predicts, each sized as `repair` says."""
        costs = self.costs(doc_format)
        first = self.text_tokens(doc_format, doc_tokens)
        rate = costs.repair_rate
        return (
            round(first * (1 + rate * self.repair.text_ratio)),
            round(costs.thinking + rate * self.repair.thinking),
            round(rate * self.repair.input_ratio * prompt_tokens),
        )


@dataclass
class _Reading:
    """What `past_answers` read: the documents, the runs, and the integration passes' text output."""

    answers: list[PastAnswer] = field(default_factory=list)
    runs: int = 0
    integration_text_tokens: int = 0
    integration_documents: int = 0  # documents of the runs whose integration pass was billed
    integration_input_tokens: int = 0
    integration_calls: int = 0


def format_key(doc_type: str | None, send_as: str | None) -> str:
    """A document's format as the fits group it: its type and how it goes to the model ("pdf:text",
    "pdf:pdf", "png:image"); a scanned PDF answers unlike one sent as its text."""
    return f"{doc_type or '-'}:{send_as or 'text'}"


def document_tokens(text_chars: int | None, image_tokens: int | None, send_as: str | None) -> int:
    """A document's own input tokens: its text at 4 characters a token, plus its page images when it goes
    as a PDF or an image."""
    media = int(image_tokens or 0) if send_as in ("pdf", "image") else 0
    return -(-int(text_chars or 0) // 4) + media


def past_answers(store: ObjectStore, recipe: str, model: str, read_records: int | None = None) -> _Reading:
    """The documents of `recipe` answered by `model` in the store's cost ledgers, newest runs first, at
    most LEARN_SAMPLE documents (a document answered in two runs counts once: the newest), and what
    those runs' integration passes wrote (per result read: at most `read_records` of a run)."""
    manifests = ManifestStore(store)
    seen: set[str] = set()
    reading = _Reading()
    out = reading.answers
    for run_id in sorted(manifests.list_runs(), reverse=True):
        if len(out) >= LEARN_SAMPLE:
            break
        try:
            if manifests.load(run_id).recipe != recipe:
                continue
        except Exception:  # an unreadable manifest teaches nothing
            continue
        per_doc: dict[str, list[tuple[int, int, int, int]]] = defaultdict(list)
        notes = notes_input = calls = 0
        for e in CostLedger(store, run_id).entries():
            if e.possibly_billed or e.unanswered:
                continue
            prompt = e.input_tokens + e.cache_creation_input_tokens + e.cache_read_input_tokens
            if e.pass_name == "integration":
                notes += e.output_tokens - e.thinking_tokens
                notes_input += prompt
                calls += 1
            elif e.pass_name == "file" and e.answered_model == model:
                per_doc[e.doc_id].append((e.attempt, prompt, e.output_tokens, e.thinking_tokens))
        if not per_doc:
            continue
        reading.runs += 1
        if notes:
            reading.integration_text_tokens += notes
            reading.integration_input_tokens += notes_input
            reading.integration_calls += calls
            reading.integration_documents += min(len(per_doc), read_records or len(per_doc))
        sizes = _doc_sizes(store, run_id)
        for doc_id, attempts in sorted(per_doc.items()):
            if doc_id in seen or doc_id not in sizes or len(out) >= LEARN_SAMPLE:
                continue
            seen.add(doc_id)
            attempts.sort()
            first, rest = attempts[0], attempts[1:]
            out.append(
                PastAnswer(
                    doc_format=sizes[doc_id][0],
                    input_tokens=sizes[doc_id][1],
                    text_tokens=first[2] - first[3],
                    thinking_tokens=first[3],
                    repair_input_tokens=sum(a[1] for a in rest),
                    first_input_tokens=first[1],
                    repairs=len(rest),
                    repair_text_tokens=sum(a[2] - a[3] for a in rest),
                    repair_thinking_tokens=sum(a[3] for a in rest),
                )
            )
    return reading


def learn(store: ObjectStore, recipe: str, model: str, read_records: int | None = None) -> AnswerSizes | None:
    """The answer sizes of `recipe` on `model` in the store, or None below LEARN_MIN documents
    (`read_records`: the results an integration pass reads at most, settings.integration)."""
    reading = past_answers(store, recipe, model, read_records)
    samples = reading.answers
    if len(samples) < LEARN_MIN:
        return None
    by_type: dict[str, list[PastAnswer]] = defaultdict(list)
    for s in samples:
        by_type[s.doc_format].append(s)
    groups = {t: group for t, group in by_type.items() if len(group) >= FORMAT_MIN}
    n = len(samples)
    overall = per_doc(samples)
    return AnswerSizes(
        overall=Fit(intercept=sum(s.text_tokens for s in samples) / n, slope=0.0, documents=n),
        by_type={t: fit(group) for t, group in groups.items()},
        thinking_per_doc=sum(s.thinking_tokens + s.repair_thinking_tokens for s in samples) / n,
        runs=reading.runs,
        overall_per_doc=overall,
        repair=repair_size(samples),
        per_doc_by_type={t: per_doc(group, overall) for t, group in groups.items()},
        integration_input_tokens=reading.integration_input_tokens,
        integration_calls=reading.integration_calls,
        integration_documents=reading.integration_documents,
        note_tokens_per_result=(
            reading.integration_text_tokens / reading.integration_documents
            if reading.integration_documents
            else None
        ),
    )


def _doc_sizes(store: ObjectStore, run_id: str) -> dict[str, tuple[str, int]]:
    """doc_id -> (format_key, document_tokens), from the run's inventory chunks."""
    out: dict[str, tuple[str, int]] = {}
    for key in store.list(f"runs/{run_id}/inventory/"):
        for d in store.get_json_or_none(key) or []:
            if isinstance(d, dict) and d.get("doc_id") and d.get("doc_type"):
                send = d.get("send_as")
                size = document_tokens(d.get("text_chars"), d.get("image_tokens"), send)
                out[str(d["doc_id"])] = (format_key(str(d["doc_type"]), send), size)
    return out

"""What every attempt cost: `runs/<run_id>/costs/<group_id>.json`, a JSON list of entries.

A group (one chunk of the realtime per-file pass, one call, one batch collection) is written once
(put-if-absent), so a resumed step that records the same group again does not count twice.
Realtime per-file attempts are also unique by identity (key, attempt: one response-log slot, one
billed answer): a resumed chunk may record an attempt a flushed group already holds, and readers
count it once. USD comes from `docmill.prices.priced_usd` (the formula the emulator bills with),
priced by the model asked for; the answer's own `model` is kept beside it (`answered_model`). An
entry whose model has no price keeps its tokens, has usd 0 and `unpriced` set: the report and
`status` show those, and the document's outcome does not change.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel

from checkpoints.keys import safe_segment
from checkpoints.store import ObjectStore
from docmill.prices import priced_usd, usage_field

USAGE_TOKENS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
TOKEN_KINDS = (*USAGE_TOKENS, "compaction_input_tokens", "compaction_output_tokens", "thinking_tokens")


# The pass whose realtime attempts are response-log slots (tasks.request.FILE_PASS): for it,
# (key, attempt) names exactly one billed answer, however many groups record it.
SLOT_PASS = "file"


class CostEntry(BaseModel):
    run_id: str
    pass_name: str
    doc_id: str
    key: str
    attempt: int = 0
    model: str  # the model asked for (what the entry is priced by)
    answered_model: str | None = None  # the answer's own `model` (a dated id for older aliases)
    unpriced: bool = False  # no price for `model`: tokens recorded, usd 0
    possibly_billed: bool = False  # timed out after sending: usd is the worst case, tokens estimated
    unanswered: bool = False  # a paid attempt whose answer never arrived whole (timeout, broken stream)
    request_id: str | None = None
    batch: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    compaction_input_tokens: int = 0
    compaction_output_tokens: int = 0
    thinking_tokens: int = 0  # of output_tokens: adaptive thinking (usage.output_tokens_details)
    usd: float = 0.0
    at: float | None = None  # unix time the answer was accounted (report throughput charts)
    sent_at: float | None = None  # unix time the request was sent (realtime; the report's timeline)

    @property
    def identity(self) -> str | None:
        """The billed answer this entry stands for, when that is knowable: a realtime per-file
        attempt (one response-log slot). Entries of other passes, of batches and of unanswered
        attempts (timeouts, broken streams: recorded once, the moment they happen) are never merged."""
        if (
            self.pass_name == SLOT_PASS
            and not self.batch
            and self.attempt > 0
            and not (self.unanswered or self.possibly_billed)
        ):
            return f"{self.key}/{self.attempt}"
        return None

    @classmethod
    def from_usage(
        cls,
        *,
        run_id: str,
        pass_name: str,
        doc_id: str,
        key: str,
        attempt: int,
        model: str,
        usage: Mapping[str, Any] | Any,
        request_id: str | None = None,
        batch: bool = False,
        at: float | None = None,
        answered_model: str | None = None,
        sent_at: float | None = None,
    ) -> CostEntry:
        """An entry from an API `usage` (object or dict), compaction iterations included."""
        usd = priced_usd(model, usage, batch=batch)
        comp_in = comp_out = 0
        for it in usage_field(usage, "iterations") or []:
            if usage_field(it, "type") == "compaction":
                comp_in += int(usage_field(it, "input_tokens") or 0)
                comp_out += int(usage_field(it, "output_tokens") or 0)
        return cls(
            run_id=run_id,
            pass_name=pass_name,
            doc_id=doc_id,
            key=key,
            attempt=attempt,
            model=model,
            answered_model=answered_model,
            unpriced=usd is None,
            request_id=request_id,
            batch=batch,
            **{kind: int(usage_field(usage, kind) or 0) for kind in USAGE_TOKENS},
            thinking_tokens=int(
                usage_field(usage_field(usage, "output_tokens_details") or {}, "thinking_tokens") or 0
            ),
            compaction_input_tokens=comp_in,
            compaction_output_tokens=comp_out,
            usd=usd or 0.0,
            at=time.time() if at is None else at,
            sent_at=sent_at,
        )


def possibly_billed_entry(
    *,
    run_id: str,
    pass_name: str,
    doc_id: str,
    key: str,
    attempt: int,
    model: str,
    input_tokens: int,
    max_tokens: int,
    usd: float,
    at: float,
) -> CostEntry:
    """The entry of a request that timed out after it was sent (invariant 13): flagged, priced at
    its worst case (input as cache writes, max_tokens of output), tokens as estimated."""
    return CostEntry(
        run_id=run_id,
        pass_name=pass_name,
        doc_id=doc_id,
        key=key,
        attempt=attempt,
        model=model,
        possibly_billed=True,
        unanswered=True,
        input_tokens=input_tokens,
        output_tokens=max_tokens,
        usd=usd,
        at=at,
    )


class CostLedger:
    def __init__(self, store: ObjectStore, run_id: str) -> None:
        self.store = store
        self.run_id = safe_segment(run_id)
        self.prefix = f"runs/{self.run_id}/costs/"

    def record(self, group_id: str, entries: list[CostEntry]) -> bool:
        """Write a group once; False if that group was already recorded (it is not counted twice)."""
        key = f"{self.prefix}{safe_segment(group_id)}.json"
        return self.store.put_json(key, [e.model_dump(mode="json") for e in entries], if_absent=True)

    def entries(self) -> Iterator[CostEntry]:
        """Every recorded entry; an answer recorded in two groups (see `identity`) once."""
        seen: set[str] = set()
        for key in self.store.list(self.prefix):
            if key.endswith(".json"):
                for item in self.store.get_json_or_none(key) or []:
                    entry = CostEntry.model_validate(item)
                    identity = entry.identity
                    if identity is not None:
                        if identity in seen:
                            continue
                        seen.add(identity)
                    yield entry

    def totals(self) -> dict[str, Any]:
        """Sums over every recorded entry (`unpriced`: entries with no price, their tokens still
        counted; `possibly_billed`: timeouts and broken streams after sending, at their upper bound,
        included in usd; `cache_saved_usd`: `cache_saving` of each)."""
        usd = thinking_usd = possibly_usd = saved = 0.0
        by_pass: defaultdict[str, float] = defaultdict(float)
        by_model: defaultdict[str, float] = defaultdict(float)
        by_doc: defaultdict[str, float] = defaultdict(float)
        tokens = dict.fromkeys(TOKEN_KINDS, 0)
        unpriced: set[str] = set()
        count = unpriced_count = possibly = unpriced_tokens = 0
        for e in self.entries():
            count += 1
            usd += e.usd
            saved += cache_saving(e)
            if e.possibly_billed:
                possibly += 1
                possibly_usd += e.usd
            if e.unpriced:  # thinking tokens are a part of output_tokens
                unpriced_count += 1
                unpriced.add(e.model)
                unpriced_tokens += sum(getattr(e, kind) for kind in TOKEN_KINDS if kind != "thinking_tokens")
            elif e.thinking_tokens:  # thinking is billed as output: its share of usd
                thinking_usd += (
                    priced_usd(e.model, {"output_tokens": e.thinking_tokens}, batch=e.batch) or 0.0
                )
            by_pass[e.pass_name] += e.usd
            by_model[e.model] += e.usd
            by_doc[e.doc_id] += e.usd
            for kind in TOKEN_KINDS:
                tokens[kind] += getattr(e, kind)
        return {
            "usd": usd,
            "by_pass": dict(by_pass),
            "by_model": dict(by_model),
            "by_doc": dict(by_doc),
            "tokens": tokens,
            "entries": count,
            "unpriced": unpriced_count,
            "unpriced_models": sorted(unpriced),
            "unpriced_tokens": unpriced_tokens,
            "thinking_usd": thinking_usd,
            "possibly_billed": possibly,
            "possibly_billed_usd": possibly_usd,
            "cache_saved_usd": saved,
        }


def cache_saving(e: CostEntry) -> float:
    """What the prompt cache saved on one answer: its price with every input token uncached, less what
    it cost (negative when a write was never read). 0 for entries without cache tokens, unpriced or
    possibly billed ones."""
    if e.unpriced or e.possibly_billed or not (e.cache_read_input_tokens or e.cache_creation_input_tokens):
        return 0.0
    prompt = e.input_tokens + e.cache_creation_input_tokens + e.cache_read_input_tokens
    plain = {
        "input_tokens": prompt + e.compaction_input_tokens,
        "output_tokens": e.output_tokens + e.compaction_output_tokens,
    }
    uncached = priced_usd(e.model, plain, batch=e.batch)
    return 0.0 if uncached is None else uncached - e.usd

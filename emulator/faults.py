"""Fault plans: which requests fail, and how.

A `FaultRule` picks requests by path (glob, default "/v1/messages"), by a marker string
contained in the body (put it in a document to target that document), by batch custom_id,
by a seeded probability, and for the next `count` matches only (None = forever). Its `kind`
says what happens. Rules come from `POST /_emulator/faults`, from `DOCMILL_EMULATOR_FAULTS`
(a JSON list of rules) or from `state.faults.add(...)` in-process.

Phases: error kinds (`ERRORS`) answer with an error status instead of a message (in a
batch: an `errored` result); `LATENCY` delays; `CONNECTION_RESET` cuts the response mid-body;
(with `after_lines`, a streamed body such as batch results is cut after that many lines);
response kinds (`SHAPERS`) change a successful answer (truncated, malformed, prose, refusal, schema-invalid,
or for `stream: true` an `error` event mid-stream after the 200);
`SLOW_BATCH` makes a batch that contains a matching request take `seconds` longer.
For `stream: true` answers, `STREAM_DROP` drops the connection after `after_events` SSE events
(default: half of them, mid-content; the answer is billed in full, as the API generated it: the
harsher case), and `STALL` goes silent for `seconds` of virtual time after `after_events` events
(default 1; before the body of an unstreamed answer): the client's read timeout decides.
"""

from __future__ import annotations

import fnmatch
import json
import math
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

from emulator.validation import ApiError, ErrorType


class FaultKind(StrEnum):
    RATE_LIMIT = "rate_limit"
    SPEND_LIMIT = "spend_limit"
    OVERLOADED = "overloaded"
    SERVER_ERROR = "server_error"
    CONFLICT = "conflict"
    INVALID_REQUEST = "invalid_request"
    COMPACTION_UNAVAILABLE = "compaction_unavailable"
    CONNECTION_RESET = "connection_reset"
    LATENCY = "latency"
    TRUNCATE = "truncate"
    MALFORMED_JSON = "malformed_json"
    PROSE = "prose"  # the answer is prose, not JSON (a wrong endpoint or model behind a proxy)
    REFUSAL = "refusal"
    SCHEMA_INVALID = "schema_invalid"
    STREAM_ERROR = "stream_error"
    STREAM_DROP = "stream_drop"  # the connection drops mid-stream (httpx2 RemoteProtocolError)
    STALL = "stall"  # silence mid-answer for `seconds` of virtual time
    SLOW_BATCH = "slow_batch"


MESSAGES_PATH = "/v1/messages"
STREAM_ONLY = frozenset({FaultKind.STREAM_ERROR, FaultKind.STREAM_DROP})


@dataclass
class FaultRule:
    kind: FaultKind
    path: str = MESSAGES_PATH
    marker: str | None = None
    custom_id: str | None = None
    count: int | None = None
    probability: float = 1.0
    status: int | None = None
    error_code: str | None = None
    message: str | None = None
    retry_after: float | None = None
    should_retry: bool | None = None
    latency_ms: float = 0.0
    seconds: float = 0.0
    after_lines: int | None = None  # connection_reset of a streamed body: cut after this many lines
    after_events: int | None = None  # stream_drop / stall: after this many SSE events
    hits: int = field(default=0)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FaultRule:
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown fault rule fields: {sorted(unknown)}")
        values = dict(data)
        values["kind"] = FaultKind(values["kind"])
        return cls(**values)

    def matches_http(self, path: str, text: str, body: Any) -> bool:
        if self.custom_id is not None or self.kind is FaultKind.SLOW_BATCH:
            return False
        if not fnmatch.fnmatchcase(path, self.path):
            return False
        if self.kind is FaultKind.COMPACTION_UNAVAILABLE and not (
            isinstance(body, dict) and "compaction" in body
        ):
            return False
        if self.kind in STREAM_ONLY and not (isinstance(body, dict) and body.get("stream")):
            return False
        return self.marker is None or self.marker in text

    def matches_item(self, custom_id: str, text: str) -> bool:
        if self.kind in STREAM_ONLY or self.kind is FaultKind.STALL:
            return False
        if self.custom_id is not None:
            return self.custom_id == custom_id
        return self.marker is not None and self.path == MESSAGES_PATH and self.marker in text


def retry_headers(retry_after: float) -> dict[str, str]:
    return {
        "retry-after": str(max(1, math.ceil(retry_after))),
        "retry-after-ms": str(int(retry_after * 1000)),
    }


# kind -> (error type, message, error_code, retry_after); the rule's own fields override the last three
ERRORS: dict[FaultKind, tuple[ErrorType, str, str | None, float | None]] = {
    FaultKind.RATE_LIMIT: (
        ErrorType.RATE_LIMIT,
        "Number of request tokens has exceeded your per-minute rate limit",
        None,
        1.0,
    ),
    # SDK `_error_classes.py`: EnforcedSpendLimitReachedError; no retry helps, so the API's hint is
    # long (the harsher case)
    FaultKind.SPEND_LIMIT: (
        ErrorType.RATE_LIMIT,
        "You have reached your specified API usage limits.",
        "enforced_spend_limit_reached",
        24 * 3600.0,
    ),
    FaultKind.OVERLOADED: (ErrorType.OVERLOADED, "Overloaded", None, None),
    FaultKind.SERVER_ERROR: (ErrorType.API_ERROR, "Internal server error", None, None),
    FaultKind.CONFLICT: (ErrorType.CONFLICT, "Conflict (injected)", None, None),
    FaultKind.INVALID_REQUEST: (ErrorType.INVALID_REQUEST, "Invalid request (injected)", None, None),
    FaultKind.COMPACTION_UNAVAILABLE: (
        ErrorType.OVERLOADED,
        "Compaction is temporarily unavailable",
        "compaction_unavailable",
        None,
    ),
}


def error_for(rule: FaultRule) -> ApiError:
    """The `ApiError` an error-kind rule answers with (status override and retry headers applied)."""
    error_type, message, code, retry = ERRORS[rule.kind]
    retry = retry if rule.retry_after is None else rule.retry_after
    headers = retry_headers(retry) if retry is not None else {}
    if rule.should_retry is not None:
        headers["x-should-retry"] = "true" if rule.should_retry else "false"
    return ApiError(
        error_type,
        rule.message or message,
        status=rule.status,
        error_code=rule.error_code or code,
        headers=headers,
    )


@dataclass
class FaultHits:
    """The rules that fired for one request, by phase."""

    error: FaultRule | None = None
    reset: FaultRule | None = None
    latency_ms: float = 0.0
    response: FaultRule | None = None
    slow_seconds: float = 0.0
    drop: FaultRule | None = None
    stall: FaultRule | None = None


class FaultPlan:
    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.rules: list[FaultRule] = []
        self._lock = threading.Lock()  # tests add rules from their own thread while the server runs

    def add(self, rule: FaultRule | Mapping[str, Any] | None = None, /, **kw: Any) -> FaultRule:
        if not isinstance(rule, FaultRule):
            rule = FaultRule.from_dict(kw if rule is None else rule)
        with self._lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()
            self.rng = random.Random(self.seed)

    def _fire(self, rule: FaultRule) -> bool:
        if rule.count is not None and rule.count <= 0:
            return False
        if rule.probability < 1.0 and self.rng.random() >= rule.probability:
            return False
        rule.hits += 1
        if rule.count is not None:
            rule.count -= 1
        return True

    def _collect(self, candidates: list[FaultRule]) -> FaultHits:
        """The first rule of each phase that fires; every latency and slow-batch rule adds up."""
        hits = FaultHits()
        with self._lock:
            for rule in candidates:
                slot = HIT_SLOTS.get(rule.kind)
                if (slot is not None and getattr(hits, slot) is not None) or not self._fire(rule):
                    continue
                if slot is not None:
                    setattr(hits, slot, rule)
                elif rule.kind is FaultKind.LATENCY:
                    hits.latency_ms += rule.latency_ms
                else:
                    hits.slow_seconds += rule.seconds
            self.rules = [r for r in self.rules if r.count is None or r.count > 0]
        return hits

    def for_http(self, path: str, body: Any) -> FaultHits:
        if not self.rules:
            return FaultHits()
        text = body_text(body)
        return self._collect([r for r in self.rules if r.matches_http(path, text, body)])

    def for_item(self, custom_id: str, params: Any, *, slow_only: bool = False) -> FaultHits:
        """Rules for one batch item; `slow_only` asks only about SLOW_BATCH (at create time)."""
        if not self.rules:
            return FaultHits()
        text = body_text(params)
        wanted = [r for r in self.rules if (r.kind is FaultKind.SLOW_BATCH) == slow_only]
        return self._collect([r for r in wanted if r.matches_item(custom_id, text)])

    def snapshot(self) -> list[dict[str, Any]]:
        return [asdict(r) for r in self.rules]


def body_text(body: Any) -> str:
    return body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)


def parse_rules(text: str) -> list[FaultRule]:
    """Rules from JSON: one rule object or a list of them."""
    data = json.loads(text)
    items = data if isinstance(data, list) else [data]
    return [FaultRule.from_dict(item) for item in items]


# Response-shaping faults: (content, stop_reason) -> (content, stop_reason, stop_details)
Shaped = tuple[list[dict[str, Any]], str, dict[str, Any] | None]


def _truncate(content: list[dict[str, Any]], stop_reason: str) -> Shaped:
    out: list[dict[str, Any]] = []
    for block in content:
        if block.get("type") == "text":
            text = block["text"]
            out.append({**block, "text": text[: max(1, len(text) // 2)]})
            break
        if block.get("type") == "tool_use":
            out.append({**block, "input": {}})
            break
        out.append(block)
    return out, "max_tokens", None


def _malformed(content: list[dict[str, Any]], stop_reason: str) -> Shaped:
    out = []
    for block in content:
        if block.get("type") == "text":
            block = {**block, "text": block["text"].rstrip().rstrip("}") + ', "oops": }'}
        out.append(block)
    if not any(b.get("type") == "text" for b in out):
        out.append({"type": "text", "text": '{"oops": }'})
    return out, stop_reason, None


def _prose(content: list[dict[str, Any]], stop_reason: str) -> Shaped:
    text = "Sure! This document looks like an invoice. Let me know if you need anything else."
    return [{"type": "text", "text": text}], "end_turn", None


def _refusal(content: list[dict[str, Any]], stop_reason: str) -> Shaped:
    details = {"type": "refusal", "category": None, "explanation": "Injected refusal (emulator fault)."}
    return [{"type": "text", "text": "I can't help with that request."}], "refusal", details


def _break_schema(value: Any) -> Any:
    if isinstance(value, dict):
        broken = {k: v for i, (k, v) in enumerate(value.items()) if i > 0}
        broken["unexpected_field_emulator"] = True
        return broken
    return {"unexpected_field_emulator": value}


def _schema_invalid(content: list[dict[str, Any]], stop_reason: str) -> Shaped:
    out = []
    for block in content:
        if block.get("type") == "text":
            try:
                block = {**block, "text": json.dumps(_break_schema(json.loads(block["text"])))}
            except ValueError:
                block = {**block, "text": json.dumps({"unexpected_field_emulator": True})}
        elif block.get("type") == "tool_use":
            block = {**block, "input": _break_schema(block.get("input"))}
        out.append(block)
    return out, stop_reason, None


SHAPERS: dict[FaultKind, Callable[[list[dict[str, Any]], str], Shaped]] = {
    FaultKind.TRUNCATE: _truncate,
    FaultKind.MALFORMED_JSON: _malformed,
    FaultKind.PROSE: _prose,
    FaultKind.REFUSAL: _refusal,
    FaultKind.SCHEMA_INVALID: _schema_invalid,
    FaultKind.STREAM_ERROR: lambda content, stop_reason: (content, stop_reason, None),
}


HIT_SLOTS: dict[FaultKind, str] = {  # the `FaultHits` field a kind's first firing rule takes
    **dict.fromkeys(ERRORS, "error"),
    **dict.fromkeys(SHAPERS, "response"),
    FaultKind.CONNECTION_RESET: "reset",
    FaultKind.STREAM_DROP: "drop",
    FaultKind.STALL: "stall",
}

"""The answered attempts of one document in the realtime per-file pass (`Attempts`): numbering in the
response log, persistence the moment an answer arrives (invariant 3), usage, cost entries, the
per-attempt log a review item shows, and crash recovery from persisted answers. Used by
tasks.per_file.realtime, whose calls go out on the client's event loop (tasks.api.client)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tasks.per_file.accounting import account_attempt, answered_model
from tasks.per_file.gate import Progress, Verdict, action_of
from tasks.per_file.outcome import DocOutcome, DocState
from tasks.per_file.settle import Pass, persist_answer, prompt_version
from tasks.request import FILE_PASS

if TYPE_CHECKING:
    from tasks.api.client import AsyncModelClient, CallResult


class Attempts:
    """The answered attempts of one document: numbering, persistence, usage, cost, log."""

    def __init__(self, p: Pass, doc_id: str, key: str, *, model: str) -> None:
        self.p, self.doc_id, self.key, self.model = p, doc_id, key, model
        self.n = 0  # answered attempts (ResponseLog numbering)
        self.transport_attempts = 0  # HTTP attempts, failed ones included
        self.usage: dict[str, int] = {}
        self.cost = 0.0
        self.request_ids: list[str] = []
        self.log: list[dict[str, Any]] = []
        self.last_verdict: Verdict | None = None

    def recovered(self, progress: Progress) -> dict[str, Any] | None:
        """The last persisted response of this key, if a crash left responses without a result.
        Every persisted attempt is accounted (cost entries are written once, so none twice)."""
        numbers = self.p.responses.attempts(FILE_PASS, self.key)
        latest: dict[str, Any] | None = None
        purpose = "first"
        for n in numbers:
            message = self.p.responses.get(FILE_PASS, self.key, n)
            if not message:
                continue
            meta = message.get("_docmill") or {}
            self.n = n
            self.model = answered_model(message, self.model)
            purpose = str(meta.get("purpose") or "first")
            progress.note(action_of(purpose), message.get("usage"))
            progress.max_tokens = int(meta.get("max_tokens") or progress.max_tokens)
            self.answered(message, f"recovered:{purpose}", meta.get("max_tokens"))
            latest = message
        if latest is None:
            return None
        progress.attempts = max(self.n - 1, 0)
        self.transport_attempts = self.n
        return latest

    async def call(
        self,
        aio: AsyncModelClient,
        request: dict[str, Any],
        purpose: str,
        then: Callable[[dict[str, Any]], None] | None = None,
        *,
        estimate: int | None = None,
    ) -> CallResult:
        """Send `request` on the event loop. The answer is persisted (on an I/O thread) before the
        request gives up its slot, and `then(message)`, the blocking work that follows an answer
        (accounting, the gate, the ledger), runs right after in the same step, the slot given back."""
        sent_at = time.time()  # the report's timeline: submitted -> answered

        def on_response(transport_attempts: int, message: dict[str, Any]) -> None:
            self.n = persist_answer(
                self.p, self.key, self.n + 1, message, purpose=purpose, request=request, sent_at=sent_at
            )
            self.transport_attempts += transport_attempts  # this call's attempts: all of them now
            self.model = str(message.get("_asked_model") or self.model)

        result = await aio.call(
            request,
            key=self.key,
            doc_id=self.doc_id,
            pass_name=FILE_PASS,
            on_response=on_response,
            purpose=purpose,
            prompt_version=prompt_version(self.p.recipe),
            estimate=estimate,
            then=then,
        )
        self.model = result.model
        return result

    def answered(self, message: dict[str, Any], purpose: str, max_tokens: Any) -> None:
        """Account an answered call: its cost entry, usage and line in the attempt log."""
        model = answered_model(message, self.model)
        self.cost += account_attempt(
            self.p, self.doc_id, self.key, self.n, model, message, self.usage, self.request_ids
        )
        request_id = message.get("_request_id")
        self.log.append(
            {
                "attempt": self.n,
                "purpose": purpose,
                "model": model,
                "max_tokens": max_tokens,
                "stop_reason": message.get("stop_reason"),
                "request_id": request_id,
            }
        )

    def note_verdict(self, verdict: Verdict) -> None:
        self.last_verdict = verdict
        if self.log:
            self.log[-1]["problem"] = verdict.problem.value
            self.log[-1]["errors"] = verdict.errors[:20]

    def outcome(self, *, state: DocState, **kw: Any) -> DocOutcome:
        return DocOutcome(
            doc_id=self.doc_id,
            key=self.key,
            state=state,
            attempts=max(self.transport_attempts, self.n),
            model=self.model,
            usage=dict(self.usage),
            cost_usd=self.cost,
            request_ids=list(self.request_ids),
            origin_run=self.p.run_id,
            **kw,
        )

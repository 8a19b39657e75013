"""Long tasks inside a token budget (invariant 7): `ConversationTask`.

Every `send()`:
1. builds the full request: system + the pinned-facts block (last system block, outside any
   summarized range) + tools + history + the new user turn;
2. preflight: counts it with `count_tokens` (GA, or beta when a compaction block is in the
   history), cached by a hash of the exact request; if count + max_tokens exceeds the budget it
   archives the history (`HistoryArchive`), compacts (tasks.conversation.compaction), verifies every pinned
   fact is in what the next request sends (else `PinnedFactLost`, old checkpoint kept),
   checkpoints the compacted state, and counts again — the API never says "too long";
3. refuses to send a tampered or misplaced compaction block;
4. sends, appends the exchange, costs it (`usage.iterations` for compactions) in the
   `CostLedger`, and checkpoints history + pinned + seq with compare-and-swap at
   `runs/<run_id>/tasks/<task_id>/checkpoint.json`; the pinned block is mirrored in the scratchpad.

A task built over an existing checkpoint resumes from it; callers drive their turns from
`task.exchanges` so a resumed run sends the same turns as an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from checkpoints import cas
from checkpoints.costs import CostEntry, CostLedger
from checkpoints.inflight import InFlight, Mark, life_of
from checkpoints.scratch import HistoryArchive, Scratchpad
from docmill.crash_points import crash_point
from docmill.errors import ContextError, PinnedFactLost
from docmill.prices import worst_usd
from tasks.api.answers import CallLabel
from tasks.api.usage import estimate_input_tokens
from tasks.conversation import compaction as cmp
from tasks.conversation.pinned import PinnedFacts

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore
    from tasks.api.client import ModelClient

CHECKPOINT_VERSION = 1
MAX_COMPACTIONS_PER_TURN = 3
COUNT_FIELDS = ("model", "messages", "system", "tools", "tool_choice", "thinking", "output_config")


def safe_group(name: str) -> str:
    """A cost group id made of safe key characters only."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:200]


def _blocks(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _dump_block(block: Any) -> dict[str, Any]:
    return dict(block.model_dump(mode="json", exclude_none=True) if hasattr(block, "model_dump") else block)


class ConversationTask:
    """One long multi-turn task with a token budget, pinned facts and checkpoints."""

    def __init__(
        self,
        task_id: str,
        run_id: str,
        store: ObjectStore,
        client: ModelClient,
        *,
        model: str,
        system: str | list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        budget_tokens: int,
        pinned: PinnedFacts | None = None,
        max_tokens: int = 1024,
        pass_name: str = "context",
        doc_id: str | None = None,
    ) -> None:
        self.doc_id = doc_id or f"*{task_id}*"  # whom the cost entries are attributed to
        self.task_id, self.run_id, self.store = task_id, run_id, store
        self.client = client  # its one transport layer: retries, pacing, the run's cost cap
        self.model, self.tools, self.budget_tokens = model, tools, budget_tokens
        self.system = _blocks(system)
        self.max_tokens, self.pass_name = max_tokens, pass_name
        # lines kept for KEEP terms repeat what is pinned anyway: bound them by the budget
        self.keep_terms_limit = max(5, min(200, budget_tokens // 800))
        self.keep_tokens = budget_tokens // 4  # the recent tail a compaction keeps as it is
        self.scratch = Scratchpad(store, run_id, task_id)
        self.archive = HistoryArchive(store, run_id, task_id)
        self.key = f"runs/{run_id}/tasks/{task_id}/checkpoint.json"
        self.pinned = pinned if pinned is not None else PinnedFacts()
        self.messages: list[dict[str, Any]] = []
        self.exchanges = 0
        self.compactions: list[dict[str, Any]] = []
        self.block_digest: str | None = None
        self.state: dict[str, Any] = {}  # caller-owned JSON state, checkpointed with the history
        self._count_cache: dict[str, int] = {}
        self._etag: str | None = None
        self.inflight = InFlight(store, run_id)
        self._open_calls: list[Mark] = []  # answered calls whose cost entry is not written yet
        self._load()

    # ---- checkpoint --------------------------------------------------------------------------

    def _snapshot(self) -> dict[str, Any]:
        return {
            "version": CHECKPOINT_VERSION,
            "task_id": self.task_id,
            "run_id": self.run_id,
            "exchanges": self.exchanges,
            "messages": self.messages,
            "pinned": self.pinned.to_json(),
            "block_sha256": self.block_digest,
            "compactions": self.compactions,
            "state": self.state,
        }

    def _load(self) -> None:
        data, self._etag = cas.read(self.store, self.key)
        if data is None:
            return
        snap = json.loads(data)
        if snap.get("version") != CHECKPOINT_VERSION:
            raise ContextError(
                f"checkpoint {self.key} has version {snap.get('version')!r}", hint="start a new run id"
            )
        self.exchanges = int(snap["exchanges"])
        self.messages = list(snap["messages"])
        self.pinned = type(self.pinned).from_json(snap["pinned"])
        self.block_digest = snap.get("block_sha256")
        self.compactions = list(snap.get("compactions") or [])
        self.state = dict(snap.get("state") or {})
        cmp.check_block(self.messages, self.block_digest)

    @property
    def resumed(self) -> bool:
        return self._etag is not None

    def checkpoint(self) -> None:
        """Write the state with one conditional write (checkpoints.cas.write, If-Match on the ETag this
        task last read or wrote); a lost race means two drivers: stop, never merge."""
        data = json.dumps(self._snapshot(), ensure_ascii=False, separators=(",", ":")).encode()
        etag = cas.write(self.store, self.key, data, self._etag)
        if etag is None:
            why = "appeared while this task ran" if self._etag is None else "changed under this task"
            raise ContextError(f"{self.key} {why}", hint="another process drives this task")
        self._etag = etag
        self.scratch.replace(self.pinned.render())

    # ---- requests ----------------------------------------------------------------------------

    def params(
        self, messages: list[dict[str, Any]], *, with_pinned: bool = True, **extra: Any
    ) -> dict[str, Any]:
        """The full request for `messages`: static system (its last block marked for the prompt cache:
        the stable prefix every turn and every compaction repeats), pinned block last (it changes, so it
        comes after the breakpoint), tools, extras."""
        system = [dict(b) for b in self.system]
        if system and not any("cache_control" in b for b in system):
            system[-1]["cache_control"] = {"type": "ephemeral"}
        if with_pinned and len(self.pinned):
            system.append({"type": "text", "text": self.pinned.render()})
        out: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens, "system": system}
        if self.tools:
            out["tools"] = self.tools
        out["messages"] = messages
        out.update({k: v for k, v in extra.items() if v is not None})
        return out

    def count(self, params: dict[str, Any]) -> int:
        """Input tokens of a request, via count_tokens, cached per identical request."""
        body = {k: params[k] for k in COUNT_FIELDS if k in params}
        key = hashlib.sha256(cmp.canonical(body)).hexdigest()
        if key not in self._count_cache:
            betas = [cmp.COMPACTION_BETA] if cmp.compaction_blocks(body["messages"]) else None
            self._count_cache[key] = int(self.client.count_tokens(body, betas).input_tokens)
        return self._count_cache[key]

    def fits(self, params: dict[str, Any]) -> bool:
        return self.count(params) + int(params["max_tokens"]) <= self.budget_tokens

    def sent_text(self, params: dict[str, Any]) -> str:
        """Everything a request sends outside the summarized range (system + non-summary blocks)."""
        parts = [b.get("text", "") for b in params.get("system") or []]
        for msg in params["messages"]:
            for block in _blocks(msg.get("content")):
                if block.get("type") == "compaction":
                    continue
                text = str(block.get("text", ""))
                if text.startswith(cmp.CLIENT_SUMMARY_MARK):
                    continue
                parts.append(text if block.get("type") == "text" else json.dumps(block, ensure_ascii=False))
        return "\n".join(parts)

    def create(self, betas: list[str] | None, **body: Any) -> Any:
        """One Messages call, streamed, through the transport layer; beta namespace when `betas`.
        Recorded in flight until its cost entry is written (`_recorded`; invariant 13)."""
        kind = "c" if "compaction" in body else "x"
        label = CallLabel(self.pass_name, self.doc_id, f"{self.task_id}-{kind}{self.exchanges + 1:06d}")
        worst = worst_usd(
            str(body.get("model")), estimate_input_tokens(body), int(body.get("max_tokens") or 0)
        )
        life, ceiling = life_of(self.client), self.client.concurrency
        mark = self.inflight.open_call(safe_group(label.key), life, ceiling, worst or 0.0)
        try:
            reply = self.client.stream(body, label=label, betas=betas)
        except BaseException:
            self.inflight.close(mark)  # the transport layer recorded a paid attempt without an answer
            raise
        self._open_calls.append(mark)
        return reply

    def _recorded(self) -> None:
        """The answers of the calls sent so far are in the cost ledger: no longer in flight."""
        marks, self._open_calls = self._open_calls, []
        for mark in marks:
            self.inflight.close(mark)

    # ---- compaction --------------------------------------------------------------------------

    def compact(self, pending: dict[str, Any], extra: dict[str, Any]) -> None:
        """Archive, summarize the oldest range, verify pinned facts, checkpoint the new history."""
        if len(self.messages) < 2:
            raise ContextError(
                f"task {self.task_id}: one turn alone exceeds the budget of {self.budget_tokens} tokens",
                hint="raise budget_tokens or send smaller turns",
            )
        seq = self.archive.archive(self.messages, len(self.compactions))
        crash_point("compaction_archived")
        sizes = [cmp.estimate_tokens(m) for m in self.messages]
        cuts = cmp.choose_cut(self.messages, sizes, self.keep_tokens)
        instructions = cmp.contract(self.pinned.keep_terms(limit=self.keep_terms_limit))
        base = self.params([], with_pinned=False, **extra)  # the pinned block is not summarized
        base["max_tokens"] = self.max_tokens
        room = self.budget_tokens - len(instructions) // 3 - self.max_tokens
        chosen = next(
            (c for c in cuts if self.count({**base, "messages": self.messages[: c + 1]}) <= room), None
        )
        if chosen is None:
            raise ContextError(
                f"task {self.task_id}: no summarizable range fits in {self.budget_tokens} tokens "
                f"({self._pinned_note()})",
                hint="raise budget_tokens, lower max_tokens or send smaller turns",
            )
        request = {**base, "messages": self.messages[: chosen + 1]}
        done = cmp.compact(self.create, request, instructions)
        n = len(self.compactions) + 1
        for model, usage, request_id in done.billed_before:  # e.g. a null block, then the fallback
            self._record_cost(f"c{n:04d}", model, usage, request_id)
        self._record_cost(f"c{n:04d}", done.model, done.usage, done.request_id)
        self._recorded()
        crash_point("compaction_returned")
        new_messages = [done.head, *self.messages[chosen + 1 :]]
        probe = self.params([*new_messages, pending], **extra)
        missing = self.pinned.missing_from(self.sent_text(probe))
        if missing:
            raise PinnedFactLost(
                f"task {self.task_id}: {len(missing)} pinned fact(s) would be missing after compaction "
                f"{n}: {missing[:3]}",
                hint="the last checkpoint is kept; fix the pinned block so it stays outside the summary",
                missing=missing,
                task_id=self.task_id,
            )
        self.messages = new_messages
        self.block_digest = done.digest
        self.compactions.append(
            {
                "n": n,
                "strategy": str(done.strategy),
                "archive_seq": seq,
                "at_exchange": self.exchanges,
                "summarized_messages": chosen + 1,
                "notes": done.notes,
            }
        )
        self.checkpoint()
        crash_point("compaction_checkpointed")

    # ---- the exchange ------------------------------------------------------------------------

    def send(
        self,
        content: str | list[dict[str, Any]],
        *,
        max_tokens: int | None = None,
        output_config: dict[str, Any] | None = None,
        tool_choice: dict[str, Any] | None = None,
        on_reply: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """One exchange within budget; returns the assistant message (dict).

        `on_reply(message)` runs before the exchange is checkpointed, so state it writes to
        `self.state` / `self.pinned` is saved atomically with the exchange.
        """
        pending = {"role": "user", "content": _blocks(content)}
        # a turn's own max_tokens goes in its request only; a compaction keeps the task's
        extra: dict[str, Any] = {
            "output_config": output_config,
            "tool_choice": tool_choice,
            "max_tokens": max_tokens,
        }
        params = self.params([*self.messages, pending], **extra)
        rounds = 0
        while not self.fits(params):
            if rounds >= MAX_COMPACTIONS_PER_TURN:
                raise ContextError(
                    f"task {self.task_id}: still {self.count(params)} tokens after {rounds} compactions "
                    f"(budget {self.budget_tokens}; {self._pinned_note()})",
                    hint="raise budget_tokens, shrink the pinned facts or send smaller turns",
                )
            self.compact(pending, extra)
            rounds += 1
            params = self.params([*self.messages, pending], **extra)
        cmp.check_block(params["messages"], self.block_digest)
        reply = self.create([cmp.COMPACTION_BETA] if self.block_digest else None, **params)
        data = reply.model_dump(mode="json")
        self._record_cost(
            f"x{self.exchanges + 1:06d}",
            str(params.get("model") or data.get("model")),  # priced by the model asked for
            data.get("usage") or {},
            getattr(reply, "_request_id", None),
            data.get("model"),
        )
        self._recorded()
        crash_point("exchange_returned")
        self.messages = [
            *self.messages,
            pending,
            {"role": "assistant", "content": [_dump_block(b) for b in reply.content]},
        ]
        self.exchanges += 1
        if on_reply is not None:
            on_reply(data)
        self.checkpoint()
        crash_point("exchange_checkpointed")
        return data

    def forget_history(self) -> None:
        """Drop the exchanges so far; pinned facts, scratchpad and `state` stay. The next turn goes
        out alone with the pinned facts (for turns that need no history: tasks.per_file.longdoc)."""
        self.messages = []
        self.block_digest = None

    def _pinned_note(self) -> str:
        return f"the pinned facts alone take about {len(self.pinned.render()) // 4} tokens"

    def _record_cost(
        self, suffix: str, model: str, usage: dict[str, Any], request_id: str | None, answered: Any = None
    ) -> None:
        entry = CostEntry.from_usage(
            run_id=self.run_id,
            pass_name=self.pass_name,
            doc_id=self.doc_id,
            key=f"{self.task_id}-{suffix}",
            attempt=1,
            model=model,
            request_id=request_id,
            usage=usage,
            answered_model=str(answered) if answered else None,
        )
        # one group per API call: a call repeated after a crash is billed again, so it is recorded again
        group = f"{self.task_id}-{suffix}-{request_id or 'unknown'}"
        CostLedger(self.store, self.run_id).record(safe_group(group), [entry])

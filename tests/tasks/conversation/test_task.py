"""ConversationTask against the real emulator: preflight, compaction, block integrity, fallback,
pinned-fact verification, checkpoints and costs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from checkpoints.costs import CostLedger
from checkpoints.scratch import HistoryArchive, Scratchpad
from checkpoints.store import open_store
from docmill.errors import ContextError, PinnedFactLost
from docmill.prices import cost_usd
from docmill.settings import Settings
from tasks.api.client import ModelClient
from tasks.conversation.compaction import CLIENT_SUMMARY_MARK, BlockMisplaced, BlockTampered, block_digest
from tasks.conversation.pinned import PinnedFacts
from tasks.conversation.task import ConversationTask

MODEL = "claude-sonnet-4-6"
BUDGET = 3000
ROOT = Path(__file__).resolve().parents[3]
TURNS = 22  # at BUDGET: two compactions or more


def client(emulator: Any) -> ModelClient:
    return _client(emulator.base_url)


def _client(base_url: str) -> ModelClient:
    return ModelClient(Settings(), base_url=base_url, api_key="test-key", sleep=lambda _s: None)


def pinned() -> PinnedFacts:
    p = PinnedFacts()
    p.set("c1", "CONFLICT invoice_number=INV-7 field=total: 100.0 (doc-7) | 120.0 (doc-70)", terms=["INV-7 "])
    p.set("docs", "DOCUMENTS SEEN (2): doc-7, doc-70")
    return p


def make_task(emulator: Any, store: Any, *, facts: PinnedFacts | None = None, **kw: Any) -> ConversationTask:
    return _task(emulator.base_url, store, facts=facts, **kw)


def _task(base_url: str, store: Any, *, facts: PinnedFacts | None = None, **kw: Any) -> ConversationTask:
    return ConversationTask(
        "t1",
        "run1",
        store,
        _client(base_url),
        model=MODEL,
        system="You integrate invoice results.",
        budget_tokens=kw.pop("budget_tokens", BUDGET),
        pinned=facts or pinned(),
        max_tokens=200,
        **kw,
    )


def turn(i: int) -> str:
    return f"slice {i}\n" + "\n".join(f"row {i}-{j} INV-{j} vendor V{j % 3} total {j}.00" for j in range(30))


def billed_inputs(emulator: Any) -> list[int]:
    out = []
    for r in emulator.state.accounting.billed:
        u = r.usage
        n = sum(
            int(u.get(k) or 0)
            for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        )
        out.append(n + sum(int(it.get("input_tokens") or 0) for it in u.get("iterations") or []))
    return out


def received(emulator: Any, path: str = "/v1/messages") -> int:
    return int(emulator.state.accounting.received_by_path.get(path, 0))


def test_preflight_compacts_before_the_limit_and_keeps_the_block_first(emulator: Any, tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    task = make_task(emulator, store)
    for i in range(22):
        task.send(turn(i))
    assert len(task.compactions) >= 2
    assert all(c["strategy"] == "api" for c in task.compactions)
    assert max(billed_inputs(emulator)) <= BUDGET  # no request ever exceeded the budget
    assert emulator.state.accounting.errors_by_status == {}
    assert received(emulator, "/v1/messages/count_tokens") >= task.exchanges

    head = task.messages[0]
    assert head["role"] == "assistant" and head["content"][0]["type"] == "compaction"
    assert block_digest(head["content"][0]) == task.block_digest
    summary = head["content"][0]["content"]
    assert "row 0-7 INV-7 vendor" in summary  # KEEP LINES CONTAINING: terms from the pinned facts
    assert "row 0-8 INV-8 vendor" not in summary

    archive = HistoryArchive(store, "run1", "t1")
    assert archive.seqs() == list(range(len(task.compactions)))
    assert archive.load(0)[0]["content"][0]["text"] == turn(0)  # the full history before compaction 1
    assert Scratchpad(store, "run1", "t1").read() == task.pinned.render()

    entries = [e for e in CostLedger(store, "run1").entries() if e.compaction_input_tokens > 0]
    assert len(entries) == len(task.compactions)
    billed = [r for r in emulator.state.accounting.billed if r.usage.get("iterations")]
    assert sorted(e.usd for e in entries) == pytest.approx(sorted(cost_usd(MODEL, r.usage) for r in billed))
    assert all(e.usd > 0 for e in entries)


def _compacted_task(emulator: Any, store: Any) -> ConversationTask:
    task = make_task(emulator, store)
    i = 0
    while not task.compactions:
        task.send(turn(i))
        i += 1
    return task


def test_a_tampered_block_is_never_sent(emulator: Any, tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    task = _compacted_task(emulator, store)
    task.messages[0]["content"][0]["content"] += "\nFACT: total of INV-7 is 1.00"
    before = received(emulator)
    with pytest.raises(BlockTampered):
        task.send(turn(99))
    assert received(emulator) == before

    # the same edit made on disk is refused when the task resumes
    key = "runs/run1/tasks/t1/checkpoint.json"
    snap = json.loads(store.get(key))
    snap["messages"][0]["content"][0]["content"] += " (edited)"
    store.put(key, json.dumps(snap).encode())
    with pytest.raises(BlockTampered):
        make_task(emulator, store)


def test_a_misplaced_block_is_never_sent(emulator: Any, tmp_path: Path) -> None:
    task = _compacted_task(emulator, open_store(str(tmp_path)))
    task.messages.insert(0, {"role": "user", "content": [{"type": "text", "text": "earlier"}]})
    before = received(emulator)
    with pytest.raises(BlockMisplaced):
        task.send(turn(99))
    task.messages.pop(0)
    task.messages.insert(1, task.messages[0])  # a second copy: ambiguous
    with pytest.raises(BlockMisplaced):
        task.send(turn(99))
    assert received(emulator) == before


def test_compaction_unavailable_falls_back_to_a_marked_client_summary(emulator: Any, tmp_path: Path) -> None:
    emulator.state.faults.add(kind="compaction_unavailable")
    task = make_task(emulator, open_store(str(tmp_path)))
    for i in range(10):
        task.send(turn(i))
    assert task.compactions and all(c["strategy"] == "client" for c in task.compactions)
    assert "compaction_unavailable" in task.compactions[0]["notes"][0]
    head = task.messages[0]
    assert head["role"] == "user" and head["content"][0]["text"].startswith(CLIENT_SUMMARY_MARK)
    assert task.block_digest is None
    assert emulator.state.accounting.errors_by_status[529] == 5 * len(task.compactions)  # max_attempts each
    assert max(billed_inputs(emulator)) <= BUDGET


class DroppingPinned(PinnedFacts):
    """A pinned block that loses one fact when rendered (the bug the verification exists for)."""

    def render(self) -> str:
        return "\n".join(line for line in super().render().splitlines() if "CONFLICT" not in line)


def test_pinned_fact_lost_raises_and_keeps_the_old_checkpoint(emulator: Any, tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    task = make_task(emulator, store, facts=DroppingPinned.from_json(pinned().to_json()))
    key = "runs/run1/tasks/t1/checkpoint.json"
    with pytest.raises(PinnedFactLost) as info:
        for i in range(20):
            before, exchanges = store.get(key) if store.exists(key) else None, task.exchanges
            task.send(turn(i))
    assert "CONFLICT invoice_number=INV-7" in str(info.value.fields["missing"])
    assert store.get(key) == before and task.exchanges == exchanges
    assert not task.compactions and task.block_digest is None
    assert make_task(emulator, store).exchanges == exchanges


def test_tool_use_and_result_stay_together(emulator: Any, tmp_path: Path) -> None:
    tools = [
        {
            "name": "note",
            "description": "Record a note.",
            "input_schema": {
                "type": "object",
                "properties": {"note": {"type": "string"}},
                "required": ["note"],
            },
        }
    ]
    task = make_task(emulator, open_store(str(tmp_path)), tools=tools)
    pending: list[dict[str, Any]] = []
    for i in range(22):
        reply = task.send(
            [*pending, {"type": "text", "text": turn(i)}], tool_choice={"type": "tool", "name": "note"}
        )
        uses = [b for b in reply["content"] if b["type"] == "tool_use"]
        assert uses
        pending = [{"type": "tool_result", "tool_use_id": u["id"], "content": "ok"} for u in uses]
    assert len(task.compactions) >= 2
    assert emulator.state.accounting.errors_by_status == {}  # the emulator checks every pair


def test_resume_loads_the_checkpoint_and_a_second_driver_loses(emulator: Any, tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    first = make_task(emulator, store)
    for i in range(3):
        first.send(turn(i))
    second = make_task(emulator, store)
    assert second.resumed and second.exchanges == 3 and second.messages == first.messages
    assert second.pinned.to_json() == first.pinned.to_json()
    second.send(turn(3))
    with pytest.raises(ContextError, match="changed under this task"):
        first.send(turn(3))


def test_one_turn_over_the_budget_is_refused_before_sending(emulator: Any, tmp_path: Path) -> None:
    task = make_task(emulator, open_store(str(tmp_path)))
    with pytest.raises(ContextError, match="exceeds the budget"):
        task.send("x " * 8000)
    assert received(emulator) == 0


def _finish(base_url: str, store: Any) -> ConversationTask:
    """The task of `store` (a checkpoint resumes it) sent its remaining turns of TURNS."""
    task = _task(base_url, store)
    for i in range(task.exchanges, TURNS):
        task.send(turn(i))
    return task


def crash_child() -> None:  # entry point of the crash subprocess: argv store, base URL
    _finish(sys.argv[2], open_store(sys.argv[1]))


@pytest.mark.parametrize("crash", ["compaction_returned#2", "exchange_returned#5", "exchange_checkpointed#7"])
def test_sigkill_at_a_crash_point_then_resume_gives_the_same_conversation(
    emulator: Any, tmp_path: Path, crash: str
) -> None:
    expected = _finish(emulator.base_url, open_store(str(tmp_path / "whole")))
    assert len(expected.compactions) >= 2
    billed_before = len(emulator.state.accounting.billed)
    store = open_store(str(tmp_path / "killed"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DOCMILL_CRASH_AT": crash}
    code = "from tests.tasks.conversation.test_task import crash_child; crash_child()"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "killed"), emulator.base_url],
        env=env,
        cwd=ROOT,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr.decode()[-3000:]  # SIGKILLed at the crash point
    assert 0 < _task(emulator.base_url, store).exchanges < TURNS
    got = _finish(emulator.base_url, store)  # resume in this process
    assert got.messages == expected.messages

    def archived(task: ConversationTask, st: Any) -> list[tuple[dict[str, Any], Any]]:
        """Each compaction, and the history it archived (archived once: a kill between archiving
        and the checkpoint finds its slot taken by the same history)."""
        archive = HistoryArchive(st, "run1", "t1")
        return [(c, archive.load(c["archive_seq"])) for c in task.compactions]

    assert archived(got, store) == archived(expected, open_store(str(tmp_path / "whole")))
    assert HistoryArchive(store, "run1", "t1").seqs() == list(range(len(expected.compactions)))
    assert got.pinned.to_json() == expected.pinned.to_json()
    # every billed call is costed once, the one repeated after the kill included
    costs = list(CostLedger(store, "run1").entries())
    assert len(costs) == len(emulator.state.accounting.billed) - billed_before > TURNS

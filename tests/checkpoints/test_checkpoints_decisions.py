"""Review decisions on both backends: append-only (each its own object, written once, numbered),
the last one in force, who and when kept, documents whose ids nest (`a` and `a/b`) kept apart."""

from __future__ import annotations

import threading

from checkpoints.decisions import Action, ReviewDecisions
from checkpoints.store import ObjectStore


def test_decisions_append_and_the_last_is_in_force(store: ObjectStore) -> None:
    d = ReviewDecisions(store, "run-1")
    first = d.record("inv/a.txt", Action.CORRECT, by="alice", values={"total": 10.5}, note="p.2", at=100.0)
    second = d.record("inv/a.txt", Action.ACCEPT, by="bob", at=200.0)
    d.record("inv", Action.REJECT, by="carol", values={"invoice_number": "X"})  # a prefix of the other id
    assert (first.seq, second.seq) == (1, 2)
    history = d.history("inv/a.txt")
    assert [(x.seq, x.action, x.by, x.at) for x in history] == [
        (1, "correct", "alice", 100.0),
        (2, "accept", "bob", 200.0),
    ]
    assert history[0].values == {"total": 10.5} and history[0].note == "p.2"
    assert [x.doc_id for x in d.history("inv")] == ["inv"]
    in_force = d.in_force()
    assert in_force["inv/a.txt"].by == "bob" and in_force["inv"].action is Action.REJECT
    keys = sorted(store.list("runs/run-1/decisions/"))
    assert len(keys) == 3  # nothing overwritten
    assert store.get_json(keys[-1])["by"] in {"alice", "bob", "carol"}
    assert ReviewDecisions(store, "run-2").in_force() == {}


def test_concurrent_reviewers_never_overwrite_each_other(store: ObjectStore) -> None:
    d = ReviewDecisions(store, "run-1")
    errors: list[BaseException] = []

    def decide(who: str) -> None:
        try:
            ReviewDecisions(store, "run-1").record("doc.txt", Action.ACCEPT, by=who)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=decide, args=(f"r{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    history = d.history("doc.txt")
    assert sorted(x.seq for x in history) == list(range(1, 7)) and {x.by for x in history} == {
        f"r{i}" for i in range(6)
    }

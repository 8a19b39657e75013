"""The integration state's delta (pure): what is new, changed, removed, and what a retraction frees."""

from __future__ import annotations

from tasks.integration.state import (
    NO_NOTES,
    apply_delta,
    empty_state,
    fingerprint,
    fingerprints,
    mark_without_notes,
    record_refs,
    record_slice,
)


def test_delta_retracts_the_slices_of_removed_and_changed_documents() -> None:
    state = empty_state({"source": "s"})
    first = apply_delta(state, {"a": "1", "b": "1", "c": "1", "d": "1", "e": "1"})
    assert first.added == ["a", "b", "c", "d", "e"] and first.needs_notes == first.added
    record_slice(state, "s1", {"doc_ids": ["a", "b"], "key": "k1", "output": {}, "run_id": "r1"})
    record_slice(state, "s2", {"doc_ids": ["c", "d"], "key": "k2", "output": {}, "run_id": "r1"})
    mark_without_notes(state, ["e"])

    same = apply_delta(state, {"a": "1", "b": "1", "c": "1", "d": "1", "e": "1"})
    assert same.counts() == {k: 0 for k in same.counts()}

    delta = apply_delta(state, {"a": "1", "c": "2", "d": "1", "e": "1", "f": "1"})  # b gone, c changed
    assert (delta.added, delta.changed, delta.removed) == (["f"], ["c"], ["b"])
    assert sorted(delta.retracted_slices) == ["s1", "s2"] and state["slices"] == {}
    assert delta.pending == ["a", "d"]  # unchanged, but their slice went with b and c
    assert delta.needs_notes == ["a", "c", "d", "f"]
    assert "b" not in state["docs"] and state["docs"]["e"]["slice"] == NO_NOTES


def _ledger_hit(doc_id: str, key: str, total: str) -> dict[str, object]:
    return {
        "doc_id": doc_id,
        "key": key,
        "state": "succeeded",
        "from_ledger": True,
        "output": {"total": total},
    }


def test_a_ledger_result_whose_ref_is_recorded_is_not_encoded_again() -> None:
    """An unchanged nightly's results are ledger hits: the fingerprint the state recorded with the
    result's ref is taken as it is (here a marker, to see it was not computed); a result with
    another key, answered in its run or carrying a review decision is fingerprinted."""
    state = empty_state({})
    first = [_ledger_hit("a", "k1", "1"), _ledger_hit("b", "k2", "2"), {"doc_id": "c", "state": "failed"}]
    fps, refs = fingerprints(first, state)
    assert fps == {o["doc_id"]: fingerprint(o) for o in first}
    assert set(refs) == {"a", "b"}
    apply_delta(state, fps)
    assert record_refs(state, refs) is True
    assert record_refs(state, refs) is False  # recorded: the state need not be written again
    state["docs"]["a"]["fp"] = "marker"
    state["docs"]["b"]["fp"] = "marker"
    again = [_ledger_hit("a", "k1", "1"), _ledger_hit("b", "k9", "9"), {"doc_id": "c", "state": "failed"}]
    fps, _ = fingerprints(again, state)
    assert fps["a"] == "marker"  # same key, state and reason: not encoded again
    assert fps["b"] == fingerprint(again[1])  # another key: another result
    reviewed = {**_ledger_hit("a", "k1", "1"), "review": {"decision": "corrected"}}
    assert fingerprints([reviewed], state)[0]["a"] == fingerprint(reviewed)
    answered = {**_ledger_hit("a", "k1", "1"), "from_ledger": False}
    assert fingerprints([answered], state)[0]["a"] == fingerprint(answered)

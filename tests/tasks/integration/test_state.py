"""The integration state's delta (pure): what is new, changed, removed, and what a retraction frees."""

from __future__ import annotations

from tasks.integration.state import NO_NOTES, apply_delta, empty_state, mark_without_notes, record_slice


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

"""A batch item's stored line: every field that is not a default, nothing shared that can change."""

from __future__ import annotations

import dataclasses
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.batch.items import WorkItem

texts = st.text(max_size=8)
items = st.builds(
    WorkItem,
    custom_id=texts,
    doc=st.fixed_dictionaries({"doc_id": texts}, optional={"pages": st.integers(0, 9)}),
    max_tokens=st.integers(1, 64_000),
    request=st.none() | st.fixed_dictionaries({"model": texts, "max_tokens": st.integers(1, 9)}),
    action=st.none() | st.sampled_from(["repair", "retry_larger"]),
    rounds=st.integers(0, 3),
    attempts=st.integers(0, 3),
    repairs=st.integers(0, 3),
    repair_tokens=st.integers(0, 999),
    truncation_retries=st.integers(0, 2),
    usage=st.dictionaries(st.sampled_from(["input_tokens", "output_tokens"]), st.integers(0, 99)),
    cost_usd=st.sampled_from([0.0, 0.25]),
    request_ids=st.lists(texts, max_size=2),
    last_error=st.none() | texts,
)


@settings(max_examples=100, deadline=None)
@given(items)
def test_a_line_holds_every_field_that_is_not_a_default_and_reads_back(item: WorkItem) -> None:
    line = item.to_line()
    everything = dataclasses.asdict(item)
    defaults = {
        f.name: f.default for f in dataclasses.fields(WorkItem) if f.default is not dataclasses.MISSING
    }
    defaults |= {
        f.name: f.default_factory()  # type: ignore[misc]
        for f in dataclasses.fields(WorkItem)
        if f.default_factory is not dataclasses.MISSING
    }
    expected = {k: v for k, v in everything.items() if k not in defaults or v != defaults[k]}
    assert line == expected and list(line) == list(expected)  # the same keys, in field order
    assert WorkItem.from_line(json.loads(json.dumps(line))) == item


def test_a_line_keeps_what_it_held_when_the_item_changes_afterwards() -> None:
    """A collected record's carry is made of lines while its items go on to a later round."""
    item = WorkItem("k", {"doc_id": "d"}, 8, request={"max_tokens": 8}, usage={"input_tokens": 1})
    item.request_ids.append("b1")
    line = item.to_line()
    assert item.request is not None
    item.request["max_tokens"] = 16
    item.usage["input_tokens"] += 5
    item.request_ids.append("b2")
    assert line["request"] == {"max_tokens": 8}
    assert line["usage"] == {"input_tokens": 1} and line["request_ids"] == ["b1"]

"""RepeatedJson gives json.dumps's text exactly, whatever repeats between calls."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.api import usage
from tasks.api.usage import COMPACT, WIDE, RepeatedJson, estimate_input_tokens, same_json

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([0.0, -0.0, 1.0, 1.5])
    | st.text(max_size=4)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)
bodies = st.dictionaries(
    st.sampled_from(["model", "system", "messages", "output_config"]), values, max_size=4
)


@settings(max_examples=150, deadline=None)
@given(st.lists(bodies, min_size=1, max_size=6), st.sampled_from([WIDE, COMPACT]))
def test_each_call_is_json_dumps_text_for_text(
    calls: list[dict[str, Any]], separators: tuple[str, str]
) -> None:
    encoder = RepeatedJson(separators, repeated=("model", "system", "messages", "output_config"))
    for body in calls:
        assert encoder.dumps(body) == json.dumps(body, ensure_ascii=False, separators=separators)


def test_values_equal_to_python_but_not_in_json_are_encoded_again() -> None:
    """1 == 1.0 == True, 0.0 == -0.0, and dicts equal in another key order: each its own text."""
    encoder = RepeatedJson(COMPACT, repeated=("v",))
    for value in (1, 1.0, True, 0.0, -0.0, {"a": 1, "b": 2}, {"b": 2, "a": 1}, [1], (1,)):
        assert encoder.dumps({"v": value}) == json.dumps({"v": value}, separators=COMPACT)
    assert not same_json({"a": 1, "b": 2}, {"b": 2, "a": 1}) and not same_json(1, True)


def test_the_estimate_with_a_repeated_encoder_is_the_plain_estimate() -> None:
    encoder = RepeatedJson(WIDE)
    system = [{"type": "text", "text": "rules é " * 50, "cache_control": {"type": "ephemeral"}}]
    for i in range(3):
        request = {
            "model": "m",
            "max_tokens": 9,
            "system": system,
            "messages": [{"role": "user", "content": "d" * i}],
        }
        assert estimate_input_tokens(request, encoder.dumps) == estimate_input_tokens(request)


def test_an_equal_copy_is_walked_once_then_the_shared_object_is_compared_by_identity(
    monkeypatch: Any,
) -> None:
    """One request may carry an equal copy of the schema its requests share (built on another
    thread): after it, the shared object is compared by identity, not walked again per request."""
    schema = {"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(50)}}
    copy = json.loads(json.dumps(schema))
    encoder = RepeatedJson(COMPACT, repeated=("output_config",))
    walked: list[bool] = []
    compare = usage.same_json
    monkeypatch.setattr(usage, "same_json", lambda a, b: walked.append(a is not b) or compare(a, b))
    per_call = []
    for value in (copy, schema, schema, schema):
        walked.clear()
        body = {"output_config": {"format": {"schema": value}}}
        assert encoder.dumps(body) == json.dumps(body, separators=COMPACT)
        per_call.append(sum(walked))
    assert per_call[1] > 50  # the copy against the shared object: every node
    assert per_call[2:] == [2, 2]  # then only the two dicts made per request

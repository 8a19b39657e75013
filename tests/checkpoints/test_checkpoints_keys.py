"""Keys: idempotency keys are pure and collision-free, unsafe names are refused."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoints.keys import (
    IDEMPOTENCY_KEY_RE,
    content_hash,
    idempotency_key,
    safe_key,
    safe_segment,
    sha256_hex,
)
from docmill.errors import UnsafeKey

json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=20)
params = st.dictionaries(st.text(max_size=10), json_scalars, max_size=4)
inputs = st.tuples(
    st.text(max_size=40),  # pass name, anything
    st.text(max_size=10),
    st.text(alphabet="0123456789abcdef", min_size=0, max_size=64),
    st.text(alphabet="0123456789abcdef", min_size=0, max_size=64),
    st.text(max_size=30),
    st.text(alphabet="0123456789abcdef", min_size=0, max_size=64),
    params,
)


@given(inputs)
@settings(max_examples=200, deadline=None)
def test_idempotency_key_shape_and_purity(args: tuple) -> None:
    key = idempotency_key(*args)
    assert IDEMPOTENCY_KEY_RE.match(key), key
    assert idempotency_key(*args) == key
    copied = (*args[:-1], dict(reversed(list(args[-1].items()))))  # dict order does not matter
    assert idempotency_key(*copied) == key


@given(inputs, inputs)
@settings(max_examples=200, deadline=None)
def test_distinct_inputs_distinct_keys(a: tuple, b: tuple) -> None:
    if a != b:
        assert idempotency_key(*a) != idempotency_key(*b)


@pytest.mark.parametrize("field", range(7))
def test_every_input_changes_the_key(field: int) -> None:
    base: list[Any] = ["file", "1", "p" * 64, "s" * 64, "claude-sonnet-4-6", "d" * 64, {"max_tokens": 100}]
    changed = list(base)
    changed[field] = {"max_tokens": 101} if field == 6 else str(base[field]) + "x"
    assert idempotency_key(*base) != idempotency_key(*changed)


def test_idempotency_key_is_readable() -> None:
    key = idempotency_key("per-file review!", "1", "a", "b", "m", "c", {})
    assert key.startswith("per-file-rev_")
    assert len(key) <= 64


def test_content_hash_is_order_independent() -> None:
    assert content_hash({"a": 1, "b": [1, 2]}) == content_hash({"b": [1, 2], "a": 1})
    assert content_hash({"a": 1}) != content_hash({"a": 2})
    assert sha256_hex(b"") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    with pytest.raises(ValueError):
        content_hash({"x": float("nan")})


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("a/b.txt", "a/b.txt"),
        ("a\\b\\c.pdf", "a/b/c.pdf"),
        ("./a//b/./c", "a/b/c"),
        ("Ünïcødé/日本語.txt", "Ünïcødé/日本語.txt"),
        ("with space.md", "with space.md"),
    ],
)
def test_safe_key_normalizes(name: str, key: str) -> None:
    assert safe_key(name) == key


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "empty"),
        ("./", "empty"),
        ("../etc/passwd", "'..'"),
        ("a/../../b", "'..'"),
        ("a\\..\\b", "'..'"),
        ("/etc/passwd", "absolute"),
        ("\\\\server\\share", "absolute"),
        ("C:\\Windows", "absolute"),
        ("a\nb", "control"),
        ("a\x00b", "control"),
        ("a\x1bb", "control"),
        ("evil\u202etxt.exe", "control"),
        (".~lock.x", "reserved"),
        ("x" * 300, "bytes"),
    ],
)
def test_unsafe_names_are_refused_clearly(name: str, why: str) -> None:
    with pytest.raises(UnsafeKey) as info:
        safe_key(name)
    assert why in str(info.value)
    assert info.value.hint


@given(st.text(max_size=60))
@settings(max_examples=200, deadline=None)
def test_safe_key_output_is_always_safe(name: str) -> None:
    try:
        key = safe_key(name)
    except UnsafeKey:
        return
    parts = key.split("/")
    assert all(p not in ("", ".", "..") for p in parts)
    assert not key.startswith("/")
    assert safe_key(key) == key  # idempotent


def test_safe_segment_refuses_slashes() -> None:
    assert safe_segment("run-1") == "run-1"
    with pytest.raises(UnsafeKey):
        safe_segment("a/b")


def test_fitted_key_makes_room_for_a_suffix() -> None:
    from checkpoints.keys import MAX_SEGMENT_BYTES, fitted_key

    assert fitted_key("a/b.txt", ".json") == "a/b.txt.json"
    long = "d/" + "é" * 127  # 254 bytes in its last segment
    key = fitted_key(long, ".json")
    last = key.rsplit("/", 1)[-1]
    assert key.startswith("d/é") and key.endswith(".json") and len(last.encode()) <= MAX_SEGMENT_BYTES
    assert fitted_key(long, ".json") == key != fitted_key(long[:-1] + "x", ".json")  # stable, distinct

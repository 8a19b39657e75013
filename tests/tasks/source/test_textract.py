"""Text extraction: bounded parsers and byte-order marks (no input may stop a run)."""

from __future__ import annotations

import pytest

from tasks.source.readers import BinaryContent, ExtractError, extract_text, json_depth_exceeds


@pytest.mark.parametrize("doc_type", ["json", "txt", "md", "csv", "html", "py"])
def test_bom_encodings_decode(doc_type: str) -> None:
    for enc in ("utf-8-sig", "utf-16", "utf-32"):
        assert "Müller 12" in extract_text(doc_type, '{"a": "Müller 12"}'.encode(enc))


def test_nul_in_decoded_utf16_is_binary() -> None:
    with pytest.raises(BinaryContent):
        extract_text("txt", "ab\x00cd".encode("utf-16"))


def test_json_depth_is_bounded_without_recursion() -> None:
    assert not json_depth_exceeds('{"a": "[[[[[[[["}', limit=2)  # brackets inside strings do not count
    assert json_depth_exceeds("[[[", limit=2)
    with pytest.raises(ExtractError, match="nested deeper"):
        extract_text("json", b"[" * 100_000 + b"]" * 100_000)
    assert extract_text("json", b"[" * 100 + b"]" * 100).startswith("[")

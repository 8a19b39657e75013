"""What the model reads of a large delta: bounded, conflicts and duplicates first, plain text."""

from __future__ import annotations

from tasks.integration.digest import choose_reading, delta_digest, state_digest


def records(n: int) -> list[dict[str, object]]:
    return [
        {
            "doc_id": f"d{i:04d}",
            "state": "succeeded" if i % 50 else "needs_review",
            "vendor": f"V{i % 3}",
            "total": i,
        }
        for i in range(n)
    ]


def test_reading_is_bounded_and_takes_conflicts_and_duplicates_first() -> None:
    rs = records(1000)
    facts = {
        "conflicts": [
            {
                "key": "X",
                "field": "total",
                "values": [{"doc_id": "d0500", "value": 1}, {"doc_id": "d0999", "value": 2}],
            }
        ],
        "duplicates": [{"key": "Y", "doc_ids": ["d0007", "d0008"]}],
    }
    chosen = [r["doc_id"] for r in choose_reading(rs, facts, 40)]
    assert len(chosen) == 40 and chosen == sorted(chosen)
    assert {"d0500", "d0999", "d0007", "d0008", "d0050"} <= set(chosen)  # then those not succeeded
    assert choose_reading(rs[:30], facts, 40) == rs[:30]


def test_digests_are_bounded_plain_text() -> None:
    rs = records(5000)
    text = delta_digest(rs, {"conflicts": [], "duplicates": []}, read=100, limit=800)
    assert len(text) <= 800 and "5000 new or changed results" in text and "vendor: 3 distinct values" in text
    assert "{" not in text  # no JSON record the model could mistake for a citable result
    sections = {
        "entities": [{"vendor": f"V{i}", "doc_ids": ["a"] * i} for i in range(50)],
        "key_findings": ["f"] * 50,
    }
    assert len(state_digest(sections, 10_000, 500)) <= 500
    assert state_digest({}, 0, 500) == "Nothing is integrated yet."

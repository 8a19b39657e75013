"""`DigestMap` (checkpoints.outcomes_places): a dict of 16-byte digests to ints in one bytearray, what a
batch-shaped pass keeps per document until the document's outcome comes (flows.run.passes.Unwritten),
so the pass's memory grows by tens of bytes a document of the corpus, not by a dict entry's ~130."""

from __future__ import annotations

import hashlib
import random
import tracemalloc

import pytest

from checkpoints.chunks import chunk_id
from checkpoints.outcomes_places import DigestMap
from checkpoints.outcomes_places import digest as doc_digest
from flows.run.passes import PLACES, Unwritten
from tasks.per_file.outcome import DocOutcome, DocState


def digest(i: int) -> bytes:
    return hashlib.blake2b(str(i).encode(), digest_size=16).digest()


def test_it_answers_as_a_dict_through_growth_removal_and_shrinking() -> None:
    rng = random.Random(7)
    table, model = DigestMap(), dict[bytes, int]()
    for _ in range(30_000):
        key, op = digest(rng.randrange(6000)), rng.random()
        if op < 0.55:
            value = rng.randrange(1 << 60)
            table[key] = value
            model[key] = value
        elif op < 0.9:
            assert table.pop(key, None) == model.pop(key, None)
        else:
            assert (key in table) == (key in model)
            assert table.get(key) == model.get(key)
        assert len(table) == len(model)
    for key in list(model):  # emptied: shrinks back, and what is left is still found
        assert table.pop(key) == model.pop(key)
    assert len(table) == 0 and table.get(digest(1)) is None
    table.add(digest(1))
    assert digest(1) in table and table.get(digest(1)) == 0
    with pytest.raises(ValueError):
        table[b"short"] = 1
    with pytest.raises(ValueError):
        table[digest(2)] = -1


DOCS, SIZE = 5_000, 50


def record(i: int) -> dict[str, object]:
    return {
        "doc_id": f"archive/2026/suppliers/invoice-{i:06d}.txt",
        "source_uri": f"file:///srv/archive/2026/suppliers/invoice-{i:06d}.txt",
        "sha256": f"{i:064x}",
        "size": 1000 + i,
        "doc_type": "invoice",
        "text_chars": 900 + i,
    }


def test_a_streamed_document_waits_for_its_outcome_in_tens_of_bytes() -> None:
    """Every document of a run is streamed before the first batch ends: what waits per document is
    what the pass grows by with the corpus (as a dict of digests: ~130 bytes a document)."""
    cuts = (
        (chunk_id(n), [record(i) for i in range(n * SIZE, (n + 1) * SIZE)], SIZE) for n in range(DOCS // SIZE)
    )
    with Unwritten() as unwritten:
        tracemalloc.start()
        try:
            start = tracemalloc.get_traced_memory()[0]
            for _ in unwritten.documents(cuts):
                pass
            held = (tracemalloc.get_traced_memory()[0] - start) / DOCS
        finally:
            tracemalloc.stop()
        assert held < 80, f"{held:.0f} bytes a streamed document"  # as a dict: ~110
        assert unwritten.places.get(doc_digest(str(record(SIZE + 3)["doc_id"]))) == PLACES + 3
        for i in range(SIZE):  # its chunk whole once all of its documents have an outcome
            got = unwritten.add(
                DocOutcome(doc_id=str(record(i)["doc_id"]), state=DocState.SKIPPED, reason="x")
            )
            assert (got is None) == (i < SIZE - 1)
        assert got is not None and got.chunk_id == chunk_id(0) and len(got.outcomes) == SIZE
        assert len(unwritten.places) == DOCS - SIZE

"""A run's exports are encoded once per set of results (tasks.reporting.export_files): a later run with
the same results copies the files, checked by their sha256; other results, a review decision or a
file changed since are encoded anew."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from checkpoints.store import open_store
from tasks.reporting.export_files import INDEX_PREFIX, exports_digest, parquet_available, write_exports
from tasks.reporting.exports import to_jsonl


def outcomes() -> list[dict[str, Any]]:
    hit = {"state": "succeeded", "from_ledger": True, "model": "m", "cost_usd": 0.01}
    return [
        {
            **hit,
            "doc_id": "a.txt",
            "key": "file_a",
            "output": {"total": {"value": "10.00", "evidence": "10.00"}},
        },
        {
            **hit,
            "doc_id": "b.txt",
            "key": "file_b",
            "output": {"total": {"value": "20.00", "evidence": "20.00"}},
        },
        {"doc_id": "c.bin", "key": None, "state": "skipped", "reason": "unsupported_type"},
    ]


def test_the_same_results_copy_the_files_of_the_run_that_encoded_them(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    first = write_exports(store, "runs/one", outcomes())
    assert set(first) == {"jsonl", "csv"} | ({"parquet"} if parquet_available() else set())
    # what run one holds is copied, not encoded again: a marked file whose index names its bytes
    marked = store.get(first["jsonl"]) + b'{"copied": true}\n'
    etag = store.put(first["jsonl"], marked)
    digest = exports_digest(outcomes(), parquet=parquet_available())
    index = store.get_json(f"{INDEX_PREFIX}{digest}.json")
    index["files"]["jsonl"][1], index["etags"]["jsonl"] = hashlib.sha256(marked).hexdigest(), etag
    store.put_json(f"{INDEX_PREFIX}{digest}.json", index)
    second = write_exports(store, "runs/two", outcomes())
    assert second == {k: v.replace("runs/one", "runs/two") for k, v in first.items()}
    assert store.get(second["jsonl"]) == marked
    assert store.get(second["csv"]) == store.get(first["csv"])
    for name in first:  # shared, not written again: the local backend links the file
        assert (tmp_path / "store" / second[name]).stat().st_ino == (
            tmp_path / "store" / first[name]
        ).stat().st_ino
    # an entry written before entries had ETags: its files read, checked by sha256 and written
    del index["etags"]
    store.put_json(f"{INDEX_PREFIX}{digest}.json", index)
    third = write_exports(store, "runs/three", outcomes())
    assert store.get(third["jsonl"]) == marked
    assert (tmp_path / "store" / third["csv"]).stat().st_ino != (
        tmp_path / "store" / first["csv"]
    ).stat().st_ino


def test_a_changed_file_other_results_or_a_decision_are_encoded_anew(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    first = write_exports(store, "runs/one", outcomes())
    store.put(first["jsonl"], b"edited by hand\n")  # its sha256 no longer matches the index
    assert store.get(write_exports(store, "runs/two", outcomes())["jsonl"]) == to_jsonl(outcomes())
    changed = outcomes()
    changed[2] = {**changed[2], "reason": "empty"}  # not from the ledger: counts whole
    assert exports_digest(changed, parquet=False) != exports_digest(outcomes(), parquet=False)
    assert store.get(write_exports(store, "runs/three", changed)["jsonl"]) == to_jsonl(changed)
    decided = outcomes()
    decided[0] = {**decided[0], "review": {"action": "accept", "by": "ana"}}
    assert exports_digest(decided, parquet=False) != exports_digest(outcomes(), parquet=False)
    other_key = outcomes()
    other_key[1] = {**other_key[1], "key": "file_b2"}  # another result of the ledger
    assert exports_digest(other_key, parquet=False) != exports_digest(outcomes(), parquet=False)


def test_the_run_that_stored_the_answers_and_the_nights_reading_them_share_one_digest(tmp_path: Path) -> None:
    """A run's fresh answers are the ledger's records for their keys: the next night, which reads them
    from the ledger, has the same digest and shares the files the answering run encoded."""
    store = open_store(str(tmp_path / "store"))
    fresh = [{**o, "from_ledger": False} if o["key"] else o for o in outcomes()]
    assert exports_digest(fresh, parquet=False) == exports_digest(outcomes(), parquet=False)
    first = write_exports(store, "runs/one", fresh)
    assert store.get(first["jsonl"]) == to_jsonl(fresh)
    second = write_exports(store, "runs/two", outcomes())
    assert (tmp_path / "store" / second["csv"]).stat().st_ino == (
        tmp_path / "store/runs/one/exports/results.csv"
    ).stat().st_ino
    # a fresh failure (not in the ledger: its attempts and cost are this run's) counts whole
    failed = [*fresh[:2], {"doc_id": "c.bin", "key": "file_c", "state": "failed", "attempts": 3}]
    again = [*fresh[:2], {**failed[2], "attempts": 1}]
    assert exports_digest(failed, parquet=False) != exports_digest(again, parquet=False)


def test_copied_exports_do_not_import_pyarrow(tmp_path: Path) -> None:
    """An unchanged run copies its exports: it never pays for importing pyarrow (checked in a fresh
    interpreter, as a run starts)."""
    store = open_store(str(tmp_path / "store"))
    write_exports(store, "runs/one", outcomes())
    code = (
        "import json, sys\n"
        "from checkpoints.store import open_store\n"
        "from tasks.reporting.export_files import write_exports\n"
        f"keys = write_exports(open_store(sys.argv[1]), 'runs/two', json.loads({json.dumps(json.dumps(outcomes()))}))\n"
        "print(json.dumps([sorted(keys), 'pyarrow' in sys.modules]))\n"
    )
    got = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "store")], capture_output=True, text=True, check=True
    )
    names, imported = json.loads(got.stdout)
    assert names == sorted(["jsonl", "csv"] + (["parquet"] if parquet_available() else []))
    assert imported is False
    assert (tmp_path / "store/runs/two/exports/results.csv").stat().st_ino == (
        tmp_path / "store/runs/one/exports/results.csv"
    ).stat().st_ino

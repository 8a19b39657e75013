"""`docmill eval`: per-field coverage and accuracy against the generator's ground truth, overall and
per format and folder, so one bad segment shows even when the overall number looks good; the
mismatches per document and field (CSV too); a stratified sample of succeeded documents joins the
review queue."""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from checkpoints.review_queue import ReviewQueue
from checkpoints.store import open_store
from docmill.settings import get_settings
from flows.cli.main import main
from flows.entry import RunWiring, run_extract
from flows.run.context import RunParams
from tasks.evaluate import groups_of, stratified_sample
from tests.flows.helpers import make_corpus, settings_for


def test_eval_shows_a_bad_segment_and_samples_for_review(
    tmp_path: Path, emulator: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, truth = make_corpus(tmp_path, count=30, seed=3)
    settings = settings_for(emulator, str(tmp_path / "store"))
    run_id = run_extract(
        RunParams(str(corpus), "invoices"), settings=settings, wiring=RunWiring(progress=False)
    )["run_id"]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(t) + "\n" for t in truth))
    get_settings.cache_clear()

    # a failed document with labels: not covered, and not counted against accuracy
    failed = "misc/scan-0001.txt"  # the planted binary file
    labels.write_text(labels.read_text() + json.dumps({"doc_id": failed, "fields": {"total": 1.0}}) + "\n")
    mismatches = tmp_path / "mismatches.csv"
    assert (
        main(
            [
                "--store",
                settings.store,
                "eval",
                run_id,
                "--labels",
                str(labels),
                "--mismatches",
                str(mismatches),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    allf = re.search(
        r"\*all fields\*\s+accuracy\s+([0-9.]+)% \((\d+)/(\d+)\)\s+coverage\s+([0-9.]+)% \((\d+)/(\d+)\)", out
    )
    assert allf, out
    assert allf.group(1) == "100.0"  # the emulator extracts the truth exactly
    assert (
        float(allf.group(4)) < 100.0 and int(allf.group(6)) == int(allf.group(5)) + 1
    )  # one field not covered
    assert [(m["doc_id"], m["field"], m["kind"]) for m in csv.DictReader(mismatches.open())] == [
        (failed, "total", "missing")
    ]
    assert f"{failed}  total: missing, expected 1.0, got None" in out
    by_format = out.split("by format:")[1].split("by folder:")[0]
    by_folder = out.split("by folder:")[1].split("mismatches:")[0]
    assert re.search(r"^\s+html\s+accuracy", by_format, re.M) and re.search(
        r"^\s+csv\s+accuracy", by_format, re.M
    )
    assert re.search(r"^\s+inbox\s+accuracy", by_folder, re.M) and "inbox" not in by_format
    assert "by type:" not in out

    # Labels that disagree on one folder (a bad segment): overall stays high, the folder shows it.
    docs = [t for t in truth if t["record"] == "document" and t["fields"]]
    folder = Counter(groups_of(t["doc_id"], None)["folder"] for t in docs).most_common()[-1][0]
    bad = [
        {**t, "fields": {**t["fields"], "total": t["fields"]["total"] + 1}}
        if t in docs and groups_of(t["doc_id"], None)["folder"] == folder
        else t
        for t in truth
    ]
    labels.write_text("".join(json.dumps(t) + "\n" for t in bad))
    assert main(["--store", settings.store, "eval", run_id, "--labels", str(labels)]) == 0
    out = capsys.readouterr().out
    overall = float(re.search(r"\*all fields\*\s+accuracy\s+([0-9.]+)%", out).group(1))  # type: ignore[union-attr]
    seg = re.search(rf"^\s+{re.escape(folder)}\s+accuracy\s+([0-9.]+)%.*lowest: total 0%", out, re.M)
    assert seg, out
    assert overall > 90.0 and float(seg.group(1)) < overall
    assert re.search(r"^\s+total\s+accuracy\s+[0-9.]+%", out, re.M)

    assert main(["--store", settings.store, "eval", run_id, "--sample", "5", "--seed", "7"]) == 0
    assert "5 succeeded document(s) added" in capsys.readouterr().out
    store = open_store(settings.store)
    sampled = [i for i in ReviewQueue(store, run_id).list() if i["reason"] == "sample"]
    assert len(sampled) == 5 and all(i["output"] for i in sampled)
    assert len({groups_of(i["doc_id"], None)["folder"] for i in sampled}) >= 4  # spread over strata
    assert main(["--store", settings.store, "eval", run_id]) == 2  # nothing asked: one-line error


def test_stratified_sample_gives_every_stratum_a_document_before_doubling() -> None:
    outcomes = [{"doc_id": f"big/{i}.txt", "state": "succeeded"} for i in range(50)]
    outcomes += [{"doc_id": f"small{k}/{i}.txt", "state": "succeeded"} for k in range(3) for i in range(2)]
    outcomes += [{"doc_id": "failed/x.txt", "state": "failed"}]
    picked = stratified_sample(outcomes, {}, 6, seed=1)
    folders = Counter(o["doc_id"].split("/")[0] for o in picked)
    assert folders == {"big": 3, "small0": 1, "small1": 1, "small2": 1}
    assert stratified_sample(outcomes, {}, 6, seed=1) == picked  # seeded
    assert len(stratified_sample(outcomes, {}, 1000)) == 56  # never more than there are

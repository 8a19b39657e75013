"""The run report renders in headless Chromium with the run's numbers; exports open in
pyarrow/csv and match the outcomes; the review queue has every reason; status reads well."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from checkpoints.costs import CostLedger
from checkpoints.review_queue import ReviewQueue
from checkpoints.store import open_store
from docmill.settings import ApiSettings, Settings, get_settings
from flows.cli import main
from flows.extract import run_extract
from tests.flows.helpers import make_corpus, outcomes_of, plant, value

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's chromium; installed with apt-get when missing (CI on a fresh machine), else a loud failure."""
    path = shutil.which("chromium") or (CHROMIUM if os.path.exists(CHROMIUM) else None)
    if path:
        return path
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        pytest.fail(
            "chromium is missing and cannot be installed here (needs root and apt-get): apt-get install chromium"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in ([apt, "update"], [apt, "install", "-y", "--no-install-recommends", "chromium"]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            pytest.fail(f"`{' '.join(cmd)}` failed: {done.stderr[-800:]}")
    path = shutil.which("chromium")
    if not path:
        pytest.fail("apt-get installed chromium but no `chromium` is on PATH")
    return path


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory, _emulator_session: Any) -> dict[str, Any]:
    """One run with a document that stays schema-invalid, one refusal, and planted conflicts."""
    from emulator.state import EmulatorConfig

    emulator = _emulator_session
    emulator.state.reset(EmulatorConfig())
    tmp = tmp_path_factory.mktemp("report")
    corpus, truth = make_corpus(tmp, count=20, seed=9)
    invalid = plant(corpus, truth, "PLANTED-SCHEMA", set())
    refused = plant(corpus, truth, "PLANTED-REFUSAL", {invalid})
    emulator.state.faults.add(kind="schema_invalid", marker="PLANTED-SCHEMA")
    emulator.state.faults.add(kind="refusal", marker="PLANTED-REFUSAL")
    settings = Settings(store=str(tmp / "store"), api=ApiSettings(base_url=emulator.base_url))
    summary = run_extract(str(corpus), "invoices", settings=settings, progress=False)
    store = open_store(settings.store)
    return {
        "summary": summary,
        "store": store,
        "store_dir": settings.store,
        "run_id": summary["run_id"],
        "invalid": invalid,
        "refused": refused,
        "truth": truth,
        "tmp": tmp,
    }


def test_report_html_renders_in_chromium_with_the_numbers(
    finished_run: dict[str, Any], chromium: str
) -> None:
    store, run_id, s = finished_run["store"], finished_run["run_id"], finished_run["summary"]
    html = store.get(f"runs/{run_id}/report.html").decode()
    assert "<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    page = finished_run["tmp"] / "report.html"
    page.write_text(html)
    profile = finished_run["tmp"] / "chromium-profile"
    shot = finished_run["tmp"] / "report.png"
    common = [chromium, *FLAGS, f"--user-data-dir={profile}"]
    dom = subprocess.run(
        [*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    subprocess.run(
        [*common, f"--screenshot={shot}", "--window-size=1200,1600", page.as_uri()],
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000

    def by_id(ident: str) -> str:
        m = re.search(rf'id="{ident}"[^>]*>([^<]*)<', dom)
        assert m, f"#{ident} is not in the rendered DOM"
        return m.group(1)

    assert by_id("count-total") == str(s["documents"])
    for state, n in s["states"].items():
        assert by_id(f"count-{state}") == str(n)
    total = CostLedger(store, run_id).totals()
    assert by_id("cost-total") == f"${total['usd']:.4f}" and total["usd"] > 0
    assert by_id("cost-entries") == str(total["entries"])
    assert by_id("conflicts") == str(s["conflicts"]) and s["conflicts"] >= 1
    assert by_id("review-total") == str(len(ReviewQueue(store, run_id)))
    assert by_id("phase") == "done"
    assert "<polyline" in dom  # the throughput chart was drawn
    assert finished_run["invalid"] in dom and finished_run["refused"] in dom  # failures with examples
    md = store.get(f"runs/{run_id}/report.md").decode()
    assert f"${total['usd']:.4f}" in md and "## Review queue" in md and "## Coverage gaps" in md


def test_exports_open_and_match_the_outcomes(finished_run: dict[str, Any]) -> None:
    store, run_id = finished_run["store"], finished_run["run_id"]
    outcomes = outcomes_of(store, run_id)
    base = f"runs/{run_id}/exports/results"
    jsonl = [json.loads(line) for line in store.get(f"{base}.jsonl").decode().splitlines()]
    rows = list(csv.DictReader(io.StringIO(store.get(f"{base}.csv").decode())))
    table = pq.read_table(io.BytesIO(store.get(f"{base}.parquet"))).to_pylist()
    assert len(jsonl) == len(rows) == len(table) == len(outcomes) == finished_run["summary"]["documents"]
    assert [r["doc_id"] for r in rows] == [r["doc_id"] for r in table] == [r["doc_id"] for r in jsonl]
    for j, c, p in zip(jsonl, rows, table, strict=True):
        o = outcomes[j["doc_id"]]
        assert j["state"] == c["state"] == p["state"] == o["state"]
        assert float(c["cost_usd"]) == pytest.approx(o["cost_usd"], abs=1e-6)
        if o["state"] == "succeeded":
            for field in ("invoice_number", "total", "currency"):
                want = value(o["output"][field])
                assert j["values"][field] == want
                assert c[f"value.{field}"] == p[f"value.{field}"] == str(want)
            assert c["value.total.evidence"] == o["output"]["total"]["evidence"]
    truth = {t["doc_id"]: t for t in finished_run["truth"] if t["record"] == "document"}
    ok = [
        r for r in rows if r["state"] == "succeeded" and r["doc_id"] in truth and truth[r["doc_id"]]["fields"]
    ]
    assert ok and all(
        float(r["value.total"]) == pytest.approx(truth[r["doc_id"]]["fields"]["total"]) for r in ok
    )


def test_review_queue_has_reasons_raw_output_and_attempts(
    finished_run: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store, run_id = finished_run["store"], finished_run["run_id"]
    items = {i["doc_id"]: i for i in ReviewQueue(store, run_id).list()}
    invalid, refused = items[finished_run["invalid"]], items[finished_run["refused"]]
    assert "validation_failed" in invalid["reason"] and invalid["raw_output"] and len(invalid["tried"]) >= 2
    assert "refusal" in refused["reason"] and refused["attempts"] >= 1
    conflicted = [i for i in items.values() if "conflict" in i["reason"]]
    assert len(conflicted) >= 2 * finished_run["summary"]["conflicts"]  # two documents per conflict
    assert all(i["errors"] and i["conflicts"] for i in conflicted)

    monkeypatch.delenv("DOCMILL_RAISE_ERRORS", raising=False)
    get_settings.cache_clear()
    sd = finished_run["store_dir"]
    assert main(["--store", sd, "review", "list", run_id]) == 0
    out = capsys.readouterr()
    assert len(out.out.strip().splitlines()) == len(items) and f"{len(items)} item(s)" in out.err
    assert main(["--store", sd, "review", "show", run_id, finished_run["invalid"]]) == 0
    assert json.loads(capsys.readouterr().out)["doc_id"] == finished_run["invalid"]
    exported = finished_run["tmp"] / "review.jsonl"
    assert main(["--store", sd, "review", "export", run_id, "--out", str(exported)]) == 0
    assert {json.loads(line)["doc_id"] for line in exported.read_text().splitlines()} == set(items)
    assert main(["--store", sd, "review", "show", run_id, "no/such/doc"]) == 2
    assert "no review item" in capsys.readouterr().err


def test_status_runs_and_estimate_read_well(
    finished_run: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    sd, run_id, s = finished_run["store_dir"], finished_run["run_id"], finished_run["summary"]
    get_settings.cache_clear()
    assert main(["--store", sd, "status", run_id]) == 0
    text = capsys.readouterr().out
    n = s["documents"]
    assert "phase      done" in text and f"{n}/{n} processed (100%)" in text
    assert f"{s['states']['succeeded']} succeeded" in text and f"${s['cost_usd']:.4f} so far" in text
    assert main(["--store", sd, "status", run_id, "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["phase"] == "done" and st["status"]["documents"] == n and st["counts"]["documents"] == n
    assert main(["--store", sd, "runs"]) == 0
    assert run_id in capsys.readouterr().out
    assert main(["--store", sd, "report", run_id]) == 0  # written again from the store
    assert f"report.html: {Path(sd).resolve()}/runs/{run_id}/report.html" in capsys.readouterr().out.replace(
        "file://", ""
    )
    corpus = finished_run["tmp"] / "corpus"
    assert main(["--store", sd, "estimate", str(corpus)]) == 0
    est = capsys.readouterr().out
    assert "estimate" in est and "realtime: ~$" in est and "batch:    ~$" in est
    real = float(re.search(r"realtime: ~\$([0-9.]+)", est).group(1))  # type: ignore[union-attr]
    batch = float(re.search(r"batch:    ~\$([0-9.]+)", est).group(1))  # type: ignore[union-attr]
    assert 0 < batch < real
    assert 0.3 < real / s["cost_usd"] < 3  # the same order of magnitude as what the run really cost

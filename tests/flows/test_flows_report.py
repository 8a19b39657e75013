"""The run report renders in headless Chromium with the run's numbers and its results (values,
evidence with offsets, findings, integration flags) for an invoices run and a code-review run;
exports open in pyarrow/csv and match the outcomes; the review queue has every reason; status
reads well."""

from __future__ import annotations

import csv
import io
import json
import re
from html import unescape
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from checkpoints.costs import CostLedger
from checkpoints.review_queue import ReviewQueue
from checkpoints.store import open_store
from docmill.settings import ApiSettings, Settings, get_settings
from flows.cli.main import main
from flows.entry import RunWiring, run_extract
from flows.run.context import RunParams
from tests.fixtures.chromium import render
from tests.fixtures.emulator import fresh
from tests.fixtures.today import emulator_config
from tests.flows.helpers import ROOT, make_corpus, outcomes_of, plant, value

CODE_REVIEW_INTEGRATION = "integrating per-file reviews of one code base"  # in its prompt only


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory, _emulator_session: Any) -> dict[str, Any]:
    """One run with a document that stays schema-invalid, one refusal, and planted conflicts."""
    emulator = fresh(_emulator_session)
    tmp = tmp_path_factory.mktemp("report")
    corpus, truth = make_corpus(tmp, count=20, seed=9)
    invalid = plant(corpus, truth, "PLANTED-SCHEMA", set())
    refused = plant(corpus, truth, "PLANTED-REFUSAL", {invalid})
    emulator.state.faults.add(kind="schema_invalid", marker="PLANTED-SCHEMA")
    emulator.state.faults.add(kind="refusal", marker="PLANTED-REFUSAL")
    settings = Settings(store=str(tmp / "store"), api=ApiSettings(base_url=emulator.base_url))
    summary = run_extract(
        RunParams(str(corpus), "invoices"), settings=settings, wiring=RunWiring(progress=False)
    )
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


@pytest.fixture(scope="module")
def code_review_run(tmp_path_factory: pytest.TempPathFactory, _emulator_session: Any) -> dict[str, Any]:
    """examples/codebase through code-review; every integration answer schema-invalid (a failed integration)."""
    emulator = fresh(_emulator_session)
    emulator.state.faults.add(kind="schema_invalid", marker=CODE_REVIEW_INTEGRATION)
    tmp = tmp_path_factory.mktemp("code-review")
    settings = Settings(store=str(tmp / "store"), api=ApiSettings(base_url=emulator.base_url))
    try:
        summary = run_extract(
            RunParams(str(ROOT / "examples/codebase"), "code-review"),
            settings=settings,
            wiring=RunWiring(progress=False),
        )
    finally:
        emulator.state.reset(emulator_config())
    return {"summary": summary, "store": open_store(settings.store), "run_id": summary["run_id"], "tmp": tmp}


def _dom(run: dict[str, Any], chromium: str, shot: Path | None = None, fragment: str = "") -> str:
    store, run_id = run["store"], run["run_id"]
    page = run["tmp"] / "store" / "runs" / run_id / "report.html"
    assert page.read_bytes() == store.get(f"runs/{run_id}/report.html")
    html = page.read_text()
    scripts = re.findall(r"<script[^>]*>", html)  # the pager and its inline data, nothing fetched
    assert scripts.count("<script>") == 1 and all("src=" not in x for x in scripts)
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    return render(chromium, page, fragment=fragment, screenshot=shot)


def _by_id(dom: str, ident: str) -> str:
    m = re.search(rf'id="{ident}"[^>]*>([^<]*)<', dom)
    assert m, f"#{ident} is not in the rendered DOM"
    return m.group(1)


def _row(dom: str, doc_id: str) -> str:
    """The rendered table row of one document (unescaped)."""
    m = re.search(
        rf'<tr class="st-[a-z_]+"><td><code>{re.escape(doc_id)}</code>.*?</tr></tbody></table></details></td></tr>',
        dom,
        re.S,
    )
    m = m or re.search(
        rf'<tr class="st-[a-z_]+"><td><code>{re.escape(doc_id)}</code>.*?</td></tr>', dom, re.S
    )
    assert m, f"no row for {doc_id} in the rendered documents table"
    return unescape(m.group(0))


def test_report_html_renders_an_invoices_run_in_chromium_with_numbers_and_results(
    finished_run: dict[str, Any], chromium: str
) -> None:
    store, run_id, s = finished_run["store"], finished_run["run_id"], finished_run["summary"]
    shot = finished_run["tmp"] / "report.png"
    dom = _dom(finished_run, chromium, shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000

    outcomes = outcomes_of(store, run_id)
    skipped = [o for o in outcomes.values() if o["state"] == "skipped"]
    assert _by_id(dom, "count-total") == str(s["documents"])
    assert _by_id(dom, "count-succeeded") == str(s["states"]["succeeded"])
    assert _by_id(dom, "count-needs_review") == str(s["states"]["needs_review"])
    assert _by_id(dom, "count-skipped") == str(len(skipped)) and len(skipped) == 2  # empty, .xyz
    assert _by_id(dom, "count-failed") == str(s["states"]["failed"])
    total = CostLedger(store, run_id).totals()
    assert _by_id(dom, "cost-total") == f"${total['usd']:.4f}" and total["usd"] > 0
    assert _by_id(dom, "cost-entries") == str(total["entries"])
    assert _by_id(dom, "conflicts") == str(s["conflicts"]) and s["conflicts"] >= 1
    assert _by_id(dom, "review-total") == str(len(ReviewQueue(store, run_id)))
    assert _by_id(dom, "phase") == "done"
    assert re.fullmatch(r"\d+(ms|\.\ds)", _by_id(dom, "duration"))
    assert _by_id(dom, "started").startswith(s["run_id"][:4])  # a date, not "?"
    assert dom.count("<polyline") >= 2 and "in flight" in dom  # submitted and answered over time
    assert finished_run["invalid"] in dom and finished_run["refused"] in dom  # not succeeded, with examples
    explained = unescape(re.search(r"id=.review-explained.>(.*?)</p>", dom, re.S).group(1))  # type: ignore[union-attr]
    assert "need review" in explained and "disagrees with another document" in explained

    # values with their evidence and its offsets in the document, and a link to the stored result
    doc = next(
        o
        for o in sorted(outcomes.values(), key=lambda o: o["doc_id"])
        if o["state"] == "succeeded" and o["doc_id"].endswith(".txt") and not o.get("from_ledger")
    )
    row = _row(dom, doc["doc_id"])
    total_field = doc["output"]["total"]
    text = (finished_run["tmp"] / "corpus" / doc["doc_id"]).read_text()
    start = text.index(total_field["evidence"])
    assert (
        f"evidence: {total_field['evidence']} (chars {start}–{start + len(total_field['evidence'])})" in row
    )
    assert str(doc["output"]["invoice_number"]["value"]) in row and str(total_field["value"]) in row
    href = re.search(r'href="([^"]+)"', row).group(1)  # type: ignore[union-attr]
    stored = json.loads((finished_run["tmp"] / "store" / "runs" / run_id / href).read_text())
    assert stored["output"] == doc["output"]
    responses = re.search(r'href="([^"]+)"[^>]*>responses<', row).group(1)  # type: ignore[union-attr]
    logged = sorted((finished_run["tmp"] / "store" / "runs" / run_id / responses).glob("*.json"))
    answer = json.loads(logged[-1].read_text())  # the raw answer as it arrived, with when it was sent
    assert answer["type"] == "message" and answer["_docmill"]["sent_at"] <= answer["_docmill"]["at"]
    empty = _row(dom, "misc/empty.txt")
    assert "b-skipped" in empty and "empty" in empty and "b-failed" not in empty

    findings = integration_findings(store, run_id)
    assert findings and all(unescape(f) in unescape(dom) for f in findings[:3])  # the integration's findings
    assert _by_id(dom, "integration-flags") == "0"
    md = store.get(f"runs/{run_id}/report.md").decode()
    assert f"${total['usd']:.4f}" in md and "## Review queue" in md and "## Coverage gaps" in md
    assert (
        "## Key findings (integration pass)" in md and findings[0] in md and "## Integration flags (0)" in md
    )
    assert f"«{total_field['evidence']}» @{start}–" in md and "| skipped | 2 |" in md and "duration" in md


def integration_findings(store: Any, run_id: str) -> list[str]:
    return list((store.get_json(f"runs/{run_id}/integration.json")["output"] or {}).get("key_findings") or [])


def test_report_html_of_a_code_review_run_shows_findings_by_file_and_the_integration_flags(
    code_review_run: dict[str, Any], chromium: str
) -> None:
    store, run_id = code_review_run["store"], code_review_run["run_id"]
    dom = _dom(code_review_run, chromium)
    db = unescape(
        re.search(
            r"<code>db\.py</code> — \d+ finding\(s\).*?(?=<tr class=\"grp\"|</tbody>)", dom, re.S
        ).group(0)
    )  # type: ignore[union-attr]
    assert "db.py:17" in db and "security" in db and "b-critical" in db
    assert "WHERE customer_id = '{customer_id}'" in db  # the quoted line of the planted SQL injection
    # every integration answer invalid: the integration is failed, said on the page with its problem
    assert _by_id(dom, "integration-status") == "failed"
    assert "integration answer invalid" in dom
    md = store.get(f"runs/{run_id}/report.md").decode()
    assert "### `db.py`" in md and "`db.py:17` security" in md and "WHERE customer_id = '{customer_id}'" in md
    assert "integration answer invalid" in md


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
                if want is None:  # the Latin-1 note (read in a guessed encoding) states no invoice
                    continue
                assert c[f"value.{field}"] == p[f"value.{field}"] == str(want)
            assert c["value.total.evidence"] == (o["output"]["total"]["evidence"] or "")
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


def test_review_decisions_are_recorded_applied_in_exports_and_report_and_become_labels(
    finished_run: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Runs last in this module: it changes the run's results as a reviewer would."""
    from checkpoints.decisions import ReviewDecisions

    store, run_id, sd = finished_run["store"], finished_run["run_id"], finished_run["store_dir"]
    get_settings.cache_clear()
    outcomes = outcomes_of(store, run_id)
    ok = sorted(d for d, o in outcomes.items() if o["state"] == "succeeded" and not o.get("from_ledger"))
    fixed, accepted, rejected = ok[0], ok[1], finished_run["invalid"]
    old_total = value(outcomes[fixed]["output"]["total"])
    review = ["--store", sd, "review"]

    assert (
        main(
            [*review, "correct", run_id, fixed, "--set", "total=999.99", "--by", "alice", "--note", "PDF p.2"]
        )
        == 0
    )
    assert f"{fixed} in run {run_id}: correct by alice (decision #1)" in capsys.readouterr().out
    assert main([*review, "correct", run_id, fixed, "--set", "total=1234.5", "--by", "bob"]) == 0
    assert main([*review, "accept", run_id, accepted]) == 0
    assert main([*review, "reject", run_id, rejected, "--set", "invoice_number=INV-X1", "--by", "carol"]) == 0
    capsys.readouterr()
    for bad, why in (
        (["correct", run_id, fixed], "needs at least one --set"),
        (["correct", run_id, fixed, "--set", "total=lots"], "does not fit the schema"),
        (["correct", run_id, fixed, "--set", "colour=red"], "no field 'colour'"),
        (["accept", run_id, fixed, "--set", "total=1"], "accept takes no --set"),
        (["accept", run_id, "no/such.txt"], "no document 'no/such.txt'"),
    ):
        assert main([*review, *bad]) == 2, bad
        assert why in capsys.readouterr().err
    history = ReviewDecisions(store, run_id).history(fixed)  # append-only: both decisions kept, in order
    assert [(d.seq, d.by, d.values["total"]) for d in history] == [(1, "alice", 999.99), (2, "bob", 1234.5)]
    assert history[0].note == "PDF p.2" and history[0].at <= history[1].at
    assert main([*review, "list", run_id]) == 0
    assert "reject by carol" in capsys.readouterr().out
    assert main([*review, "show", run_id, fixed]) == 0  # a decided document, never in the queue
    shown = json.loads(capsys.readouterr().out)
    assert [d["by"] for d in shown["decisions"]] == ["alice", "bob"] and shown["review"]["by"] == "bob"
    assert value(shown["output"]["total"]) == 1234.5 and value(shown["original_output"]["total"]) == old_total
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", d["at"]) for d in shown["decisions"])

    assert main(["--store", sd, "report", run_id]) == 0
    capsys.readouterr()
    base = f"runs/{run_id}/exports/results"
    rows = {
        json.loads(line)["doc_id"]: json.loads(line)
        for line in store.get(f"{base}.jsonl").decode().splitlines()
    }
    assert (
        rows[fixed]["values"]["total"] == 1234.5
        and value(rows[fixed]["original_output"]["total"]) == old_total
    )
    assert (
        rows[fixed]["review"]["by"] == "bob"
        and rows[fixed]["review"]["corrections"]["total"]["from"] == old_total
    )
    assert rows[accepted]["review"]["action"] == "accept" and not rows[accepted]["original_output"]
    csv_rows = {r["doc_id"]: r for r in csv.DictReader(io.StringIO(store.get(f"{base}.csv").decode()))}
    assert (
        csv_rows[fixed]["value.total"] == "1234.5" and float(csv_rows[fixed]["original.total"]) == old_total
    )
    assert csv_rows[fixed]["review.action"] == "correct" and csv_rows[rejected]["review.by"] == "carol"
    iso = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"  # a timestamp a person reads, not epoch seconds
    assert re.fullmatch(iso, csv_rows[fixed]["review.at"]) and re.fullmatch(iso, rows[fixed]["review"]["at"])
    parquet = {r["doc_id"]: r for r in pq.read_table(io.BytesIO(store.get(f"{base}.parquet"))).to_pylist()}
    assert parquet[fixed]["value.total"] == "1234.5"
    md = store.get(f"runs/{run_id}/report.md").decode()
    assert (
        f"1234.5 (was {old_total})" in md
        and "(corrected by bob)" in md
        and "3 review decision(s) in force" in md
    )
    html = store.get(f"runs/{run_id}/report.html").decode()
    assert "corrected by bob" in html and "rejected by carol" in html

    labels = finished_run["tmp"] / "review-labels.jsonl"
    assert main([*review, "export", run_id, "--labels", "--out", str(labels)]) == 0
    records = {r["doc_id"]: r for r in map(json.loads, labels.read_text().splitlines())}
    assert set(records) == {fixed, accepted, rejected}
    assert records[fixed]["fields"]["total"] == 1234.5 and records[fixed]["by"] == "bob"
    assert (
        records[rejected]["fields"] == {"invoice_number": "INV-X1"}
        and records[rejected]["decision"] == "reject"
    )
    assert records[accepted]["fields"]["total"] == value(outcomes[accepted]["output"]["total"])

    mismatches = finished_run["tmp"] / "mismatches.csv"
    assert (
        main(["--store", sd, "eval", run_id, "--mismatches", str(mismatches)]) == 0
    )  # review decisions are labels
    out = capsys.readouterr().out
    assert "labels: 3 document(s): 3 from review decisions\n" in out  # no "0 from no labels file"
    found = list(csv.DictReader(io.StringIO(mismatches.read_text())))
    assert {(m["doc_id"], m["field"], m["kind"]) for m in found} >= {(fixed, "total", "wrong")}
    assert any(m["doc_id"] == rejected and m["field"] == "invoice_number" for m in found)

"""`docmill estimate` learns answer sizes from the store's own past runs (tasks.cost.answer_sizes): per
format, answer tokens fitted on input tokens from the cost ledgers of earlier runs of the same recipe
on the same model, thinking and repairs as billed; below LEARN_MIN documents, the schema prior with one
list item per table row of the document. No model call: the past runs' ledgers are written directly."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoints.costs import CostEntry, CostLedger
from checkpoints.manifest import ManifestStore, RunManifest
from checkpoints.store import open_store
from docmill.settings import Settings
from tasks.cost.answer_sizes import FORMAT_MIN, LEARN_MIN, REPAIR_WEIGHT, document_tokens, learn
from tasks.cost.estimate import (
    NOTE_TOKENS_PER_RESULT,
    estimate_docs,
    integration_estimate,
    typical_output_tokens,
)
from tasks.cost.sizing import content_tokens, table_rows
from tasks.integration.digest import state_digest
from tasks.integration.notes import notes_request, notes_schema, plan_slices
from tasks.recipes import load_recipe
from tasks.source.inventory import inventory


def _invoice(n: int, rows: int) -> str:
    lines = [f"INVOICE INV-{n:04d}", "Date: 2026-03-01", "Vendor: Acme Tools GmbH"]
    lines += [f"Widget type {chr(65 + i)}  {i + 1} x 12.50  {12.5 * (i + 1):.2f}" for i in range(rows)]
    return "\n".join([*lines, "Total: 99.00 EUR", ""])


def _past_run(store_uri: str, run_id: str, recipe: str, model: str, docs: int, repairs: int) -> None:
    """A finished run's manifest, inventory and cost ledger: document i has 100 + 60 i tokens of text
    (400 + 240 i characters) and its first attempt answers 200 + 0.4 x that in text; the first `repairs`
    documents are repaired once (1,500 tokens in, 50 of text and 100 of thinking out)."""
    store = open_store(store_uri)
    ManifestStore(store).create(RunManifest(run_id=run_id, recipe=recipe))
    store.put_json(
        f"runs/{run_id}/inventory/0.json",
        [
            {
                "doc_id": f"{run_id}/inv-{i}.txt",
                "doc_type": "txt",
                "send_as": "text",
                "text_chars": 400 + 240 * i,
            }
            for i in range(docs)
        ],
    )
    entries = []
    for i in range(docs):
        prompt = 1400 + 60 * i
        text = round(200 + 0.4 * (100 + 60 * i))
        first = text
        common = {"run_id": run_id, "pass_name": "file", "doc_id": f"{run_id}/inv-{i}.txt", "key": f"k{i}"}
        entries.append(
            CostEntry(
                **common,
                attempt=1,
                model=model,
                answered_model=model,
                input_tokens=prompt,
                output_tokens=first + 128,
                thinking_tokens=128,
            )
        )
        if i < repairs:
            entries.append(
                CostEntry(
                    **common,
                    attempt=2,
                    model=model,
                    answered_model=model,
                    input_tokens=1500,
                    output_tokens=50 + 100,
                    thinking_tokens=100,
                )
            )
    CostLedger(store, run_id).record("file-0", entries)
    notes = CostEntry(
        run_id=run_id,
        pass_name="integration",
        doc_id="*integration-0*",
        key="i0",
        model=model,
        answered_model=model,
        input_tokens=5000,
        output_tokens=30 * docs + 128,
        thinking_tokens=128,
    )  # the integration pass wrote 30 tokens per document
    CostLedger(store, run_id).record("integration-0", [notes])


def test_estimate_learns_answer_sizes_from_past_runs(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for n in range(6):
        (corpus / f"inv-{n}.txt").write_text(_invoice(n, rows=2 * n + 1))
    settings = Settings(store=str(tmp_path / "store"))
    recipe = load_recipe("invoices")
    model = settings.api.model
    docs = list(inventory(str(corpus), settings, doc_types=recipe.doc_types))

    # no store: the prior, a list of amounts with one item per table row of the document
    prior = estimate_docs(docs, recipe, settings)
    assert prior.learned is None and prior.measured_answers == 0
    assert "prior: the recipe's schema" in "\n".join(prior.lines())
    assert table_rows(_invoice(0, rows=9)) == 9
    few, many = (typical_output_tokens(recipe, 4096, rows) for rows in (1, 9))
    assert many > few + 8 * 20  # each row is an item: description, numbers and evidence

    # too few past documents: still the prior; a run of another recipe or model teaches nothing
    _past_run(settings.store, "20260101-000000-aaaaaa", "invoices", model, LEARN_MIN - 1, repairs=0)
    _past_run(settings.store, "20260102-000000-bbbbbb", "code-review", model, 40, repairs=0)
    _past_run(settings.store, "20260103-000000-cccccc", "invoices", "claude-other-1", 40, repairs=0)
    assert estimate_docs(docs, recipe, settings).learned is None

    # enough: first answers = 200 + 0.4 x document tokens; thinking and repairs as the ledger billed them
    _past_run(settings.store, "20260104-000000-dddddd", "invoices", model, 20, repairs=4)
    est = estimate_docs(docs, recipe, settings)
    assert est.learned is not None and est.measured_answers == 20 + LEARN_MIN - 1
    assert est.learned.runs == 2
    assert est.learned.note_tokens_per_result == 30 and est.integration is not None
    assert est.integration.note_tokens == 30 and prior.integration is not None
    assert prior.integration.note_tokens == NOTE_TOKENS_PER_RESULT
    fit = est.learned.by_type["txt:text"]
    assert abs(fit.slope - 0.4) < 1e-6 and abs(fit.intercept - 200) < 0.5
    answers = [round(200 + 0.4 * (100 + 60 * i)) for n in (LEARN_MIN - 1, 20) for i in range(n)]
    mean = sum(answers) / len(answers)
    assert abs(est.learned.text_tokens("png:image", 10_000) - mean) <= 1  # an unseen format: the mean
    docs_n = est.measured_answers
    assert est.learned.thinking_per_doc == (docs_n * 128 + 4 * 100) / docs_n
    rate = 4 / docs_n  # repair attempts per document (one format: its own rate is every format's)
    costs = est.learned.costs("txt:text")
    assert costs.repair_rate == pytest.approx(rate) and costs.thinking == 128
    size = est.learned.repair
    repaired_first = [(1400 + 60 * i, round(200 + 0.4 * (100 + 60 * i))) for i in range(4)]
    assert size.input_ratio == pytest.approx(4 * 1500 / sum(p for p, _ in repaired_first))
    assert size.text_ratio == pytest.approx(4 * 50 / sum(t for _, t in repaired_first))
    assert size.thinking == 100
    for doc in docs:  # each document's answer from its own size, plus the repairs its rate expects
        one = estimate_docs([doc], recipe, settings)
        first = round(200 + 0.4 * document_tokens(doc.text_chars, 0, "text"))
        assert one.text_output_tokens == round(first * (1 + rate * size.text_ratio))
        assert one.thinking_tokens == round(128 + rate * 100)
        prompt = one.input_tokens - one.repair_input_tokens
        assert one.repair_input_tokens == round(rate * size.input_ratio * prompt)
    text = "\n".join(est.lines())
    assert f"learned from {docs_n} documents of 2 past run(s)" in text and "txt:text" in text


def _formats_run(store_uri: str, run_id: str, model: str, groups: dict[str, tuple[int, int]]) -> None:
    """A finished run whose documents of each format ("txt", "eml") number groups[fmt][0], the first
    groups[fmt][1] of them repaired once (the repair re-sends 1.5x the 1,000-token prompt)."""
    store = open_store(store_uri)
    ManifestStore(store).create(RunManifest(run_id=run_id, recipe="invoices"))
    inventory_rows, entries = [], []
    for fmt, (n, repaired) in groups.items():
        for i in range(n):
            doc_id = f"{fmt}-{i}.{fmt}"
            inventory_rows.append({"doc_id": doc_id, "doc_type": fmt, "send_as": "text", "text_chars": 2000})
            common = {"run_id": run_id, "pass_name": "file", "doc_id": doc_id, "key": doc_id, "model": model}
            entries.append(
                CostEntry(**common, attempt=1, answered_model=model, input_tokens=1000, output_tokens=300)
            )
            if i < repaired:
                entries.append(
                    CostEntry(**common, attempt=2, answered_model=model, input_tokens=1500, output_tokens=300)
                )
    store.put_json(f"runs/{run_id}/inventory/0.json", inventory_rows)
    CostLedger(store, run_id).record("file-0", entries)


def test_repairs_are_learned_per_format_and_lean_on_every_format(tmp_path: Path) -> None:
    """E-mails that were never repaired are not charged the repairs of the text files' format: each
    format's repair rate is its own, weighted against every format's by REPAIR_WEIGHT documents; a format
    with fewer than FORMAT_MIN documents takes every format's; what a repair costs is learned over every
    format relative to the first prompt, so a document's repair input grows with its prompt."""
    settings = Settings(store=str(tmp_path / "store"))
    model = settings.api.model
    _formats_run(
        settings.store, "20260105-000000-eeeeee", model, {"txt": (20, 10), "eml": (20, 0), "md": (2, 2)}
    )
    learned = learn(open_store(settings.store), "invoices", model)
    assert learned is not None
    overall = 12 / 42  # repair attempts per document, every format
    assert learned.overall_per_doc.repair_rate == pytest.approx(overall)
    txt, eml = learned.costs("txt:text"), learned.costs("eml:text")
    assert txt.repair_rate == pytest.approx((20 * 0.5 + REPAIR_WEIGHT * overall) / (20 + REPAIR_WEIGHT))
    assert eml.repair_rate == pytest.approx(REPAIR_WEIGHT * overall / (20 + REPAIR_WEIGHT))
    assert eml.repair_rate < overall < txt.repair_rate
    assert FORMAT_MIN > 2 and learned.costs("md:text") == learned.overall_per_doc  # too few of its own
    assert learned.repair.input_ratio == pytest.approx(1.5)  # a repair re-sends 1.5x the first prompt

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "short.txt").write_text(_invoice(1, rows=1))
    (corpus / "long.txt").write_text(_invoice(2, rows=40))
    recipe = load_recipe("invoices")
    for doc in inventory(str(corpus), settings, doc_types=recipe.doc_types):
        one = estimate_docs([doc], recipe, settings)
        prompt = one.input_tokens - one.repair_input_tokens
        assert one.repair_input_tokens == round(txt.repair_rate * 1.5 * prompt)


def test_integration_estimate_prices_the_requests_the_pass_builds(tmp_path: Path) -> None:
    """A full pass over a fresh store: each call's input is the request the pass builds (prompt, rules,
    notes schema, the empty-state digest: no code-built digest when it reads every result) plus the
    results; the results go in slices of slice_records and about slice_chars characters, as the pass
    cuts them; the delta digest is added only past read_records."""
    settings = Settings(store=str(tmp_path / "store"))
    recipe = load_recipe("invoices")
    for typical in (200, 900):
        est = integration_estimate(recipe, settings, typical)
        filler = "x" * max(0, 4 * est.result_tokens - 40)
        records = [{"doc_id": f"doc-{i:03d}.pdf", "state": "succeeded", "vendor": filler} for i in range(40)]
        cuts = plan_slices(records, settings.integration.slice_records, settings.integration.slice_chars)
        assert est.calls(40) == len(cuts)
        billed = sum(
            content_tokens(
                notes_request(
                    recipe,
                    notes_schema(recipe),
                    cut,
                    state_digest({}, 0, settings.integration.digest_chars),
                    model=settings.api.integration_model,
                    max_tokens=settings.integration.max_tokens,
                )
            )
            for cut in cuts
        )
        assert est.input_tokens(40) == pytest.approx(billed, rel=0.05)
    many = settings.integration.read_records + 1
    assert est.input_tokens(many) - est.input_tokens(settings.integration.read_records) >= est.calls(many) * (
        settings.integration.digest_chars // 4
    )

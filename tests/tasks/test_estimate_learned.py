"""`docmill estimate` learns answer sizes from the store's own past runs (tasks.answer_sizes): per
format, answer tokens fitted on input tokens from the cost ledgers of earlier runs of the same recipe
on the same model, thinking and repairs as billed; below LEARN_MIN documents, the schema prior with one
list item per table row of the document. No model call: the past runs' ledgers are written directly."""

from __future__ import annotations

from pathlib import Path

from checkpoints.costs import CostEntry, CostLedger
from checkpoints.manifest import ManifestStore, RunManifest
from checkpoints.store import open_store
from docmill.settings import Settings
from tasks.answer_sizes import LEARN_MIN, document_tokens
from tasks.estimate import NOTE_TOKENS_PER_RESULT, estimate_docs, typical_output_tokens
from tasks.inventory import inventory
from tasks.recipes import load_recipe
from tasks.sizing import table_rows


def _invoice(n: int, rows: int) -> str:
    lines = [f"INVOICE INV-{n:04d}", "Date: 2026-03-01", "Vendor: Acme Tools GmbH"]
    lines += [f"Widget type {chr(65 + i)}  {i + 1} x 12.50  {12.5 * (i + 1):.2f}" for i in range(rows)]
    return "\n".join([*lines, "Total: 99.00 EUR", ""])


def _past_run(store_uri: str, run_id: str, recipe: str, model: str, docs: int, repairs: int) -> None:
    """A finished run's manifest, inventory and cost ledger: document i has 100 + 60 i tokens of text
    (400 + 240 i characters) and all its attempts answer 200 + 0.4 x that in text (a repair its share)."""
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
        first = text - 50 if i < repairs else text
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

    # enough: answer tokens = 200 + 0.4 x document tokens, thinking and repairs as the ledger billed them
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
    assert est.repair_input_tokens == len(docs) * round(4 * 1500 / docs_n)
    for doc in docs:  # each document's answer from its own size
        one = estimate_docs([doc], recipe, settings)
        assert one.text_output_tokens == round(200 + 0.4 * document_tokens(doc.text_chars, 0, "text"))
    text = "\n".join(est.lines())
    assert f"learned from {docs_n} documents of 2 past run(s)" in text and "txt:text" in text

"""The recipe docs/recipes.md starts with: contracts (and the purchase orders filed beside them) in,
contract terms out, each value with the text that states it ({value, evidence}).

    docmill run examples/recipes/contracts --recipe examples/recipes/contracts.py:CONTRACTS

Runs offline against the emulator (no ANTHROPIC_API_KEY needed). Two copies of MSA-2041 disagree on
the governing law: the report lists it as a conflict and both go to the review queue.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tasks.recipes import Recipe

VERSION = "1"  # bump when the prompts or schemas change meaning: new results instead of old ones

EVIDENCE = "The sentence or line of the document that states the value, copied verbatim; null when the value is absent."


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")  # -> additionalProperties: false, as the API wants


class Text(_Strict):
    """A value and the text that states it: the gate checks that the evidence occurs in the document
    and contains the value; the report and the exports show them side by side."""

    value: str | None = Field(
        description="The value as the document writes it; null when it does not state it."
    )
    evidence: str | None = Field(description=EVIDENCE)


class Day(_Strict):
    value: str | None = Field(description="The date as YYYY-MM-DD; null when the document states none.")
    evidence: str | None = Field(description=EVIDENCE)


class Amount(_Strict):
    value: float | None = Field(
        description="A plain number (48,000.00 -> 48000.0), no currency; null when absent."
    )
    evidence: str | None = Field(description=EVIDENCE)


class Contract(_Strict):
    """What one document says about one contract."""

    doc_kind: Literal["contract", "purchase_order", "other"] = Field(
        description="'contract' for an agreement or statement of work, 'purchase_order' for an order."
    )
    contract_number: Text = Field(description="The contract's identifier, labelled 'Contract number'.")
    provider: Text = Field(description="The party that provides the goods or services.")
    effective_date: Day = Field(description="The day the contract takes effect.")
    governing_law: Text = Field(description="The law that governs the contract, e.g. 'England and Wales'.")
    fee: Amount = Field(description="The fee the customer pays: per year, or the fixed fee of the work.")
    currency: Text = Field(description="ISO 4217 code of the fee, e.g. EUR.")


class Term(_Strict):
    contract_number: str = Field(description="The contract the finding is about.")
    doc_ids: list[str] = Field(description="The documents that state it.")
    finding: str = Field(description="One sentence.")


class ContractsIntegration(_Strict):
    """What the documents say together."""

    key_findings: list[str] = Field(description="The few most important findings, one sentence each.")
    terms: list[Term] = Field(description="Findings about single contracts, with their documents.")


FILE_PROMPT = """You read one document filed with our contracts and record the contract's terms.
- Fill every field; a field the document does not state is {"value": null, "evidence": null}.
- `evidence` is the sentence or line that states the value, copied verbatim; it must contain the value.
- A purchase order or another document that is not a contract states no contract terms: null them."""

INTEGRATION_PROMPT = """You read the per-document records of our contracts and list what they say
together: the key findings and, per contract, what its documents agree or disagree on, with doc ids."""

CONTRACTS = Recipe(
    name="contracts",
    version=VERSION,
    file_schema=Contract,
    file_prompt=FILE_PROMPT,
    integration_schema=ContractsIntegration,
    integration_prompt=INTEGRATION_PROMPT,
    doc_types=frozenset({"txt", "md"}),
    key_fields=("contract_number",),  # two documents of one contract that disagree are a conflict
    evidence_fields=("evidence",),
)

"""Built-in recipe `invoices`: invoice fields with verbatim evidence, then vendors, duplicates, conflicts.

Schemas are JSON-schema friendly for structured outputs: no pattern / min / max constraints, every
field required (absent values are `null`, never omitted), nested objects instead of generics.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tasks.recipes import Recipe, read_prompt
from tasks.recipes.thinking import ThinkingPolicy
from tasks.source.readers import DOCUMENT_TYPES

VERSION = "1"

_EVIDENCE = "The exact text from the document that shows the value, copied verbatim (e.g. the whole labelled line); null when the value is absent."


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextValue(_Strict):
    value: str | None = Field(description="The value as written; null when the document does not state it.")
    evidence: str | None = Field(description=_EVIDENCE)


class DateValue(_Strict):
    value: str | None = Field(description="The date as ISO 8601 YYYY-MM-DD; null when absent.")
    evidence: str | None = Field(description=_EVIDENCE)


class AmountValue(_Strict):
    value: float | None = Field(
        description="The amount as a plain number (1,234.50 -> 1234.5), without currency; null when absent."
    )
    evidence: str | None = Field(description=_EVIDENCE)


class LineItem(_Strict):
    description: str = Field(description="What was sold, as written.")
    quantity: float | None = Field(description="Quantity; null when not stated.")
    unit_price: float | None = Field(description="Price per unit as a plain number; null when not stated.")
    amount: float | None = Field(description="Line amount as a plain number; null when not stated.")
    evidence: str = Field(description="The line of the document that lists this item, copied verbatim.")


class InvoiceFile(_Strict):
    """What one document says about one invoice."""

    doc_kind: Literal["invoice", "credit_note", "other"] = Field(
        description="'invoice' for an invoice or bill, 'credit_note' for a credit note, 'other' otherwise."
    )
    invoice_number: TextValue = Field(
        description="The invoice's identifier, usually labelled 'Invoice number', 'Invoice no.' or 'Invoice #', near the top."
    )
    invoice_date: DateValue = Field(
        description="Date of issue, labelled 'Invoice date' or 'Date'; not the due date."
    )
    due_date: DateValue = Field(description="Payment due date, labelled 'Due date' or 'Payment due'.")
    vendor_name: TextValue = Field(
        description="The seller who issued the invoice (labelled 'Vendor', 'From' or 'Supplier'), not the customer."
    )
    currency: TextValue = Field(
        description="ISO 4217 code such as EUR, USD, GBP, labelled 'Currency' or shown next to amounts."
    )
    subtotal: AmountValue = Field(description="Sum before tax, labelled 'Subtotal' or 'Net'.")
    tax: AmountValue = Field(description="Tax / VAT amount, labelled 'Tax' or 'VAT'.")
    total: AmountValue = Field(
        description="Amount due including tax, labelled 'Total' or 'Amount due', usually near the end."
    )
    line_items: list[LineItem] = Field(
        description="Every billed line, in document order; an empty list when the document lists none."
    )


class Entity(_Strict):
    vendor_name: str = Field(description="The vendor's name as most documents write it.")
    doc_ids: list[str] = Field(description="Every document id issued by this vendor.")


class Duplicate(_Strict):
    invoice_number: str = Field(description="The invoice number that appears in more than one document.")
    doc_ids: list[str] = Field(description="The documents that carry this invoice number.")


class ConflictValue(_Strict):
    value: str = Field(description="One of the disagreeing values, as that document reports it.")
    doc_id: str = Field(description="The document that reports this value.")
    evidence: str | None = Field(
        description="That document's evidence excerpt for the value, copied verbatim."
    )


class Conflict(_Strict):
    field: str = Field(description="The field whose values disagree, e.g. 'total'.")
    key: str = Field(description="What identifies the invoice, e.g. its invoice number.")
    values: list[ConflictValue] = Field(description="Every distinct value with its source; at least two.")


class CoverageGap(_Strict):
    doc_id: str | None = Field(description="The document concerned; null when the gap is about a field.")
    field: str | None = Field(description="The field nobody found; null when the gap is about a document.")
    reason: str = Field(description="Why it is a gap (failed, needs review, never stated, ...).")


class Claim(_Strict):
    text: str = Field(description="One statement about the corpus.")
    doc_ids: list[str] = Field(description="The documents that support it; at least one.")
    evidence: list[str] = Field(
        description="Evidence excerpts from those documents' results, copied verbatim."
    )


class InvoicesIntegration(_Strict):
    """What the per-file results say together."""

    key_findings: list[str] = Field(description="The few most important findings, one sentence each.")
    entities: list[Entity] = Field(description="Each vendor once, with all its documents.")
    duplicates: list[Duplicate] = Field(description="Invoice numbers that occur in more than one document.")
    conflicts: list[Conflict] = Field(
        description="Same invoice (number and vendor) with different values for a field, every value with its source."
    )
    coverage_gaps: list[CoverageGap] = Field(
        description="Documents that failed or need review, and fields no document stated."
    )
    claims: list[Claim] = Field(description="Other cross-document statements, each with sources.")


RECIPE = Recipe(
    name="invoices",
    version=VERSION,
    file_schema=InvoiceFile,
    file_prompt=read_prompt("invoices_file.md"),
    integration_schema=InvoicesIntegration,
    integration_prompt=read_prompt("invoices_integration.md"),
    # every format docmill reads (a macro-enabled Office file is skipped as macro_enabled, not as a type)
    doc_types=DOCUMENT_TYPES,
    evidence_fields=("evidence",),
    key_fields=("invoice_number", "vendor_name"),
    # copying fields out of an invoice needs little deliberation: low effort, the model decides whether
    # to think at all (an ambiguous total may need a little); "off" would drop thinking where allowed
    thinking=ThinkingPolicy(effort="low", thinking="adaptive"),
)

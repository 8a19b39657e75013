"""How real documents state values, and what the gate must make of them (tasks.per_file.support).

Each case is a synthetic line written the way a public labelled document writes it (invoices of the
invoice2data project's tests, SROIE receipts, Kleister NDA contracts: bench/gate.py measures the
rule on them): a correct value the gate refused, or a wrong value it accepted, before this rule."""

from __future__ import annotations

import json
from datetime import date
from typing import Any

import pytest

from tasks.per_file.gate import Problem, check, date_fields
from tasks.per_file.support import amounts_in, dates_in, supports
from tasks.recipes import load_recipe

INVOICES = load_recipe("invoices")


@pytest.mark.parametrize(
    ("value", "evidence"),
    [
        ("2014-05-07", "Rechnungsdatum 7. Mai 2014"),  # German, day with a dot
        ("2014-01-24", "Datum: 24. Januar 2014"),
        ("2014-03-11", "Leistungsdatum 11. März 2014"),  # an umlaut in the month
        ("2015-07-02", "Facture n°562044387 du 02 Juillet 2015"),  # French
        ("2014-08-03", "Invoice Date: August 3 , 2014"),  # a space before the comma
        ("2014-12-11", "dated December 11,2014"),  # no space after it
        ("2026-03-01", "Fecha: 1 de marzo de 2026"),  # Spanish `de`
        ("2025-12-03", "Data fattura: 3 dicembre 2025"),  # Italian
        ("2026-11-05", "Data wystawienia: 5 listopada 2026"),  # Polish genitive
        ("2026-10-05", "Factuurdatum: 5 okt. 2026"),  # Dutch abbreviation with a dot
        ("2018-03-20", "20-MAR-18 10:21"),  # a receipt: day-month-2-digit year
        ("2018-03-20", "DATE 20MAR18"),  # glued
        ("2014-05-20", "made as of the 20th day of May, 2014 by and between"),  # a contract
        ("2015-07-01", "Free Haut Débit du 1er au 31 Juillet 2015"),  # a range states its first day
        ("2015-07-31", "Free Haut Débit du 1er au 31 Juillet 2015"),
        ("2026-03-01", "发票日期 2026年3月1日"),
        ("2026-03-01", "Дата: 1 марта 2026 г."),  # Cyrillic
        ("2026-05-07", "Ημερομηνία 7 Μαΐου 2026"),  # Greek
        ("2026-03-01", "Päiväys 1. maaliskuuta 2026"),  # Finnish
        ("2026-01-19", "Invoice date,2026-01-19"),  # a CSV cell right after a comma
        ("2014-08-03", "03/08/2014"),  # day and month could swap: both readings are stated
        ("2014-03-08", "03/08/2014"),
    ],
)
def test_dates_in_any_common_language_and_order(value: str, evidence: str) -> None:
    assert supports(value, evidence, is_date=True)


@pytest.mark.parametrize(
    ("value", "evidence"),
    [
        ("2014-05-08", "Rechnungsdatum 7. Mai 2014"),  # a day changed
        ("2014-06-07", "Rechnungsdatum 7. Mai 2014"),  # a month changed
        ("2018-03-20", "20 items, 18 March"),  # numbers near a month's name are not a date
    ],
)
def test_a_date_the_line_does_not_state_is_refused(value: str, evidence: str) -> None:
    assert not supports(value, evidence, is_date=True)


def test_an_unambiguous_numeric_date_has_one_reading() -> None:
    assert dates_in("25/12/2018 8:13:39 PM") == {date(2018, 12, 25)}


@pytest.mark.parametrize(
    ("value", "evidence"),
    [
        (4828.0, "Gesamtbetrag 4.828,00 EUR"),
        (4828.0, "Total TTC 4 828,00 €"),  # a space groups thousands
        (4828.0, "Total TTC 4\u202f828,00 €"),  # a narrow no-break space
        (4828.0, "Total CHF 4'828.00"),
        (319000.0, "Grand Total Rs. 3,19,000.00"),  # Indian grouping
        (9.0, "TOTAL RM9.00"),  # a currency glued to the number
        (319.0, "Total Rs.319.00"),
        (4.11, "TOTAL AMOUNT DUE ON August 3 , 2014 $4.11"),
        (-12.0, "Credit: (12.00)"),
        (-5.0, "Rabatt -5,00 €"),  # a minus sign after a word and a space
        (250.0, "Widget 1 250.00 250.00"),  # a quantity, then a price
        (0.607, "Bananas 0.607 kg"),
        (316.83, "Należność ogółem: 316,83 PLN"),
        (10.5, "Service 5 Dec 10.50"),  # not a date `5 Dec 10` followed by `.50`
        (1234.0, "合計金額1,234円"),  # CJK text glues words to numbers
    ],
)
def test_amounts_written_the_way_documents_write_them(value: float, evidence: str) -> None:
    assert supports(value, evidence)


@pytest.mark.parametrize(
    ("value", "evidence"),
    [
        (17900.0, "Total 179.00"),  # the decimal point lost: a 100x error
        (16500.0, "Montant 165.00"),
        (987.0, "Reference amount 987 654 321.50"),  # a part of a grouped number
        (3.0, "TOTAL AMOUNT DUE ON August 3 , 2014 $4.11"),  # the day of a date
        (7.0, "Rechnungsdatum 7. Mai 2014 Summe 12,00"),
        (12.0, "12-01-19 21:13 SH01 ZK09"),  # a numeric date's parts
        (13.0, "TIME : 20:13"),  # a time's parts
        (1.0, "12-01-19 21:13 SH01 ZK09"),  # digits glued into an identifier
        (1005193039.0, "VF1005193039SCONL0303006280999"),
        (2023.0, "Invoice INV-2023-0008"),
        (562044387.0, "Facture n°562044387"),
        (1.0, "Free Haut Débit du 1er au 31 Juillet 2015 29.99"),  # the first day of a range
        (607.0, "Bananas 0.607 kg"),
    ],
)
def test_a_number_that_is_not_that_amount_as_a_whole_token_is_refused(value: float, evidence: str) -> None:
    assert not supports(value, evidence), amounts_in(evidence)


@pytest.mark.parametrize(
    ("value", "evidence", "stated"),
    [
        ("562044387", "Facture n°562044387", True),
        ("562044387", "Factura nº562044387", True),
        ("562044387", "Invoice No.562044387", True),
        ("562044387", "Invoice #562044387", True),
        ("5620", "Facture n°562044387", False),  # a part of the identifier
        ("DE89370400440532013000", "IBAN: DE89 3704 0044 0532 0130 00", True),  # spaced in groups
        ("DE 232 446 240", "USt-IdNr. DE232446240", True),  # and the other way round
        ("DE89370400440532013001", "IBAN: DE89 3704 0044 0532 0130 00", False),
        ("3704004405", "IBAN: DE89 3704 0044 0532 0130 00", False),  # groups, but not ending on one
        ("7740001454", "NIP: 774-00-01-454", True),
        ("TPG Capital LP", "TPG Capital, L.P., a Delaware limited partnership", True),  # dotted
        ("Orchestra-Prémaman SA", "Orchestra-Prémaman, S.A.", True),
        ("77400", "NIP: 774-00-01-454", False),  # a part of a joined identifier
        ("NO 14 & 16 JALAN PERMAS 4/4", "NO 14& 16 JALAN PERMAS 4/3", False),  # each word as often
        ("株式会社山田商店", "請求元株式会社山田商店御中", True),  # CJK words inside a longer run
        ("株式会社田中商店", "請求元株式会社山田商店御中", False),
    ],
)
def test_identifiers_and_words_are_whole_tokens(value: str, evidence: str, stated: bool) -> None:
    assert supports(value, evidence) is stated


def _answer(**fields: Any) -> dict[str, Any]:
    empty = {"value": None, "evidence": None}
    out: dict[str, Any] = {
        "doc_kind": "invoice",
        "invoice_number": empty,
        "invoice_date": empty,
        "due_date": empty,
        "vendor_name": empty,
        "currency": empty,
        "subtotal": empty,
        "tax": empty,
        "total": empty,
        "line_items": [],
        **fields,
    }
    return {"content": [{"type": "text", "text": json.dumps(out)}], "stop_reason": "end_turn", "usage": {}}


DOC = "RECHNUNG\nRechnungsnummer: 30064443\nRechnungsdatum 7. Mai 2014\nGesamtbetrag 34,73 EUR\n"


def test_the_german_invoice_passes_with_its_own_lines() -> None:
    v = check(
        INVOICES,
        DOC,
        _answer(
            invoice_number={"value": "30064443", "evidence": "Rechnungsnummer: 30064443"},
            invoice_date={"value": "2014-05-07", "evidence": "Rechnungsdatum 7. Mai 2014"},
            total={"value": 34.73, "evidence": "Gesamtbetrag 34,73 EUR"},
        ),
    )
    assert v.ok, v.errors


def test_a_value_without_evidence_is_refused() -> None:
    """A document id (the wrapper's `<document id=..>`) given as a value, with no evidence."""
    v = check(INVOICES, DOC, _answer(invoice_date={"value": "2026-01/inv-000001.pdf", "evidence": None}))
    assert not v.ok and v.problem is Problem.UNSUPPORTED
    v = check(INVOICES, DOC, _answer(invoice_number={"value": "inv-000001", "evidence": None}))
    assert not v.ok and "is empty" in v.errors[0]


def test_the_wrapper_is_never_evidence() -> None:
    tag = '<document id="inv-000001" type="txt">\nRECHNUNG'
    v = check(INVOICES, DOC, _answer(invoice_number={"value": "inv-000001", "evidence": tag}))
    assert not v.ok and v.problem is Problem.EVIDENCE


def test_a_date_field_holds_an_iso_date_or_is_refused() -> None:
    answer = _answer(invoice_date={"value": "7. Mai 2014", "evidence": "Rechnungsdatum 7. Mai 2014"})
    v = check(INVOICES, DOC, answer)
    assert not v.ok and v.problem is Problem.UNSUPPORTED
    assert "not a date written YYYY-MM-DD" in v.errors[0]
    assert date_fields(INVOICES.file_schema) == frozenset({"$.invoice_date", "$.due_date"})

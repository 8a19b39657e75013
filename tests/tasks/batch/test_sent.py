"""tasks.batch.sent: the text layers a batch pass sent, kept for the gate."""

from __future__ import annotations

from tasks.batch.sent import SentTexts
from tasks.request import Payload, SendAs
from tasks.source.readers import Content


def test_a_text_sent_is_kept_up_to_a_bound_and_nothing_else_is() -> None:
    sent = SentTexts(most=2)
    try:
        sent.keep("a", Payload("Total 12.00", Content("Total 12.00")))
        sent.keep("pdf", Payload("x", Content("x", media_type="application/pdf"), pdf=b"%PDF-"))
        sent.keep("as-pdf", Payload("x", Content("x"), SendAs.PDF, b"%PDF-", "application/pdf"))
        sent.keep("b", Payload("Żółć 3", Content("Żółć 3", encoding="cp1250")))
        sent.keep("c", Payload("over the bound", Content("over the bound")))
        a, b = sent.payload("a"), sent.payload("b")
        assert a is not None and a.text == "Total 12.00" and a.content == Content("Total 12.00")
        assert b is not None and b.content.encoding == "cp1250" and b.send is SendAs.TEXT
        assert [sent.payload(k) for k in ("pdf", "as-pdf", "c", "never")] == [None] * 4
    finally:
        sent.close()
    assert sent.payload("a") is None  # closed: read again
    sent.keep("d", Payload("late", Content("late")))  # a late keep is dropped, not an error
    assert sent.payload("d") is None

"""How each extracted value is supported, from an outcome's provenance (a leaf: no first-party
imports), so the report, the exports, `review list` and `eval` say the same thing:

  verified       its evidence was found in a PDF's text layer and boxed on its page
  verified_text  its evidence was found in the text (a text, Markdown, HTML, e-mail or Office
                 document; or text the gate found without a box)
  unverified     a value whose evidence no code could check: on a page without a text layer (a scan,
                 an image), where only the model's page citation is known; or no evidence at all
  missing        no value
  no_evidence    a value the schema asks no evidence for (a document kind, a list): not among the
                 classes above, which the report counts (`SUPPORT_ORDER`); `eval` and the results
                 table name it

Ordered least supported first (`SUPPORT_ORDER`), as a reviewer should see them.
"""

from __future__ import annotations

from typing import Any

VERIFIED = "verified"
VERIFIED_TEXT = "verified_text"
UNVERIFIED = "unverified"
MISSING = "missing"
NO_EVIDENCE = "no_evidence"
SUPPORT_ORDER = (UNVERIFIED, MISSING, VERIFIED_TEXT, VERIFIED)  # least supported first


def field_value(node: Any) -> Any:
    """A field's value: the `value` of a `{value, evidence}` field, else the field itself."""
    return node.get("value") if isinstance(node, dict) and "value" in node else node


def where_of(outcome: dict[str, Any], name: str) -> dict[str, Any]:
    """Where a top-level field's evidence sits (`{start, end, page, verified, boxes, bbox}`), or {}."""
    fields = ((outcome.get("provenance") or {}).get("fields")) or {}
    where = fields.get(f"$.{name}.evidence") or fields.get(name) or {}
    return where if isinstance(where, dict) else {}


def support_of(outcome: dict[str, Any], name: str) -> str:
    """The support class of top-level field `name` of an outcome (see the module docstring)."""
    node = (outcome.get("output") or {}).get(name)
    value = field_value(node)
    if value is None or value == "" or value == []:
        return MISSING
    if not (isinstance(node, dict) and "evidence" in node):
        return NO_EVIDENCE
    where = where_of(outcome, name)
    if where.get("boxes"):
        return VERIFIED
    if where.get("verified") is True or (
        where and where.get("verified") is None and where.get("start") is not None
    ):
        return VERIFIED_TEXT
    return UNVERIFIED


def supports(outcome: dict[str, Any]) -> dict[str, str]:
    """The support class of every top-level `{value, evidence}` field of an outcome's output (plain
    values, such as a document kind, and lists have no evidence of their own)."""
    output = outcome.get("output") or {}
    return {
        name: support_of(outcome, name)
        for name, node in output.items()
        if isinstance(node, dict) and "evidence" in node
    }


def weakest(outcome: dict[str, Any]) -> int:
    """The rank (index in SUPPORT_ORDER) of an outcome's least supported value with a value (a
    document whose values are all missing ranks as missing): the sort key of `review list`."""
    classes = [c for c in supports(outcome).values() if c != MISSING] or [MISSING]
    return min(SUPPORT_ORDER.index(c) for c in classes)


def support_line(outcome: dict[str, Any]) -> str:
    """The counts of an outcome's values by support class, least supported first:
    `unverified 2, verified 5` (`-` without `{value, evidence}` fields)."""
    classes = list(supports(outcome).values())
    return ", ".join(f"{c} {classes.count(c)}" for c in SUPPORT_ORDER if c in classes) or "-"


def support_counts(outcomes: list[dict[str, Any]]) -> dict[str, int]:
    """Values by support class over outcomes, least supported first (every class, zeros included)."""
    counts = dict.fromkeys(SUPPORT_ORDER, 0)
    for o in outcomes:
        for c in supports(o).values():
            counts[c] += 1
    return counts


SUPPORT_MEANING = {
    VERIFIED: "found in a PDF's text layer, boxed on its page",
    VERIFIED_TEXT: "found in a text document's text",
    UNVERIFIED: "no code could check it: a page without a text layer (the model's page citation only)",
    MISSING: "no value",
    NO_EVIDENCE: "a value the schema asks no evidence for",
}

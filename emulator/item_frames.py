"""Which items an array of objects gets: dispatch on the array's name and its item's fields."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from emulator.claims import claim_frames, conflict_frames
from emulator.frames import Frame
from emulator.grounding import Prompt
from emulator.line_items import row_frames
from emulator.roles import Role, roles_of
from emulator.source_code import finding_frames
from emulator.words import tokens, word_set

# Words in an array's name that choose how its items are built.
FINDING_WORDS = word_set(
    "finding findings issue issues problem problems comment comments warning warnings vulnerability "
    "vulnerabilities smell smells defect defects"
)
CONFLICT_WORDS = word_set(
    "conflict conflicts discrepancy discrepancies mismatch mismatches inconsistency inconsistencies "
    "contradiction contradictions disagreement disagreements"
)
ENTITY_WORDS = word_set(
    "entity entities vendor vendors party parties organization organizations company companies"
)
CLAIM_WORDS = ENTITY_WORDS | word_set(
    "claim claims fact facts group groups match matches duplicate duplicates link links relation relations "
    "cluster clusters agreement agreements shared common"
)
ROW_WORDS = word_set(
    "item items line lines row rows position positions product products entry entries charge charges "
    "service services"
)
GROUP_WORDS = word_set("name number category kind type vendor buyer")

BUILDERS: dict[str, Callable[[Prompt], list[Frame]]] = {
    "findings": finding_frames,
    "conflicts": conflict_frames,
    "rows": row_frames,
}


class ItemFrames:
    """The item frames of one request, each kind built once."""

    def __init__(self, prompt: Prompt) -> None:
        self.prompt = prompt
        self.frames: dict[str, list[Frame]] = {}

    def for_array(self, name: str, items: dict[str, Any], frame: Frame) -> list[Frame] | None:
        """One frame per array item: dispatch on the array's name and its item's fields; None when
        nothing in them names a kind of item this module builds."""
        if frame.per_doc:
            return frame.per_doc
        words = set(tokens(name))
        props = list(items.get("properties") or {})
        roles = {r for prop in props for r in roles_of(prop)[:1]}
        if words & FINDING_WORDS or Role.LINE_START in roles:
            if not self.prompt.per_file:  # integration: group the per-file findings shared by several files
                return self.frames_for("sub_claims", self.group_fields(props, sub=True), 2)
            return self.frames_for("findings")
        if words & CONFLICT_WORDS:
            return self.frames_for("conflicts")
        if words & CLAIM_WORDS:
            fields = self.group_fields(props, sub=False)
            return self.frames_for("claims", fields, 1 if fields and words & ENTITY_WORDS else 2)
        if words & ROW_WORDS or roles & {Role.QTY, Role.UNIT_PRICE}:
            rows = self.frames_for("rows")  # a list of non-numeric "items" in prose is not a table
            return rows if rows or roles & {Role.QTY, Role.UNIT_PRICE, Role.AMOUNT} else None
        return None

    def frames_for(self, kind: str, fields: set[str] | None = None, min_docs: int = 2) -> list[Frame]:
        key = f"{kind}:{sorted(fields or [])}:{min_docs}"
        if key not in self.frames:
            if kind == "claims" or kind == "sub_claims":
                self.frames[key] = claim_frames(self.prompt, fields, min_docs, sub=kind == "sub_claims")
            else:
                self.frames[key] = BUILDERS[kind](self.prompt)
        return self.frames[key]

    def group_fields(self, props: list[str], *, sub: bool) -> set[str] | None:
        """The record field an item groups by: one its schema names too, names and kinds first."""
        fields = {k.rsplit(".", 1)[-1] for _, r in self.prompt.records if ("__sub" in r) == sub for k in r}
        shared = [p for p in props if p in fields]
        preferred = [p for p in shared if set(tokens(p)) & GROUP_WORDS]
        return {(preferred or shared)[0]} if shared else None

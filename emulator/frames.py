"""A frame: what one generated object (or array item) is about, for the schema filler."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from emulator.grounding import Doc, Line
from emulator.roles import Role


@dataclass
class Frame:
    """What one item of an array is about: its source line and the values its fields may take."""

    doc: Doc
    line: Line | None = None
    known: dict[Role, Any] = field(default_factory=dict)
    hints: list[str] = field(default_factory=list)
    per_doc: list[Frame] = field(default_factory=list)
    top: bool = False
    named: dict[str, Any] = field(default_factory=dict)


def located(line: Line, doc_id: str | None) -> dict[Role, Any]:
    """The roles that say where `line` is: its document (as id and as file) and its line number."""
    return {Role.DOC_ID: doc_id, Role.FILE: doc_id, Role.LINE_START: line.number, Role.LINE_END: line.number}

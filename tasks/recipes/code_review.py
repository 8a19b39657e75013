"""Built-in recipe `code-review`: review each source file, then integrate across files.

The per-file pass records findings (with a verbatim `quote` of the code), and what the file exports
and imports; the integration pass follows those exports and imports to find data flows and problems
that only show across files.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tasks.recipes import Recipe, read_prompt
from tasks.recipes.thinking import ThinkingPolicy

VERSION = "1"

Severity = Literal["critical", "high", "medium", "low", "info"]

SOURCE_TYPES = frozenset(
    {"py", "js", "ts", "go", "rs", "java", "rb", "sh", "sql", "c", "h", "cpp", "txt", "md"}
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Finding(_Strict):
    file: str = Field(description="The file's document id (its path in the code base).")
    line_start: int = Field(description="First line of the problem, 1-based.")
    line_end: int = Field(description="Last line of the problem, 1-based (equal to line_start for one line).")
    severity: Severity = Field(description="critical / high / medium / low / info.")
    category: str = Field(
        description="Short kind: security, bug, error-handling, resource, todo, maintainability, ..."
    )
    message: str = Field(description="One sentence: what is wrong and why it matters.")
    quote: str = Field(description="The offending code copied verbatim from the file (one or a few lines).")


class CodeReviewFile(_Strict):
    """The review of one source file."""

    summary: str = Field(description="Two sentences on what the file does.")
    findings: list[Finding] = Field(description="Real problems in this file; empty when there are none.")
    exports: list[str] = Field(description="Functions, classes and constants this file offers to others.")
    imports: list[str] = Field(description="Modules and names this file uses from elsewhere.")


class Flow(_Strict):
    from_file: str = Field(description="The file a value or call comes from.")
    to_file: str = Field(description="The file it reaches.")
    what: str = Field(description="What passes (a function's return value, a parameter, a config value).")
    risk: str = Field(description="What can go wrong along this flow; 'none' when nothing.")
    doc_ids: list[str] = Field(description="The files involved, as doc ids.")


class CrossFinding(_Strict):
    files: list[str] = Field(description="The files involved, as doc ids.")
    severity: Severity = Field(description="critical / high / medium / low / info.")
    category: str = Field(description="Short kind: security, bug, error-handling, ...")
    message: str = Field(description="What goes wrong across these files.")
    quotes: list[str] = Field(description="Code quotes from the per-file findings, copied verbatim.")


class CoverageGap(_Strict):
    doc_id: str = Field(description="The file concerned.")
    reason: str = Field(description="Why it is a gap (failed, needs review, not used, ...).")


class CodeReviewIntegration(_Strict):
    """The cross-file review."""

    key_findings: list[str] = Field(description="The few most important cross-file findings.")
    flows: list[Flow] = Field(description="Data and control flows between files.")
    findings: list[CrossFinding] = Field(description="Problems that only show across files.")
    coverage_gaps: list[CoverageGap] = Field(description="Files not reviewed well or not connected.")


RECIPE = Recipe(
    name="code-review",
    version=VERSION,
    file_schema=CodeReviewFile,
    file_prompt=read_prompt("code_review_file.md"),
    integration_schema=CodeReviewIntegration,
    integration_prompt=read_prompt("code_review_integration.md"),
    doc_types=SOURCE_TYPES,
    evidence_fields=("quote",),
    # judging code is closer to reasoning than copying: the model may think, at medium effort
    thinking=ThinkingPolicy(effort="medium", thinking="adaptive"),
)

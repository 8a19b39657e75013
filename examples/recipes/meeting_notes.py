"""A worked example of a user recipe (docs/recipes.md walks through it): meeting notes in, decisions
and action items out, each with the sentence it came from as verbatim evidence.

    docmill run examples/recipes/meeting_notes --recipe examples/recipes/meeting_notes.py:RECIPE

Runs offline against the emulator (no ANTHROPIC_API_KEY needed).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tasks.recipes import Recipe

VERSION = "1"  # bump when the prompts or schemas change meaning: new results instead of old ones

_SOURCE = "The sentence of the notes this comes from, copied verbatim."


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")  # -> additionalProperties: false, as the API wants


class ActionItem(_Strict):
    task: str = Field(description="What has to be done, in a few words.")
    owner: str | None = Field(description="Who does it, as written; null when nobody is named.")
    source_text: str = Field(description=_SOURCE)


class Recommendation(_Strict):
    text: str = Field(description="The recommendation in one sentence.")
    source_text: str = Field(description=_SOURCE)


class MeetingNotes(_Strict):
    """What one set of meeting notes records."""

    title: str | None = Field(description="The meeting's title or subject; null when not stated.")
    action_items: list[ActionItem] = Field(description="Every task someone agreed to do, in order.")
    recommendations: list[Recommendation] = Field(description="Advice or proposals recorded in the notes.")


class Theme(_Strict):
    theme: str = Field(description="A topic that comes up in several meetings.")
    doc_ids: list[str] = Field(description="The notes (doc ids) where it comes up.")


class MeetingsIntegration(_Strict):
    """What the notes say together."""

    key_findings: list[str] = Field(description="The few most important findings, one sentence each.")
    themes: list[Theme] = Field(description="Topics shared by several meetings.")


FILE_PROMPT = """You read one set of meeting notes and record its action items and recommendations.
- Fill every field of the schema; use null (or an empty list) when the notes say nothing.
- `source_text` is the sentence of the notes the item comes from, copied verbatim.
- Never invent owners or tasks the notes do not state."""

INTEGRATION_PROMPT = """You read the per-meeting records of several meetings and list what they share:
the key findings and the themes that come up in more than one meeting, with their doc ids."""

RECIPE = Recipe(
    name="meeting-notes",
    version=VERSION,
    file_schema=MeetingNotes,
    file_prompt=FILE_PROMPT,
    integration_schema=MeetingsIntegration,
    integration_prompt=INTEGRATION_PROMPT,
    doc_types=frozenset({"txt", "md"}),
    key_fields=("title",),
    evidence_fields=("source_text",),
)

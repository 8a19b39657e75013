"""Source files as the code-review recipe sees them: notable lines as findings, imports and exports."""

from __future__ import annotations

from emulator.frames import Frame, located
from emulator.grounding import Doc, Line, Prompt
from emulator.roles import Role

SQL_WORDS = ("select ", "insert ", "update ", "delete ", "where ")
# fmt: off
NOTABLE = (  # (needle, kind); checked in order on lowercased lines
    ("eval(", "security"), ("exec(", "security"), ("password", "security"), ("secret", "security"),
    ("shell=true", "security"), ("pickle.load", "security"), ("md5", "security"),
    ("except:", "error-handling"), ("except exception: pass", "error-handling"),
    ("todo", "maintainability"), ("fixme", "maintainability"), ("xxx", "maintainability"),
    ("print(", "style"), ("== none", "style"),
)
# fmt: on


def notable_lines(doc: Doc) -> list[tuple[Line, str, str]]:
    """Lines of code worth a review finding: (line, kind, needle)."""
    out = []
    for line in doc.lines:
        low = line.text.lower()
        hit = next(((kind, needle) for needle, kind in NOTABLE if needle in low), None)
        if hit is None and any(w in low for w in SQL_WORDS) and ('" +' in low or 'f"' in low or "%" in low):
            hit = ("security", "sql")
        if hit:
            out.append((line, hit[0], hit[1]))
        if len(out) >= 50:
            break
    return out


SEVERITY_HINTS = {
    "security": ["critical", "high", "error", "major", "security", "vulnerability"],
    "error-handling": ["medium", "warning", "moderate", "major", "bug", "error_handling", "reliability"],
    "maintainability": ["low", "info", "minor", "note", "maintainability", "todo", "quality"],
    "style": ["low", "info", "minor", "nit", "style", "quality", "maintainability"],
}


def finding_frames(prompt: Prompt) -> list[Frame]:
    frames = []
    for doc in prompt.docs:
        for line, kind, needle in notable_lines(doc):
            file_id = doc.doc_id or (prompt.ids[0] if prompt.ids else "document")
            known = {
                **located(line, file_id),
                Role.EVIDENCE: line,
                Role.EXPLAIN: f"{kind}: line {line.number} contains `{needle}`",
                Role.CONFIDENCE: 0.9,
                Role.FIELD: kind,
            }
            frames.append(Frame(doc, line, known, [kind, *SEVERITY_HINTS[kind]]))
    return frames[:50]


def code_names(doc: Doc, kind: str) -> list[str]:
    """Top-level names a source file defines (`exports`) or the modules it uses (`imports`)."""
    out: list[str] = []
    for raw in doc.text.split("\n"):
        words = raw.replace("(", " ").replace(":", " ").replace(",", " ").split()
        if len(words) < 2 or raw[:1].isspace():
            continue
        if kind == "imports" and words[0] in ("import", "from", "require", "use", "#include"):
            out.append(words[1].strip(";\"'<>"))
        elif kind == "exports" and words[0] in ("def", "class", "function", "func", "fn", "pub", "export"):
            skip = words[1] in ("def", "fn", "function", "class", "const", "async") and len(words) > 2
            out.append(words[2] if skip else words[1])
    return list(dict.fromkeys(out))[:50]
